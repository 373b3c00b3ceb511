-- Cancelling one task (cancel.lua, and cancel_flow.lua for each step of a flow).

-- Adds to `places` (see expect_types) the keys cancel_task may write for `task_id`
-- besides its record and the log: the place it is taken from, and a concurrency
-- group's or rate limit's keys it gives back. Checked before a cancel's first write, so
-- that no task leaves its place for a write Redis then refuses.
local function cancel_types(places, prefix, queue, task_id)
  local function expect(key, type_name)
    places[#places + 1], places[#places + 2] = key, type_name
  end
  local record = redis.pcall('HMGET', prefix .. 'task:' .. task_id, 'state', 'priority',
    'name', 'parked', 'limit_key', 'rate_slot')
  if failed(record) or not record[1] then return places end
  local state, group = record[1], record[3] and limit_group(record[3], record[5])
  if state == 'pending' and record[4] and group then
    expect(unparked_key(prefix, group), 'set')
    expect(freed_key(prefix), 'set')
    expect(parked_key(prefix, group), 'list')
    expect(parked_names_key(prefix), 'set')
    expect(holding_key(prefix, group), 'set')
    expect(groups_key(prefix, record[3]), 'set')
  end
  -- (Not the levels set: forget_if_empty's write to it may fail.)
  if state == 'pending' then expect(ready_list(queue.ready, tonumber(record[2])), 'list') end
  if state == 'delayed' then expect(queue.delayed, 'zset') end
  if state == 'dead' then expect(queue.dlq, 'list') end
  if record[6] and record[3] then
    expect(prefix .. 'rates', 'hash')
    for _, limit in ipairs({record[3], QUEUE_LIMIT}) do
      expect(reserved_key(prefix, limit), 'zset')
      expect(released_key(prefix, limit), 'zset')
    end
  end
  return places
end

-- Cancels `task_id` (in `only_state` only, unless it is ''), on the queue whose keys
-- `queue` holds (ready, delayed, leased, dlq), with its events on `feed`: a pending,
-- delayed, dead or waiting task ends cancelled now; a running one is flagged for its
-- holder. Returns the outcome ('cancelled' | 'requested' | 'unchanged' | 'unknown')
-- and the state it found.
local function cancel_task(prefix, feed, queue, task_id, only_state, completed_ttl)
  local task_key = prefix .. 'task:' .. task_id
  local record = redis.pcall('HMGET', task_key, 'state', 'fencing_token', 'result_ttl',
    'priority', 'name', 'parked', 'limit_key', 'rate_slot', unpack(CANCEL_FIELDS))
  -- A record of another type is no task's, as cancel_types passed it over: a flow's
  -- cancel goes on to its other steps rather than failing after its first writes.
  if failed(record) or not record[1] then return 'unknown', '' end
  local state = record[1]
  if only_state ~= '' and state ~= only_state then return 'unchanged', state end
  local cancel = {record[9], record[10], record[11], record[12], record[13]}
  -- The record outlives the task's end as a completed one would.
  local ttl = stored_whole(record[3], completed_ttl)

  if state == 'running' and redis.call('ZSCORE', queue.leased, task_id) then
    if cancel[1] then return 'unchanged', state end
    emit(feed, {'type', 'cancel_requested', 'task', task_id, 'state', 'running',
      'token', integer_text(stored_whole(record[2], 0))})
    redis.call('HSET', task_key, 'cancel_requested', feed.now, 'cancel_ttl',
      integer_text(ttl))
    return 'requested', state
  end

  -- An id is in one list once (T1), so each LREM stops at its first copy, searched
  -- from the end where most tasks go in: a cancel costs the tasks pushed after it,
  -- not the whole backlog (a flow's thousand steps over 200,000 ready tasks took
  -- 2 s). A task released back to the front (release.lua) is found last.
  local removed = 0
  if state == 'pending' and record[6] == 'back' then
    -- Sent back to ready from its parked list, a slot promised to it (see _common), at
    -- the front: the tail, where leases pop.
    local priority = tonumber(record[4])
    removed = redis.call('LREM', ready_list(queue.ready, priority), -1, task_id)
    forget_if_empty(queue.ready, priority)
    -- Its promised slot is free again: a lease looks at its group next.
    local group = limit_group(record[5], record[7])
    redis.call('SREM', unparked_key(prefix, group), task_id)
    mark_freed(prefix, group)
  elseif state == 'pending' and record[6] then
    -- Parked for a concurrency slot (see _common).
    local group = limit_group(record[5], record[7])
    local list = parked_key(prefix, group)
    removed = redis.call('LREM', list, -1, task_id)  -- parked at the tail (lease.lua)
    if redis.call('LLEN', list) == 0 then
      -- Nothing of it waits now: no lease must look at it (a mark left here would be
      -- read only once some group parks again, and kept per account until then).
      redis.call('SREM', parked_names_key(prefix), group)
      redis.call('SREM', freed_key(prefix), group)
      forget_group(prefix, group)
    end
  elseif state == 'pending' then
    local priority = tonumber(record[4])
    removed = redis.call('LREM', ready_list(queue.ready, priority), 1, task_id)
    forget_if_empty(queue.ready, priority)
  elseif state == 'delayed' then
    removed = redis.call('ZREM', queue.delayed, task_id)
  elseif state == 'dead' then
    removed = redis.call('LREM', queue.dlq, 1, task_id)  -- LPUSHed (fail.lua, reap.lua)
  elseif state == 'waiting' then
    removed = 1  -- a workflow's step waiting for its stage is in no list (see _flow)
  end
  -- Completed and cancelled tasks have ended; a record whose state and structure
  -- disagree is left as it is rather than guessed at.
  if removed == 0 then return 'unchanged', state end

  -- Throttled by a rate limit (waiting on delayed, or promoted and not yet leased).
  if record[8] then give_back_slots(prefix, task_id, record[5]) end

  local event = {'type', 'cancelled', 'task', task_id, 'state', 'cancelled', 'from', state}
  if cancel[5] then event[#event + 1], event[#event + 2] = 'flow', cancel[5] end
  emit(feed, event)
  end_cancelled(prefix, feed, task_id, cancel, ttl, state)
  return 'cancelled', state
end
