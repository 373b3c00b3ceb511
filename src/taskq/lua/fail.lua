--[[
  fail: record a failed attempt of a leased task, if the caller still holds the lease:
  schedule a retry on delayed (after a backoff, or after the delay the caller names),
  or move the task to the DLQ when it has no retries left or can never succeed.
  KEYS[1] leased  ZSET    task id -> lease expiry (ms, server TIME)
  KEYS[2] delayed ZSET    task id -> run-at (ms, server TIME)
  KEYS[3] dlq     LIST    dead task ids, most recent at the left
  KEYS[4] events  STREAM  change feed
  KEYS[5] seq     STRING  last event sequence number
  KEYS[6] epoch   STRING  event log incarnation
  ARGV[1] prefix          queue key prefix; the task key derives from it
  ARGV[2] task_id
  ARGV[3] token           fencing token from lease
  ARGV[4] error           text kept as last_error
  ARGV[5] backoff_base_ms delay before the first retry (0 to 86400000: a day)
  ARGV[6] backoff_max_ms  cap on the delay (0 to 86400000)
  ARGV[7] jitter          uniform random number in [0, 1), drawn by the caller
  ARGV[8] retention       events kept in the stream (1 to 10^9)
  ARGV[9] error_type      the exception's type, as module.Name ('' = unknown)
  ARGV[10] error_message  the exception's message
  ARGV[11] traceback      the whole formatted traceback ('' = none)
  ARGV[12] mode           'backoff' (retry after the backoff) | 'delay' (retry after
                          delay_ms) | 'dead' (to the DLQ now, whatever retries are left)
  ARGV[13] delay_ms       the delay of mode 'delay' (0 to 315360000000: ten years);
                          ignored, but still checked, in the other modes
  Returns: {'retry', retries, delay_ms} (delay_ms as an integer string) | {'dead',
           retries, '0'} | {'cancelled', retries, '0'} (its cancel was requested: it
           ends cancelled, never retried nor dead) | {'stale', 0, '0'}; an argument out
           of its range, or events or the place it goes to (delayed, dlq) holding
           another type, is an error, and nothing is written
  Emits:   failed (state delayed, dead or cancelled), with error and error_type

  The record keeps the error fields of the last failed attempt; a producer waiting for
  a task that dies here is woken (see watch.lua). The run's concurrency slot, if it
  held one, is given back (see _common's free_slot).
]]
--- @include "_common"
--- @include "_slots"
--- @include "_ended"

local leased_key, delayed_key, dlq_key = KEYS[1], KEYS[2], KEYS[3]
local events_key, seq_key, epoch_key = KEYS[4], KEYS[5], KEYS[6]
local prefix, task_id, token, error_text = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local base_ms, max_ms, jitter = ARGV[5], ARGV[6], ARGV[7]
local retention = ARGV[8]
local error_type, error_message, traceback = ARGV[9], ARGV[10], ARGV[11]
local mode, delay_ms = ARGV[12], ARGV[13]
if not delay_ms then
  error('fail needs 13 ARGV values (mode and delay_ms last), not ' .. #ARGV)
end

-- Checked before the first write (see whole_arg); retention by open_feed.
base_ms = whole_arg('backoff_base_ms', base_ms, 0, LIMITS.backoff_ms)
max_ms = whole_arg('backoff_max_ms', max_ms, 0, LIMITS.backoff_ms)
jitter = tonumber(jitter)
if not jitter or not (jitter >= 0 and jitter < 1) then
  error('jitter must be a number from 0 up to (not including) 1, not ' .. tostring(ARGV[7]))
end
if mode ~= 'backoff' and mode ~= 'delay' and mode ~= 'dead' then
  error("mode must be one of 'backoff', 'delay' or 'dead', not " .. tostring(mode))
end
delay_ms = whole_arg('delay_ms', delay_ms, 0, LIMITS.delay_ms)

local task_key = prefix .. 'task:' .. task_id
if not redis.call('ZSCORE', leased_key, task_id) then return {'stale', 0, '0'} end
local record = redis.call('HMGET', task_key, 'fencing_token', 'retries', 'max_retries',
  'slot', unpack(CANCEL_FIELDS))
if record[1] ~= token then return {'stale', 0, '0'} end
local cancel = {record[5], record[6], record[7], record[8], record[9]}

-- A count that is not a number (written by hand) reads as 0, as reap reads it.
local retries, max_retries = stored_whole(record[2], 0), stored_whole(record[3], 0)
local dies = mode == 'dead' or retries >= max_retries
-- The task leaves leased for delayed or the DLQ (unless it is cancelled): that place
-- must take it.
local places = {events_key, 'stream'}
if not cancel[1] then
  places[3], places[4] = delayed_key, 'zset'
  if dies then places[3], places[4] = dlq_key, 'list' end
end
-- A workflow's step that ends here (cancelled or dead) may start or fail its flow's
-- next stage.
if cancel[5] and (cancel[1] or dies) then
  flow_types(places, {}, prefix, task_id, cancel[5])
end
slot_types(places, prefix, record[4])  -- the slot it gives back
expect_types(places)
local now = server_now_ms()
local feed = open_feed(events_key, seq_key, epoch_key, retention, now)
-- Every way out of here ends the lease.
free_slot(prefix, task_id, record[4])
if cancel[1] then
  emit(feed, {'type', 'failed', 'task', task_id, 'state', 'cancelled', 'token', token,
    'retries', retries, 'error', error_text, 'error_type', error_type})
  redis.call('ZREM', leased_key, task_id)
  redis.call('HSET', task_key, 'last_error', error_text, 'error_type', error_type,
    'error_message', error_message, 'traceback', traceback)
  end_cancelled(prefix, feed, task_id, cancel, nil)
  close_feed(feed)
  return {'cancelled', retries, '0'}
end
if dies then
  emit(feed, {'type', 'failed', 'task', task_id, 'state', 'dead', 'token', token,
    'retries', retries, 'error', error_text, 'error_type', error_type})
  redis.call('ZREM', leased_key, task_id)
  redis.call('HSET', task_key, 'state', 'dead', 'last_error', error_text, 'dead_at', now,
    'error_type', error_type, 'error_message', error_message, 'traceback', traceback)
  redis.call('LPUSH', dlq_key, task_id)
  if cancel[4] then wake_waiters(prefix, task_id) end
  if cancel[5] then step_ended(prefix, feed, task_id, cancel[5], 'dead', nil) end
  close_feed(feed)
  return {'dead', retries, '0'}
end

retries = retries + 1
local delay = delay_ms
if mode == 'backoff' then delay = backoff_ms(retries, base_ms, max_ms, jitter) end
local run_at = now + delay
emit(feed, {'type', 'failed', 'task', task_id, 'state', 'delayed', 'token', token,
  'retries', retries, 'error', error_text, 'error_type', error_type, 'at', run_at})
redis.call('ZREM', leased_key, task_id)
redis.call('HSET', task_key, 'state', 'delayed', 'retries', retries,
  'last_error', error_text, 'run_at', run_at, 'error_type', error_type,
  'error_message', error_message, 'traceback', traceback)
redis.call('ZADD', delayed_key, run_at, task_id)
close_feed(feed)
return {'retry', retries, integer_text(delay)}
