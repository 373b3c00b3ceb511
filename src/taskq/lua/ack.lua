--[[
  ack: mark leased tasks completed, each only if the caller still holds its lease.
  One call takes a batch, so a worker settles every finished task in one round trip.
  KEYS[1] leased  ZSET    task id -> lease expiry (ms, server TIME)
  KEYS[2] events  STREAM  change feed
  KEYS[3] seq     STRING  last event sequence number
  KEYS[4] epoch   STRING  event log incarnation
  ARGV[1] prefix          queue key prefix; task keys derive from it
  ARGV[2] retention       events kept in the stream (1 to 10^9)
  ARGV[3] completed_ttl   ms a completed record is kept (1 to 315360000000: ten years;
                          longer if its idempotency key outlives that, so the key
                          never names a missing record)
  ARGV[4] count           tasks in this call; then two values per task:
  ARGV[5] task_id
  ARGV[6] token           fencing token from lease
  Returns: {1 | 0, ...} per task: 1 acked | 0 stale (nothing changed for it); an
           argument out of its range is an error, and nothing is written
  Emits:   completed, one per acked task
]]
--- @include "_common"

local leased_key, events_key, seq_key, epoch_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local prefix, retention = ARGV[1], ARGV[2]
local completed_ttl, count = ARGV[3], ARGV[4]

-- Checked before the first write (see whole_arg); retention by open_feed.
completed_ttl = whole_arg('completed_ttl', completed_ttl, 1, LIMITS.ttl_ms)
count = whole_arg('count', count, 0, (#ARGV - 4) / 2)

local now = server_now_ms()
local now_text = integer_text(now)
local feed = open_feed(events_key, seq_key, epoch_key, retention, now)
-- Acked ids leave leased together, in one ZREM at the end; `acked` makes a second copy
-- of an id in the same call stale, as it was when each ack removed its own id.
local settled, acked = {}, {}

local function ack_one(task_id, token)
  local task_key = prefix .. 'task:' .. task_id
  if acked[task_id] or not redis.call('ZSCORE', leased_key, task_id) then return 0 end
  local record = redis.call('HMGET', task_key, 'fencing_token', 'idempotency_key')
  if record[1] ~= token then return 0 end
  emit(feed, {'type', 'completed', 'task', task_id, 'state', 'completed', 'token', token})
  settled[#settled + 1], acked[task_id] = task_id, true
  redis.call('HSET', task_key, 'state', 'completed', 'completed_at', now_text)
  local ttl = completed_ttl
  local idem_key = record[2]
  if idem_key and idem_key ~= '' then
    local left = redis.call('PTTL', prefix .. 'idem:' .. idem_key)
    if left > completed_ttl then ttl = left end
  end
  redis.call('PEXPIRE', task_key, integer_text(ttl))
  return 1
end

local reply = {}
for i = 0, count - 1 do
  local base = 5 + i * 2
  reply[#reply + 1] = ack_one(ARGV[base], ARGV[base + 1])
end
call_chunked('ZREM', leased_key, settled)
close_feed(feed)
return reply
