--[[
  enqueue: create task records and put their ids on ready (or on delayed when they
  have a delay), skipping each task whose id or idempotency key already names a task.
  One call takes a whole batch, so a batch is one round trip on a single node and on
  a cluster alike (cluster pipelines cannot carry scripts).
  KEYS[1] ready   LIST    task ids of the default priority that can run now (workers
                          pop the right end; other priorities: see _common)
  KEYS[2] delayed ZSET    task id -> run-at (ms, server TIME)
  KEYS[3] events  STREAM  change feed
  KEYS[4] seq     STRING  last event sequence number
  KEYS[5] epoch   STRING  event log incarnation
  KEYS[6] wake    LIST    wake-up tokens for idle workers
  ARGV[1] prefix          queue key prefix; task and idempotency keys derive from it
  ARGV[2] retention       events kept in the stream (1 to 10^9)
  ARGV[3] count           tasks in this call (0 to 10000); then eleven values per task:
  ARGV[4] task_id
  ARGV[5] name            registered task name
  ARGV[6] payload         JSON text
  ARGV[7] delay_ms        0 = ready now (0 to 315360000000: ten years)
  ARGV[8] run_at_ms       0 = none; else the server time (ms) to run at, which wins over
                          delay_ms: ready now if past, refused if over ten years ahead
  ARGV[9] max_retries     retries before the task goes to the DLQ (0 to 1000)
  ARGV[10] idempotency_key '' = none
  ARGV[11] idempotency_ttl seconds the key keeps naming the task (1 to 315360000)
  ARGV[12] result_ttl_ms  '' = the ack's completed_ttl; else ms its completed record
                          (and result) is kept (1 to 315360000000)
  ARGV[13] priority       0 (lowest) to 9 (highest); 5 is the default
  ARGV[14] limit_key      '' = none; else the value its concurrency limit is kept per
                          (the limit's slots are per name and key: see _common)
  Returns: {task_id, 1 | 0, ...} per task: 1 created | 0 duplicate, with the original
           task's id (nothing written for a duplicate, but for a key that named no
           task and now names the task its given id named: see bind_key); an argument
           out of its range, a record, an idempotency key, or events or a list or set
           it puts a task on holding another type (or a key holding no task id), is an
           error, and nothing is written
  Emits:   enqueued (state pending or delayed, with priority when not the default and
           limit_key when it has one), one per created task
]]
--- @include "_common"

local ready_key, delayed_key = KEYS[1], KEYS[2]
local events_key, seq_key, epoch_key, wake_key = KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local prefix, retention, count = ARGV[1], ARGV[2], ARGV[3]

