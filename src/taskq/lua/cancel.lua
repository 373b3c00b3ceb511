--[[
  cancel: end a task that is not running, or ask the worker that runs it to stop.
  A pending, delayed, dead or waiting task ends cancelled at once, taken out of its
  list or set (a waiting workflow step is in none: see _flow).
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
                          ('pending', 'delayed', 'running', 'dead' or 'waiting': a
                          workflow's step whose stage has not started)
  Returns: {outcome, state before}: outcome 'cancelled' (it ended now) | 'requested'
           (running: its worker is told) | 'unchanged' (it had ended, its cancel was
           requested already, or it is not in only_state: nothing changed) | 'unknown'
           (no record); an argument out of its range, or a key of another type
           where the task is taken from, gives a slot back or sends its event, is an
           error, and nothing is written
  Emits:   cancelled (state cancelled, with `from`: the state it left) |
           cancel_requested (state running)

  Taking a task out of ready (or its name's parked list, where it waits for a
  concurrency slot, or the DLQ) is O(the tasks pushed after it) (LREM, stopping at
  its one copy, from the end tasks are pushed at; a task released to the front of
  ready, at a worker's shutdown, is O(length of the list)), as in other list queues.
  A producer waiting for a task that ends here is woken (see watch.lua).
]]
--- @include "_common"
--- @include "_slots"
--- @include "_rates"
--- @include "_ended"
--- @include "_cancel"

local ready_key, delayed_key, leased_key, dlq_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local events_key, seq_key, epoch_key = KEYS[5], KEYS[6], KEYS[7]
local prefix, task_id, retention, only_state = ARGV[1], ARGV[2], ARGV[3], ARGV[5]

-- Checked before the first write (see whole_arg); retention by open_feed.
local completed_ttl = whole_arg('completed_ttl', ARGV[4], 1, LIMITS.ttl_ms)
if only_state ~= '' and only_state ~= 'pending' and only_state ~= 'delayed' and
    only_state ~= 'running' and only_state ~= 'dead' and only_state ~= 'waiting' then
  error("only_state must be one of '', 'pending', 'delayed', 'running', 'dead' or " ..
    "'waiting', not " .. tostring(only_state))
end

local queue = {ready = ready_key, delayed = delayed_key, leased = leased_key, dlq = dlq_key}
-- A cancel takes the task out of its place (a refused LREM is the first write) and
-- appends its event: the log must take it, and so must the places a workflow's step
-- that ends here moves its flow on to.
local places = cancel_types({events_key, 'stream'}, prefix, queue, task_id)
-- A record of another type is no task's (cancel_task answers 'unknown'): read with
-- pcall, so that it does not fail the call.
local flow_id = redis.pcall('HGET', prefix .. 'task:' .. task_id, 'flow')
if type(flow_id) == 'string' then flow_types(places, {}, prefix, task_id, flow_id) end
expect_types(places)
local feed = open_feed(events_key, seq_key, epoch_key, retention, server_now_ms())
local outcome, state = cancel_task(prefix, feed, queue, task_id, only_state, completed_ttl)
close_feed(feed)
return {outcome, state}
