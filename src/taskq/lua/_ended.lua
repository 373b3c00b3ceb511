--[[
  _ended: what every operation that ends a task shares (after _common): waking the
  producers that wait for the end, keeping the ended record, a workflow step's end
  (_flow) and a cancelled end. Not an operation itself.
]]

-- A producer waiting for a task's end (watch.lua marked its record) blocks on the
-- task's done list, rotating it onto itself (BLMOVE done done), so one element wakes
-- every waiter. It need only outlive the waiters already blocked: one arriving later
-- reads the ended record and does not block. retry_dead deletes it, since a list left
-- in place would wake the waiters of the next run at once. A done list of another type
-- (written by hand) wakes no one, and must not stop the end it would announce: the
-- producer's own wait on it fails, naming the key.
local DONE_TTL_MS = '60000'
local function wake_waiters(prefix, task_id)
  local done_key = prefix .. 'done:' .. task_id
  if not failed(redis.pcall('RPUSH', done_key, '1')) then
    redis.call('PEXPIRE', done_key, DONE_TTL_MS)
  end
end

-- Keeps an ended (completed or cancelled) record `ttl_ms`, or longer if its idempotency
-- key outlives that, so the key never names a missing record.
local function expire_ended(prefix, task_key, ttl_ms, idem_key)
  local ttl = ttl_ms
  if idem_key and idem_key ~= '' then
    local left = redis.call('PTTL', prefix .. 'idem:' .. idem_key)
    if left > ttl then ttl = left end
  end
  redis.call('PEXPIRE', task_key, integer_text(ttl))
end

--- @include "_flow"

-- The record fields a script that may end a task cancelled reads, after its own.
local CANCEL_FIELDS = {'cancel_requested', 'cancel_ttl', 'idempotency_key', 'waiters', 'flow'}

-- Ends a task cancelled, already out of every list and set (cancel.lua asked for it,
-- or took it out of one): the record keeps `cancel_ttl` (the task's result TTL or the
-- queue's completed TTL when the cancel came), and a waiting producer is woken.
-- `cancel` holds the CANCEL_FIELDS values; `ttl_ms` stands in for a missing cancel_ttl
-- (nil: the record is kept with no expiry rather than dropped). `from`: the state a
-- cancel that ends it at once found it in (nil when its run ends it), kept on the
-- record as `cancelled_from`. A workflow's step that ends here counts as ended for its
-- stage (see _flow).
local function end_cancelled(prefix, feed, task_id, cancel, ttl_ms, from)
  local task_key = prefix .. 'task:' .. task_id
  if from then
    redis.call('HSET', task_key, 'state', 'cancelled', 'cancelled_at', feed.now,
      'cancelled_from', from)
  else
    redis.call('HSET', task_key, 'state', 'cancelled', 'cancelled_at', feed.now)
  end
  local ttl = stored_whole(cancel[2], ttl_ms)
  if ttl then expire_ended(prefix, task_key, ttl, cancel[3]) end
  if cancel[4] then wake_waiters(prefix, task_id) end
  if cancel[5] then step_ended(prefix, feed, task_id, cancel[5], 'cancelled', nil) end
end
