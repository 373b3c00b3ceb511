--[[
  heartbeat: extend leases, each only if the caller still holds it.
  One call takes every lease a worker holds, so a beat is one round trip however many
  tasks are in hand.
  KEYS[1] leased  ZSET    task id -> lease expiry (ms, server TIME)
  KEYS[2] events  STREAM  change feed
  KEYS[3] seq     STRING  last event sequence number
  KEYS[4] epoch   STRING  event log incarnation
  ARGV[1] prefix          queue key prefix; task keys derive from it
  ARGV[2] lease_ms        new lease length from now, ms, 1 to LIMITS.lease_ms
  ARGV[3] retention       events kept in the stream
  ARGV[4] count           tasks in this call; then two values per task:
  ARGV[5] task_id
  ARGV[6] token           fencing token from lease
  Returns: {2 | 1 | 0, ...} per task: 2 extended, and the task's cancel was requested
           (see cancel.lua: the holder is to stop and settle it cancelled) | 1 extended |
           0 stale (lease lost: expired, reaped or taken over; nothing changed for it)
  Emits:   heartbeat (state running, at = new expiry), one per extended lease
]]
--- @include "_common"

local leased_key, events_key, seq_key, epoch_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local prefix, retention = ARGV[1], ARGV[3]

-- Checked before the first write (see whole_arg); retention by open_feed.
local lease_ms = whole_arg('lease_ms', ARGV[2], 1, LIMITS.lease_ms)
local count = whole_arg('count', ARGV[4], 0, (#ARGV - 4) / 2)

local now = server_now_ms()
local expires = integer_text(now + lease_ms)
local now_text = integer_text(now)
-- First every pair is judged (reads only), then the renewals are written: a key of
-- another type, refused part way, would leave leases extended without their events.
-- `renewed_with` and `answered` answer a second copy of a pair in one call without a
-- second renewal.
local renewed, renewed_with, answered = {}, {}, {}

local function judge(task_id, token)
  if renewed_with[task_id] then
    return renewed_with[task_id] == token and answered[task_id] or 0
  end
  if not redis.call('ZSCORE', leased_key, task_id) then return 0 end
  local record = redis.call('HMGET', prefix .. 'task:' .. task_id, 'fencing_token',
    'cancel_requested')
  if record[1] ~= token then return 0 end
  renewed_with[task_id], answered[task_id] = token, record[2] and 2 or 1
  renewed[#renewed + 1] = task_id
  return answered[task_id]
end

local reply = {}
for i = 0, count - 1 do
  local base = 5 + i * 2
  reply[#reply + 1] = judge(ARGV[base], ARGV[base + 1])
end
expect_types({events_key, 'stream'})
local feed = open_feed(events_key, seq_key, epoch_key, retention, now)
local scored = {}
for _, task_id in ipairs(renewed) do
  emit(feed, {'type', 'heartbeat', 'task', task_id, 'state', 'running',
    'token', renewed_with[task_id], 'at', expires})
  redis.call('HSET', prefix .. 'task:' .. task_id, 'heartbeat_at', now_text)
  scored[#scored + 1], scored[#scored + 2] = expires, task_id
end
for i = 1, #scored, CHUNK do
  redis.call('ZADD', leased_key, 'XX', unpack(scored, i, math.min(i + CHUNK - 1, #scored)))
end
close_feed(feed)
return reply
