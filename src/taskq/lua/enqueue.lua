--[[
  enqueue: create a task record and put its id on ready (or on delayed when it has a
  delay), unless its id or idempotency key already names a task.
  KEYS[1] ready   LIST    task ids that can run now (workers pop the right end)
  KEYS[2] delayed ZSET    task id -> run-at (ms, server TIME)
  KEYS[3] events  STREAM  change feed
  KEYS[4] seq     STRING  last event sequence number
  KEYS[5] epoch   STRING  event log incarnation
  KEYS[6] wake    LIST    wake-up tokens for idle workers
  ARGV[1] prefix          queue key prefix; task and idempotency keys derive from it
  ARGV[2] task_id
  ARGV[3] name            registered task name
  ARGV[4] payload         JSON text
  ARGV[5] delay_ms        0 = ready now
  ARGV[6] max_retries     retries before the task goes to the DLQ
  ARGV[7] idempotency_key '' = none
  ARGV[8] idempotency_ttl seconds the key keeps naming the task
  ARGV[9] retention       events kept in the stream
  Returns: {task_id, 1} created | {original_task_id, 0} duplicate (nothing written)
  Emits:   enqueued (state pending or delayed)
]]
--- @include "_common"

local ready_key, delayed_key = KEYS[1], KEYS[2]
local events_key, seq_key, epoch_key, wake_key = KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local prefix, task_id, name, payload = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local delay_ms, max_retries = tonumber(ARGV[5]), tonumber(ARGV[6])
local idem_key, idem_ttl, retention = ARGV[7], tonumber(ARGV[8]), ARGV[9]

local idem_record = prefix .. 'idem:' .. idem_key
if idem_key ~= '' then
  local original = redis.call('GET', idem_record)
  if original then return {original, 0} end
end
local task_key = prefix .. 'task:' .. task_id
if redis.call('EXISTS', task_key) == 1 then return {task_id, 0} end

local now = server_now_ms()
local run_at = now + delay_ms
local state = 'pending'
if delay_ms > 0 then state = 'delayed' end

-- The SET goes first: it is the one write an argument could make fail, and a script
-- that fails after writing leaves its earlier writes in place.
if idem_key ~= '' then
  redis.call('SET', idem_record, task_id, 'EX', idem_ttl)
end
emit(events_key, seq_key, epoch_key, retention, now,
  {'type', 'enqueued', 'task', task_id, 'state', state, 'name', name, 'at', run_at})
redis.call('HSET', task_key, 'state', state, 'name', name, 'payload', payload,
  'max_retries', max_retries, 'retries', 0, 'fencing_token', 0,
  'idempotency_key', idem_key, 'created_at', now, 'run_at', run_at)
if state == 'delayed' then
  redis.call('ZADD', delayed_key, run_at, task_id)
else
  redis.call('LPUSH', ready_key, task_id)
end
-- A delayed task wakes idle workers too, so they can sleep until exactly its run-at.
wake_workers(wake_key, 1)
return {task_id, 1}
