--[[
  ack: mark a leased task completed, if the caller still holds the lease.
  KEYS[1] leased  ZSET    task id -> lease expiry (ms, server TIME)
  KEYS[2] events  STREAM  change feed
  KEYS[3] seq     STRING  last event sequence number
  KEYS[4] epoch   STRING  event log incarnation
  ARGV[1] prefix          queue key prefix; the task key derives from it
  ARGV[2] task_id
  ARGV[3] token           fencing token from lease
  ARGV[4] retention       events kept in the stream
  ARGV[5] completed_ttl   ms the completed record is kept (longer if its idempotency
                          key outlives that, so the key never names a missing record)
  Returns: 1 acked | 0 stale (nothing changed)
  Emits:   completed
]]
--- @include "_common"

local leased_key, events_key, seq_key, epoch_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local prefix, task_id, token, retention = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local completed_ttl = tonumber(ARGV[5])

local task_key = prefix .. 'task:' .. task_id
if not redis.call('ZSCORE', leased_key, task_id) then return 0 end
if redis.call('HGET', task_key, 'fencing_token') ~= token then return 0 end

local now = server_now_ms()
emit(events_key, seq_key, epoch_key, retention, now,
  {'type', 'completed', 'task', task_id, 'state', 'completed', 'token', token})
redis.call('ZREM', leased_key, task_id)
redis.call('HSET', task_key, 'state', 'completed', 'completed_at', now)
local idem_key = redis.call('HGET', task_key, 'idempotency_key')
if idem_key and idem_key ~= '' then
  local left = redis.call('PTTL', prefix .. 'idem:' .. idem_key)
  if left > completed_ttl then completed_ttl = left end
end
redis.call('PEXPIRE', task_key, completed_ttl)
return 1
