--[[
  release: give a leased task back without using a retry (graceful shutdown), if the
  caller still holds the lease. It goes to the front of its priority's ready list: it
  already waited.
  KEYS[1] leased  ZSET    task id -> lease expiry (ms, server TIME)
  KEYS[2] ready   LIST    task ids of the default priority that can run now (the right
                          end is the front; other priorities: see _common)
  KEYS[3] events  STREAM  change feed
  KEYS[4] seq     STRING  last event sequence number
  KEYS[5] epoch   STRING  event log incarnation
  KEYS[6] wake    LIST    wake-up tokens for idle workers
  ARGV[1] prefix          queue key prefix; the task key derives from it
  ARGV[2] task_id
  ARGV[3] token           fencing token from lease
  ARGV[4] retention       events kept in the stream (1 to 10^9; checked before any write)
  Returns: 1 released | 2 ended cancelled instead (its cancel was requested) | 0 stale
           (nothing changed)
  Emits:   released (state pending, or cancelled)

  The run's concurrency slot, if it held one, is given back (see _common's free_slot).
]]
--- @include "_common"
--- @include "_slots"
--- @include "_ended"

local leased_key, ready_key = KEYS[1], KEYS[2]
local events_key, seq_key, epoch_key, wake_key = KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local prefix, task_id, token, retention = ARGV[1], ARGV[2], ARGV[3], ARGV[4]

local task_key = prefix .. 'task:' .. task_id
if not redis.call('ZSCORE', leased_key, task_id) then return 0 end
local record = redis.call('HMGET', task_key, 'fencing_token', 'priority', 'slot',
  unpack(CANCEL_FIELDS))
if record[1] ~= token then return 0 end
local cancel = {record[4], record[5], record[6], record[7], record[8]}

-- The task goes back to its ready list: that list, and the log, must take it.
local places = ready_types({events_key, 'stream'}, ready_key, tonumber(record[2]))
if cancel[1] and cancel[5] then flow_types(places, {}, prefix, task_id, cancel[5]) end
slot_types(places, prefix, record[3])  -- the slot it gives back
expect_types(places)
local now = server_now_ms()
local feed = open_feed(events_key, seq_key, epoch_key, retention, now)
free_slot(prefix, task_id, record[3])
if cancel[1] then
  emit(feed, {'type', 'released', 'task', task_id, 'state', 'cancelled', 'token', token})
  redis.call('ZREM', leased_key, task_id)
  end_cancelled(prefix, feed, task_id, cancel, nil)
  close_feed(feed)
  return 2
end
emit(feed, {'type', 'released', 'task', task_id, 'state', 'pending', 'token', token})
redis.call('ZREM', leased_key, task_id)
redis.call('HSET', task_key, 'state', 'pending', 'run_at', now)
push_ready(ready_key, task_id, tonumber(record[2]), true)
wake_workers(wake_key, 1)
close_feed(feed)
return 1
