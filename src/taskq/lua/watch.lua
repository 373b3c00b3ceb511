--[[
  watch: read how a task ended, for a producer that waits for its result; if it has not
  ended, mark its record so the script that ends it (ack; fail or reap, at its death;
  any script that ends it cancelled) wakes the producer through the task's done list. Reading and marking in one step
  leaves no moment where the task could end unseen between the two.
  KEYS[1] task    HASH    the task's record
  KEYS[2] done    LIST    the task's done list (see _ended's wake_waiters)
  ARGV[1] mark            '1' = mark a task that has not ended; '0' = only read
  Returns: {} if there is no record; else {state, result, error_type, error_message,
           traceback, last_error, fencing_token, retries, upstream}, a field the record
           lacks as nil (upstream: the workflow step whose failure ended this waiting
           step cancelled; see _flow)
  Emits:   nothing (no task changes state)
]]

local task_key, done_key, mark = KEYS[1], KEYS[2], ARGV[1]

local record = redis.call('HMGET', task_key, 'state', 'result', 'error_type', 'error_message',
  'traceback', 'last_error', 'fencing_token', 'retries', 'upstream')
if not record[1] then return {} end
if mark == '1' and record[1] ~= 'completed' and record[1] ~= 'dead' and
    record[1] ~= 'cancelled' then
  -- The first mark of a run that has not ended: any done list is an earlier run's (a
  -- record that expired or was purged, and an id enqueued again), which would wake this
  -- run's waiters at once, again and again, until it expired.
  if redis.call('HSETNX', task_key, 'waiters', '1') == 1 then
    redis.call('DEL', done_key)
  end
end
return record
