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
  ARGV[4] count           tasks in this call; then three values per task:
  ARGV[5] task_id
  ARGV[6] token           fencing token from lease
  ARGV[7] result          the handler's return value as JSON text; '' = none kept; a
                          lone NUL (no JSON text) = none: the run was cut off at a
                          worker's shutdown after its effect, and a workflow step so
                          ended fails its stage (`cut`): it has nothing to hand on
  Returns: {1 | 0, ...} per task: 1 acked | 0 stale (nothing changed for it, and its
           result is not kept); an argument out of its range, or a key an accepted
           ack writes (the log, a concurrency slot's keys) holding another type, is an
           error, and nothing is written (a done list of another type wakes no one)
  Emits:   completed, one per acked task, with the result when it is at most
           FEED_RESULT_BYTES long (else its length as result_bytes), or cut 1

  The record keeps the result for its result_ttl (set at enqueue) or completed_ttl.
  A producer waiting for the task (see watch.lua) is woken through its done list.
  The run's concurrency slot, if it held one, is given back (see _common's free_slot).
]]
--- @include "_common"
--- @include "_slots"
--- @include "_ended"

local leased_key, events_key, seq_key, epoch_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local prefix, retention = ARGV[1], ARGV[2]
local completed_ttl, count = ARGV[3], ARGV[4]

-- Checked before the first write (see whole_arg); retention by open_feed.
completed_ttl = whole_arg('completed_ttl', completed_ttl, 1, LIMITS.ttl_ms)
count = whole_arg('count', count, 0, (#ARGV - 4) / 3)

-- Larger results stay in the record only: the stream keeps `retention` events, and
-- each one carrying a megabyte would hold that many megabytes of memory.
local FEED_RESULT_BYTES = 1024
local CUT = '\0'

local now = server_now_ms()
local now_text = integer_text(now)
-- Acked ids leave leased together, in one ZREM at the end; `acked` makes a second copy
-- of an id in the same call stale, as it was when each ack removed its own id.
local settled, acked = {}, {}

-- First every ack is judged and the keys its end writes are checked, then they are all
-- written: the ZREM comes last, so a write Redis refused part way (a key of another
-- type) would leave completed tasks on leased, to be reaped and run again.
local reply, accepted, places, ends = {}, {}, {events_key, 'stream'}, {}
for i = 0, count - 1 do
  local base = 5 + i * 3
  local task_id, token = ARGV[base], ARGV[base + 1]
  reply[i + 1] = 0
  if not acked[task_id] and redis.call('ZSCORE', leased_key, task_id) then
    local record = redis.call('HMGET', prefix .. 'task:' .. task_id, 'fencing_token',
      'idempotency_key', 'result_ttl', 'waiters', 'slot', 'flow')
    if record[1] == token then
      acked[task_id], reply[i + 1] = true, 1
      accepted[#accepted + 1] = {task_id, token, ARGV[base + 2], record}
      slot_types(places, prefix, record[5])
      if record[6] then flow_types(places, ends, prefix, task_id, record[6]) end
    end
  end
end
expect_types(places)
local feed = open_feed(events_key, seq_key, epoch_key, retention, now)

local function ack_one(task_id, token, result, record)
  local task_key = prefix .. 'task:' .. task_id
  local event = {'type', 'completed', 'task', task_id, 'state', 'completed', 'token', token}
  local cut = result == CUT
  if cut then
    result = ''
    event[#event + 1], event[#event + 2] = 'cut', 1
    -- Why it has no result, for its handle, its flow's failure and the dashboards.
    redis.call('HSET', task_key, 'error_type', 'taskq.errors.NoResultError',
      'error_message', "its handler was cut off at a worker's shutdown after its " ..
      'effect: it completed with no result to hand on')
  end
  if result ~= '' then
    if #result <= FEED_RESULT_BYTES then
      event[#event + 1], event[#event + 2] = 'result', result
    else
      event[#event + 1], event[#event + 2] = 'result_bytes', #result
    end
  end
  emit(feed, event)
  settled[#settled + 1] = task_id
  if result ~= '' then
    redis.call('HSET', task_key, 'state', 'completed', 'completed_at', now_text,
      'result', result)
  else
    redis.call('HSET', task_key, 'state', 'completed', 'completed_at', now_text)
  end
  expire_ended(prefix, task_key, stored_whole(record[3], completed_ttl), record[2])
  if record[4] then wake_waiters(prefix, task_id) end
  free_slot(prefix, task_id, record[5])
  if record[6] then
    step_ended(prefix, feed, task_id, record[6], cut and 'cut' or 'completed', result)
  end
end

for _, ack in ipairs(accepted) do ack_one(ack[1], ack[2], ack[3], ack[4]) end
call_chunked('ZREM', leased_key, settled)
close_feed(feed)
return reply
