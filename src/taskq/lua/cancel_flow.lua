--[[
  cancel_flow: cancel a running workflow (see _flow) in one step: it will start no
  further stage, and every step of it is cancelled as cancel.lua cancels a task: a
  waiting, pending, delayed or dead step ends cancelled now; a running one is flagged,
  so its worker is told at its next heartbeat and it ends cancelled when it settles.
  KEYS[1] ready   LIST    task ids of the default priority that can run now (other
                          priorities: see _common)
  KEYS[2] delayed ZSET    task id -> run-at (ms, server TIME)
  KEYS[3] leased  ZSET    task id -> lease expiry (ms, server TIME)
  KEYS[4] dlq     LIST    dead task ids
  KEYS[5] events  STREAM  change feed
  KEYS[6] seq     STRING  last event sequence number
  KEYS[7] epoch   STRING  event log incarnation
  ARGV[1] prefix          queue key prefix; flow and task keys derive from it
  ARGV[2] flow_id
  ARGV[3] retention       events kept in the stream (1 to 10^9)
  ARGV[4] completed_ttl   ms a cancelled step's record is kept, as a completed one (1
                          to 315360000000)
  Returns: {outcome, state before, steps ended now, steps told to stop}: outcome
           'cancelled' (it was running) | 'unchanged' (it had ended: nothing changed) |
           'unknown' (no such flow); an argument out of its range, or a key of
           another type where a step is taken from, gives a slot back or sends its
           event, is an error, and nothing is written
  Emits:   cancelled (state cancelled, with `from`) per step ended now |
           cancel_requested (state running) per running step
]]
--- @include "_common"
--- @include "_slots"
--- @include "_rates"
--- @include "_ended"
--- @include "_cancel"

local ready_key, delayed_key, leased_key, dlq_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local events_key, seq_key, epoch_key = KEYS[5], KEYS[6], KEYS[7]
local prefix, flow_id, retention = ARGV[1], ARGV[2], ARGV[3]

-- Checked before the first write (see whole_arg); retention by open_feed.
local completed_ttl = whole_arg('completed_ttl', ARGV[4], 1, LIMITS.ttl_ms)

local flow = flow_key(prefix, flow_id)
local f = redis.call('HMGET', flow, 'state', 'stages')
if not f[1] then return {'unknown', '', 0, 0} end
if f[1] ~= 'running' then return {'unchanged', f[1], 0, 0} end

-- Each stage's steps newest first: they were pushed onto ready in order, so a few
-- taken out one by one are each found nearest the list's head.
local steps = {}
for k = 1, tonumber(f[2]) do
  for i = tonumber(redis.call('HGET', flow, 'size:' .. k)), 1, -1 do
    steps[#steps + 1] = flow_step_id(flow_id, k, i)
  end
end

-- Checked before the first write, as cancel.lua does: refused in close_feed, or at a
-- step, every step's cancel before it would be kept without its event.
local queue = {ready = ready_key, delayed = delayed_key, leased = leased_key, dlq = dlq_key}
local places = {events_key, 'stream'}
for _, step in ipairs(steps) do cancel_types(places, prefix, queue, step) end
expect_types(places)
local feed = open_feed(events_key, seq_key, epoch_key, retention, server_now_ms())
-- First, so that no step's end below starts a stage (advance_flow needs 'running').
finish_flow(flow, 'cancelled', feed.now)
-- Many steps waiting in one list are taken out of it in one walk: one by one, each
-- would walk every task pushed after it.
local swept = sweep_lists(prefix, queue, steps)
local ended, told = 0, 0
for _, step in ipairs(steps) do
  local outcome = cancel_task(prefix, feed, queue, step, '', completed_ttl, swept)
  if outcome == 'cancelled' then ended = ended + 1 end
  if outcome == 'requested' then told = told + 1 end
end
close_feed(feed)
return {'cancelled', 'running', ended, told}
