--[[
  cancel: end a task that is not running, or ask the worker that runs it to stop.
  A pending, delayed or dead task ends cancelled at once, taken out of its list or set.
  A running one keeps its lease: its record is flagged, the holder's next heartbeat
  (or effect() check) is answered "cancel", and the task ends cancelled when the
  holder settles it (ack_cancelled), or when fail, release or reap next touch it.
  KEYS[1] ready   LIST    task ids of the default priority that can run now (other
                          priorities: see _common)
  KEYS[2] delayed ZSET    task id -> run-at (ms, server TIME)
  KEYS[3] leased  ZSET    task id -> lease expiry (ms, server TIME)
  KEYS[4] dlq     LIST    dead task ids
  KEYS[5] events  STREAM  change feed
  KEYS[6] seq     STRING  last event sequence number
  KEYS[7] epoch   STRING  event log incarnation
  ARGV[1] prefix          queue key prefix; the task key derives from it
  ARGV[2] task_id
  ARGV[3] retention       events kept in the stream (1 to 10^9)
  ARGV[4] completed_ttl   ms a cancelled record is kept, as a completed one (1 to
                          315360000000; longer if its idempotency key outlives that)
  ARGV[5] only_state      '' = cancel in any state; else only a task in this state
                          ('pending', 'delayed', 'running' or 'dead')
  Returns: {outcome, state before}: outcome 'cancelled' (it ended now) | 'requested'
           (running: its worker is told) | 'unchanged' (it had ended, its cancel was
           requested already, or it is not in only_state: nothing changed) | 'unknown'
           (no record); an argument out of its range is an error, and nothing is
           written
  Emits:   cancelled (state cancelled, with `from`: the state it left) |
           cancel_requested (state running)

  Taking a task out of ready (or its name's parked list, where it waits for a
  concurrency slot) is O(length of the list) (LREM), as in other list queues.
  A producer waiting for a task that ends here is woken (see watch.lua).
]]
--- @include "_common"

local ready_key, delayed_key, leased_key, dlq_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local events_key, seq_key, epoch_key = KEYS[5], KEYS[6], KEYS[7]
local prefix, task_id, retention, only_state = ARGV[1], ARGV[2], ARGV[3], ARGV[5]

-- Checked before the first write (see whole_arg); retention by open_feed.
local completed_ttl = whole_arg('completed_ttl', ARGV[4], 1, LIMITS.ttl_ms)
if only_state ~= '' and only_state ~= 'pending' and only_state ~= 'delayed' and
    only_state ~= 'running' and only_state ~= 'dead' then
  error("only_state must be one of '', 'pending', 'delayed', 'running' or 'dead', not " ..
    tostring(only_state))
end

local task_key = prefix .. 'task:' .. task_id
local record = redis.call('HMGET', task_key, 'state', 'fencing_token', 'result_ttl',
  'priority', 'name', 'parked', 'limit_key', unpack(CANCEL_FIELDS))
local state = record[1]
if not state then return {'unknown', ''} end
if only_state ~= '' and state ~= only_state then return {'unchanged', state} end
local cancel = {record[8], record[9], record[10], record[11]}
-- The record outlives the task's end as a completed one would.
local ttl = tonumber(record[3]) or completed_ttl

local now = server_now_ms()
local feed = open_feed(events_key, seq_key, epoch_key, retention, now)

if state == 'running' and redis.call('ZSCORE', leased_key, task_id) then
  if cancel[1] then return {'unchanged', state} end
  emit(feed, {'type', 'cancel_requested', 'task', task_id, 'state', 'running',
    'token', record[2]})
  redis.call('HSET', task_key, 'cancel_requested', feed.now, 'cancel_ttl', integer_text(ttl))
  close_feed(feed)
  return {'requested', state}
end

local removed = 0
if state == 'pending' and record[6] == 'back' then
  -- Sent back to ready from its parked list, a slot promised to it (see _common).
  local priority = tonumber(record[4])
  removed = redis.call('LREM', ready_list(ready_key, priority), 0, task_id)
  forget_if_empty(ready_key, priority)
  redis.call('SREM', unparked_key(prefix, limit_group(record[5], record[7])), task_id)
elseif state == 'pending' and record[6] then
  -- Parked for a concurrency slot (see _common).
  local group = limit_group(record[5], record[7])
  local list = parked_key(prefix, group)
  removed = redis.call('LREM', list, 0, task_id)
  if redis.call('LLEN', list) == 0 then
    redis.call('SREM', parked_names_key(prefix), group)
    forget_group(prefix, group)
  end
elseif state == 'pending' then
  local priority = tonumber(record[4])
  removed = redis.call('LREM', ready_list(ready_key, priority), 0, task_id)
  forget_if_empty(ready_key, priority)
elseif state == 'delayed' then
  removed = redis.call('ZREM', delayed_key, task_id)
elseif state == 'dead' then
  removed = redis.call('LREM', dlq_key, 0, task_id)
end
-- Completed and cancelled tasks have ended; a record whose state and structure
-- disagree is left as it is rather than guessed at.
if removed == 0 then return {'unchanged', state} end

emit(feed, {'type', 'cancelled', 'task', task_id, 'state', 'cancelled', 'from', state})
end_cancelled(prefix, task_id, feed.now, cancel, ttl)
close_feed(feed)
return {'cancelled', state}
