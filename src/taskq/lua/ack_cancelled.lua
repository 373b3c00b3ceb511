--[[
  ack_cancelled: end a leased task cancelled, once the handler of a run that was told of
  its cancel (a heartbeat or effect() check answered "cancel") has returned or raised,
  if the caller still holds the lease. No result is kept.
  KEYS[1] leased  ZSET    task id -> lease expiry (ms, server TIME)
  KEYS[2] events  STREAM  change feed
  KEYS[3] seq     STRING  last event sequence number
  KEYS[4] epoch   STRING  event log incarnation
  ARGV[1] prefix          queue key prefix; the task key derives from it
  ARGV[2] task_id
  ARGV[3] token           fencing token from lease
  ARGV[4] retention       events kept in the stream (1 to 10^9; checked before any write)
  Returns: 1 cancelled | 0 stale, or no cancel was requested (nothing changed)
  Emits:   cancelled (state cancelled, from running)

  The run's concurrency slot, if it held one, is given back (see _common's free_slot).
]]
--- @include "_common"
--- @include "_slots"
--- @include "_ended"

local leased_key, events_key, seq_key, epoch_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local prefix, task_id, token, retention = ARGV[1], ARGV[2], ARGV[3], ARGV[4]

local task_key = prefix .. 'task:' .. task_id
if not redis.call('ZSCORE', leased_key, task_id) then return 0 end
local record = redis.call('HMGET', task_key, 'fencing_token', 'slot', unpack(CANCEL_FIELDS))
if record[1] ~= token or not record[3] then return 0 end

-- Checked before the first write: refused part way, the task would be off leased with
-- its record still running.
local places = {events_key, 'stream'}
slot_types(places, prefix, record[2])
if record[7] then flow_types(places, {}, prefix, task_id, record[7]) end
expect_types(places)
local now = server_now_ms()
local feed = open_feed(events_key, seq_key, epoch_key, retention, now)
emit(feed, {'type', 'cancelled', 'task', task_id, 'state', 'cancelled', 'from', 'running',
  'token', token})
redis.call('ZREM', leased_key, task_id)
free_slot(prefix, task_id, record[2])
end_cancelled(prefix, feed, task_id, {record[3], record[4], record[5], record[6], record[7]},
  nil)
close_feed(feed)
return 1
