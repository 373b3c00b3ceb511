--[[
  reap: handle leases that expired without an ack. Each counts as a failed attempt:
  the task waits its backoff on delayed, or goes to the DLQ when it has no retries
  left. The fencing token is bumped so the lost holder's token is stale at once.
  KEYS[1] leased  ZSET    task id -> lease expiry (ms, server TIME)
  KEYS[2] delayed ZSET    task id -> run-at (ms, server TIME)
  KEYS[3] dlq     LIST    dead task ids, most recent at the left
  KEYS[4] events  STREAM  change feed
  KEYS[5] seq     STRING  last event sequence number
  KEYS[6] epoch   STRING  event log incarnation
  ARGV[1] prefix          queue key prefix; task keys derive from it
  ARGV[2] limit           most leases to reap in this call (1 to 100000)
  ARGV[3] backoff_base_ms delay before the first retry (0 to 86400000: a day)
  ARGV[4] backoff_max_ms  cap on the delay (0 to 86400000)
  ARGV[5] jitter_seed     integer in [1, 2^31 - 2], drawn by the caller
  ARGV[6] retention       events kept in the stream (1 to 10^9)
  Returns: {task_id, 'delayed' | 'dead' | 'cancelled' | 'gone', ...} for each reaped
           lease (a task whose cancel was requested ends cancelled; an id whose record
           is gone, deleted or evicted, or of another type, is dropped from leased and
           nothing else is written); an argument out of its range, or a key of another
           type where a reaped task or a workflow it ends moves, or where its run's
           concurrency slot is given back, is an error, and nothing is written
  Emits:   reaped (state delayed, dead or cancelled); delayed and dead with error_type

  The record's error fields say the lease expired (error_type taskq.LeaseExpired); a
  producer waiting for a task that dies here is woken (see watch.lua). A reaped run's
  concurrency slot, if it held one, is given back (see _slots' free_slot), so a
  crashed worker's slots come back with its leases; a gone record's slot too.
]]
--- @include "_common"
--- @include "_slots"
--- @include "_ended"

local leased_key, delayed_key, dlq_key = KEYS[1], KEYS[2], KEYS[3]
local events_key, seq_key, epoch_key = KEYS[4], KEYS[5], KEYS[6]
local prefix, limit = ARGV[1], ARGV[2]
local base_ms, max_ms = ARGV[3], ARGV[4]
local seed, retention = ARGV[5], ARGV[6]

-- Checked before the first write (see whole_arg); retention by open_feed.
limit = whole_arg('limit', limit, 1, LIMITS.limit)
base_ms = whole_arg('backoff_base_ms', base_ms, 0, LIMITS.backoff_ms)
max_ms = whole_arg('backoff_max_ms', max_ms, 0, LIMITS.backoff_ms)
seed = whole_arg('jitter_seed', seed, 1, LIMITS.jitter_seed)

-- A Park-Miller generator spreads the jitter of leases reaped together, since
-- math.random inside scripts is not random and one draw per call would align them.
local function next_jitter()
  seed = (seed * 16807) % 2147483647
  return seed / 2147483647
end

local now = server_now_ms()
local feed = open_feed(events_key, seq_key, epoch_key, retention, now)
local reply = {}
local expired = redis.call('ZRANGEBYSCORE', leased_key, '-inf', now, 'LIMIT', 0, limit)
-- Each expired task goes to delayed or the DLQ: both, and the log, must take it.
-- A workflow's step that ends here (cancelled or dead) may move its flow on: the places
-- that writes must take it too.
local records, slots = {}, {}
if #expired > 0 then
  local places, ends = {events_key, 'stream', delayed_key, 'zset', dlq_key, 'list'}, {}
  for n, task_id in ipairs(expired) do
    local record = redis.pcall('HMGET', prefix .. 'task:' .. task_id, 'retries',
      'max_retries', 'worker', 'slot', 'fencing_token', unpack(CANCEL_FIELDS))
    -- A record of another type is no task's: the id is dropped, as one with none.
    if failed(record) then record = {} end
    records[n] = record
    -- The slot the run held, whose group's keys free_slot writes: a gone record's is
    -- looked for (lost_slot) now, before any write.
    local gone = not (record[1] or record[3] or record[5])
    slots[n] = record[4] or (gone and lost_slot(prefix, task_id)) or nil
    slot_types(places, prefix, slots[n])
    local dies = stored_whole(record[1], 0) >= stored_whole(record[2], 0)
    if record[10] and (record[6] or dies) then
      flow_types(places, ends, prefix, task_id, record[10])
    end
  end
  expect_types(places)
end
for n, task_id in ipairs(expired) do
  local task_key = prefix .. 'task:' .. task_id
  local record = records[n]
  local cancel = {record[6], record[7], record[8], record[9], record[10]}
  -- A field that is not a number (written by hand) reads as 0 rather than failing the
  -- reap of every expired lease after it.
  local retries, max_retries = stored_whole(record[1], 0), stored_whole(record[2], 0)
  local token = mint_token(record[5], now)
  local error_text = 'lease expired while held by worker ' .. (record[3] or '?') ..
    ' (attempt ' .. (retries + 1) .. '): the worker died, hung or was paused past its lease'
  redis.call('ZREM', leased_key, task_id)
  -- A record that is gone (deleted by hand, or evicted) is not made up: the id is dropped,
  -- and the slot it held found without it, lest its group stay full for ever.
  local gone = not (record[1] or record[3] or record[5])
  free_slot(prefix, task_id, slots[n])
  if not gone then redis.call('HSET', task_key, 'fencing_token', token) end
  if gone then
    reply[#reply + 1], reply[#reply + 2] = task_id, 'gone'
  elseif cancel[1] then
    emit(feed, {'type', 'reaped', 'task', task_id, 'state', 'cancelled', 'token', token,
      'retries', retries, 'error', error_text})
    end_cancelled(prefix, feed, task_id, cancel, nil)
    reply[#reply + 1], reply[#reply + 2] = task_id, 'cancelled'
  elseif retries >= max_retries then
    error_text = error_text .. '; no retries left, so the handler may be what kills it'
    emit(feed, {'type', 'reaped', 'task', task_id, 'state', 'dead', 'token', token,
      'retries', retries, 'error', error_text, 'error_type', 'taskq.LeaseExpired'})
    redis.call('HSET', task_key, 'state', 'dead', 'last_error', error_text, 'dead_at', now,
      'error_type', 'taskq.LeaseExpired', 'error_message', error_text, 'traceback', '')
    redis.call('LPUSH', dlq_key, task_id)
    if cancel[4] then wake_waiters(prefix, task_id) end
    if cancel[5] then step_ended(prefix, feed, task_id, cancel[5], 'dead', nil) end
    reply[#reply + 1], reply[#reply + 2] = task_id, 'dead'
  else
    retries = retries + 1
    local run_at = now + backoff_ms(retries, base_ms, max_ms, next_jitter())
    emit(feed, {'type', 'reaped', 'task', task_id, 'state', 'delayed', 'token', token,
      'retries', retries, 'error', error_text, 'error_type', 'taskq.LeaseExpired',
      'at', run_at})
    redis.call('HSET', task_key, 'state', 'delayed', 'retries', retries,
      'last_error', error_text, 'run_at', run_at, 'error_type', 'taskq.LeaseExpired',
      'error_message', error_text, 'traceback', '')
    redis.call('ZADD', delayed_key, run_at, task_id)
    reply[#reply + 1], reply[#reply + 2] = task_id, 'delayed'
  end
end
close_feed(feed)
return reply