-- Checked before the first write (see whole_arg): a bad value in the tenth task must
-- not leave nine written without their events.
local WIDTH = 11
count = whole_arg('count', count, 0, LIMITS.count)
if #ARGV ~= 3 + count * WIDTH then
  error('count ' .. count .. ' needs ' .. (3 + count * WIDTH) .. ' ARGV values, not ' .. #ARGV)
end
local now = server_now_ms()
-- Each task's delay from now, in ms: its run_at when it has one, else its delay.
local delays, priorities = {}, {}
for i = 0, count - 1 do
  local base = 4 + i * WIDTH
  local delay = whole_arg('delay_ms', ARGV[base + 3], 0, LIMITS.delay_ms)
  local run_at = whole_arg('run_at_ms', ARGV[base + 4], 0, LIMITS.run_at_ms)
  if run_at > 0 then
    delay = math.max(0, run_at - now)
    if delay > LIMITS.delay_ms then
      error('run_at_ms ' .. ARGV[base + 4] .. ' is more than ten years after the server ' ..
        'time ' .. integer_text(now))
    end
  end
  delays[i] = delay
  whole_arg('max_retries', ARGV[base + 5], 0, LIMITS.max_retries)
  if ARGV[base + 6] ~= '' then
    whole_arg('idempotency_ttl', ARGV[base + 7], 1, LIMITS.idempotency_ttl)
  end
  if ARGV[base + 8] ~= '' then
    whole_arg('result_ttl_ms', ARGV[base + 8], 1, LIMITS.ttl_ms)
  end
  priorities[i] = whole_arg('priority', ARGV[base + 9], 0, LIMITS.priority)
end

-- The places this call puts tasks, and the log, are checked before its first write.
local places = {events_key, 'stream'}
for i = 0, count - 1 do
  if delays[i] > 0 then
    places[#places + 1], places[#places + 2] = delayed_key, 'zset'
  else
    ready_types(places, ready_key, priorities[i])
  end
end
expect_types(places)

-- So are the records and idempotency keys the tasks name, read once here: `held` is
-- whether a task id names a record, `named` the id an idempotency key names (false:
-- none), both kept up to date as this call creates tasks and binds keys.
local held, named = {}, {}
for i = 0, count - 1 do
  local base = 4 + i * WIDTH
  local task_id, idem_key = ARGV[base], ARGV[base + 6]
  if held[task_id] == nil then
    local task_key = prefix .. 'task:' .. task_id
    local kind = redis.call('TYPE', task_key)['ok']
    if kind ~= 'none' and kind ~= 'hash' then
      wrong_type_error(task_key, kind, 'hash', 'nothing was changed')
    end
    held[task_id] = kind == 'hash'
  end
  if idem_key ~= '' and named[idem_key] == nil then
    local idem_record = prefix .. 'idem:' .. idem_key
    local original = redis.pcall('GET', idem_record)
    if failed(original) then
      wrong_type_error(idem_record, redis.call('TYPE', idem_record)['ok'], 'string',
        'nothing was changed')
    end
    if original and not (#original <= 128 and string.find(original, '^[%w_.:%-]+$')
                         and original ~= '.' and original ~= '..') then
      error('idempotency key ' .. idem_record .. ' holds ' .. string.format('%q',
        string.sub(original, 1, 64)) .. ', not a task id: something else wrote it; ' ..
        'nothing was changed')
    end
    named[idem_key] = original
  end
end

local now_text = integer_text(now)
local feed = open_feed(events_key, seq_key, epoch_key, retention, now)
local reply = {}
local woken = 0

-- A send whose key names no task, but whose given id names one, is answered with that
-- task: the key then names it, so every later send with the key gets the same answer
-- rather than a new task (T5). The record keeps the longer-lived of its keys, the one
-- that holds it (expire_ended, purge), and lives at least as long as this one.
local function bind_key(idem_record, idem_key, idem_ttl, task_key, task_id)
  redis.call('SET', idem_record, task_id, 'EX', idem_ttl)
  named[idem_key] = task_id
  local kept = redis.call('HGET', task_key, 'idempotency_key')
  if kept and kept ~= '' and kept ~= idem_key then
    local kept_record = prefix .. 'idem:' .. kept
    -- PTTL: TTL rounds to the second, and a key rounded up would be kept in place
    -- of one that outlives it.
    local left = redis.call('PTTL', kept_record)
    if (left == -1 or left >= tonumber(idem_ttl) * 1000)
        and redis.pcall('GET', kept_record) == task_id then
      return
    end
  end
  redis.call('HSET', task_key, 'idempotency_key', idem_key)
  local idem_ms = tonumber(idem_ttl) * 1000
  local left = redis.call('PTTL', task_key)
  if left >= 0 and left < idem_ms then
    redis.call('PEXPIRE', task_key, integer_text(idem_ms))
  end
end

local function enqueue_one(task_id, name, payload, delay_ms, max_retries, idem_key, idem_ttl,
                           result_ttl, priority, limit_key)
  local idem_record = prefix .. 'idem:' .. idem_key
  if idem_key ~= '' and named[idem_key] then return named[idem_key], 0 end
  local task_key = prefix .. 'task:' .. task_id
  if held[task_id] then
    if idem_key ~= '' then bind_key(idem_record, idem_key, idem_ttl, task_key, task_id) end
    return task_id, 0
  end
  held[task_id] = true
  local run_at, state = now_text, 'pending'
  if delay_ms > 0 then run_at, state = integer_text(now + delay_ms), 'delayed' end
  -- The SET goes first: it is the one write an argument could make fail (checked above).
  if idem_key ~= '' then
    redis.call('SET', idem_record, task_id, 'EX', idem_ttl)
    named[idem_key] = task_id
  end
  local event = {'type', 'enqueued', 'task', task_id, 'state', state, 'name', name,
   'at', run_at}
  redis.call('HSET', task_key, 'state', state, 'name', name, 'payload', payload,
    'max_retries', max_retries, 'retries', '0', 'fencing_token', '0',
    'idempotency_key', idem_key, 'created_at', now_text, 'run_at', run_at)
  if result_ttl ~= '' then redis.call('HSET', task_key, 'result_ttl', result_ttl) end
  if limit_key ~= '' then
    redis.call('HSET', task_key, 'limit_key', limit_key)
    event[#event + 1], event[#event + 2] = 'limit_key', limit_key
  end
  if priority ~= DEFAULT_PRIORITY then
    redis.call('HSET', task_key, 'priority', integer_text(priority))
    event[#event + 1], event[#event + 2] = 'priority', integer_text(priority)
  end
  emit(feed, event)
  if state == 'delayed' then
    redis.call('ZADD', delayed_key, run_at, task_id)
  else
    push_ready(ready_key, task_id, priority, false)
  end
  return task_id, 1
end

for i = 0, count - 1 do
  local base = 4 + i * WIDTH
  local id, created = enqueue_one(ARGV[base], ARGV[base + 1], ARGV[base + 2], delays[i],
    ARGV[base + 5], ARGV[base + 6], ARGV[base + 7], ARGV[base + 8], priorities[i],
    ARGV[base + 10])
  reply[#reply + 1], reply[#reply + 2] = id, created
  woken = woken + created
end
close_feed(feed)
-- A delayed task wakes idle workers too, so they can sleep until exactly its run-at.
wake_workers(wake_key, woken)
return reply
