--[[
  retry_dead: move a task from the DLQ to the back of ready (its priority's list) with its
  retries reset.
  KEYS[1] dlq     LIST    dead task ids
  KEYS[2] ready   LIST    task ids of the default priority that can run now (the left
                          end is the back; other priorities: see _common)
  KEYS[3] events  STREAM  change feed
  KEYS[4] seq     STRING  last event sequence number
  KEYS[5] epoch   STRING  event log incarnation
  KEYS[6] wake    LIST    wake-up tokens for idle workers
  ARGV[1] prefix          queue key prefix; the task key derives from it
  ARGV[2] task_id
  ARGV[3] retention       events kept in the stream (1 to 10^9; checked before any write)
  Returns: 1 moved | 0 the task was not in the DLQ, or its record names no task (a
           field deleted by hand): no worker could run it, and a lease drops such an
           id, which would leave it pending in no list; it stays dead (nothing changed)
  Emits:   revived (state pending)
]]
--- @include "_common"

local dlq_key, ready_key = KEYS[1], KEYS[2]
local events_key, seq_key, epoch_key, wake_key = KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local prefix, task_id, retention = ARGV[1], ARGV[2], ARGV[3]

local task_key = prefix .. 'task:' .. task_id
local record = redis.call('HMGET', task_key, 'state', 'priority', 'name')
if record[1] ~= 'dead' or not record[3] then return 0 end
if not redis.call('LPOS', dlq_key, task_id) then return 0 end

-- Its ready list (and levels set), and the log, must take it: checked before the first
-- write, so a key of another type fails the call with the task still in the DLQ.
expect_types(ready_types({events_key, 'stream'}, ready_key, tonumber(record[2])))
local now = server_now_ms()
local feed = open_feed(events_key, seq_key, epoch_key, retention, now)
push_ready(ready_key, task_id, tonumber(record[2]), false)
emit(feed, {'type', 'revived', 'task', task_id, 'state', 'pending', 'retries', 0})
redis.call('LREM', dlq_key, 1, task_id)
redis.call('HSET', task_key, 'state', 'pending', 'retries', 0, 'run_at', now)
-- An element left from its death would wake the next run's waiters at once, before
-- that run ends (ResultWait's NoSpuriousSpin; the KeepDone mutant keeps it).
redis.call('DEL', prefix .. 'done:' .. task_id)
wake_workers(wake_key, 1)
close_feed(feed)
return 1
