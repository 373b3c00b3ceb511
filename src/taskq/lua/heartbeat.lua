--[[
  heartbeat: extend a lease, if the caller still holds it.
  KEYS[1] leased  ZSET    task id -> lease expiry (ms, server TIME)
  KEYS[2] events  STREAM  change feed
  KEYS[3] seq     STRING  last event sequence number
  KEYS[4] epoch   STRING  event log incarnation
  ARGV[1] prefix          queue key prefix; the task key derives from it
  ARGV[2] task_id
  ARGV[3] token           fencing token from lease
  ARGV[4] lease_ms        new lease length from now
  ARGV[5] retention       events kept in the stream
  Returns: 1 extended | 0 stale (lease lost: expired, reaped or taken over)
  Emits:   heartbeat (state running, at = new expiry)
]]
--- @include "_common"

local leased_key, events_key, seq_key, epoch_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local prefix, task_id, token = ARGV[1], ARGV[2], ARGV[3]
local lease_ms, retention = tonumber(ARGV[4]), ARGV[5]

local task_key = prefix .. 'task:' .. task_id
if not redis.call('ZSCORE', leased_key, task_id) then return 0 end
if redis.call('HGET', task_key, 'fencing_token') ~= token then return 0 end

local now = server_now_ms()
local feed = open_feed(events_key, seq_key, epoch_key, retention, now)
local expires = now + lease_ms
emit(feed, {'type', 'heartbeat', 'task', task_id, 'state', 'running', 'token', token,
  'at', expires})
redis.call('ZADD', leased_key, 'XX', expires, task_id)
redis.call('HSET', task_key, 'heartbeat_at', now)
close_feed(feed)
return 1
