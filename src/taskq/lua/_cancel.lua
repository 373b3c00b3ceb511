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
  local state = record[1]
  if state == 'pending' and record[4] and record[3] then
    expect(freed_key(prefix), 'set')
    expect(parked_names_key(prefix), 'set')
    expect(groups_key(prefix, record[3]), 'set')
    for _, in_group in ipairs(waiting_groups(record[3], record[5])) do
      expect(unparked_key(prefix, in_group), 'set')
      expect(parked_key(prefix, in_group), 'list')
      expect(holding_key(prefix, in_group), 'set')
    end
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

-- A value no task id can be (taskq.keys allows letters, digits and _.:- only): a place
-- take_many empties holds it until one LREM takes out every such place at once,
-- stopping at the last one rather than walking the rest of the list.
local TAKEN = '\0taskq:taken'
-- More of a call's ids than this in one list are taken out of it in one walk
-- (take_many); fewer, each by its own LREM, which stops at its first copy.
local FEW_IDS = 8

-- Takes the first copy of each of `count` ids (`wanted`: id -> true) out of `list`, in
-- one walk from the head and one LREM, keeping every other element's order. An LREM
-- per id walks every task pushed after it: a workflow's thousands of steps behind a
-- backlog would cost their number times the backlog, in one script that holds Redis.
-- Returns id -> true for each id found.
local function take_many(list, wanted, count)
  local found, left, at = {}, count, 0
  while left > 0 do
    local chunk = redis.call('LRANGE', list, at, at + CHUNK - 1)
    for j = 1, #chunk do
      local id = chunk[j]
      if wanted[id] and not found[id] then
        redis.call('LSET', list, at + j - 1, TAKEN)
        found[id], left = true, left - 1
        if left == 0 then break end
      end
    end
    if #chunk < CHUNK then break end
    at = at + CHUNK
  end
  if left < count then redis.call('LREM', list, count - left, TAKEN) end
  return found
end

-- Takes the ids of `task_ids` that cancel_task would take out of a list by an LREM
-- from its head (a pending task neither parked nor sent back: its ready list; a dead
-- one: the DLQ) out of each list that holds more than FEW_IDS of them now, in one walk
-- of it. Returns what cancel_task is then given as `swept`: for each id of a list
-- walked, 1 if it was taken out, 0 if it was not there.
local function sweep_lists(prefix, queue, task_ids)
  local by_list, lists = {}, {}
  for _, task_id in ipairs(task_ids) do
    local record = redis.pcall('HMGET', prefix .. 'task:' .. task_id, 'state', 'priority',
      'parked')
    if failed(record) then record = {} end  -- no task's: cancel_task passes it over
    local list
    if record[1] == 'pending' and not record[3] then
      list = ready_list(queue.ready, tonumber(record[2]))
    elseif record[1] == 'dead' then
      list = queue.dlq
    end
    if list then
      if not by_list[list] then by_list[list], lists[#lists + 1] = {}, list end
      local ids = by_list[list]
      ids[#ids + 1] = task_id
    end
  end
  local swept = {}
  for _, list in ipairs(lists) do
    local ids = by_list[list]
    if #ids > FEW_IDS then
      local wanted = {}
      for _, id in ipairs(ids) do wanted[id] = true end
      local found = take_many(list, wanted, #ids)
      for _, id in ipairs(ids) do swept[id] = found[id] and 1 or 0 end
    end
  end
  return swept
end

-- Cancels `task_id` (in `only_state` only, unless it is ''), on the queue whose keys
-- `queue` holds (ready, delayed, leased, dlq), with its events on `feed`: a pending,
-- delayed, dead or waiting task ends cancelled now; a running one is flagged for its
-- holder. `swept` (nil: none) is what sweep_lists took out of its list for this call.
-- Returns the outcome ('cancelled' | 'requested' | 'unchanged' | 'unknown') and the
-- state it found.
local function cancel_task(prefix, feed, queue, task_id, only_state, completed_ttl,
                           swept)
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
  -- not the whole backlog. A task released back to the front (release.lua) is found
  -- last. One taken out by sweep_lists already is not looked for again.
  local taken = swept and swept[task_id]
  local removed = 0
  if state == 'pending' and record[6] == 'back' then
    -- Sent back to ready from its parked list, a slot promised to it (see _common), at
    -- the front: the tail, where leases pop.
    local priority = tonumber(record[4])
    removed = redis.call('LREM', ready_list(queue.ready, priority), -1, task_id)
    forget_if_empty(queue.ready, priority)
    -- Its promised slot is free again: a lease looks at its group next.
    for _, group in ipairs(waiting_groups(record[5], record[7])) do
      if redis.call('SREM', unparked_key(prefix, group), task_id) == 1 then
        mark_freed(prefix, group)
      end
    end
  elseif state == 'pending' and record[6] then
    -- Parked for a concurrency slot (see _common), in one of its two groups.
    local group, list
    for _, in_group in ipairs(waiting_groups(record[5], record[7])) do
      if removed == 0 then
        group, list = in_group, parked_key(prefix, in_group)
        removed = redis.call('LREM', list, -1, task_id)  -- parked at the tail (lease.lua)
      end
    end
    if removed > 0 and redis.call('LLEN', list) == 0 then
      -- Nothing of it waits now: no lease must look at it (a mark left here would be
      -- read only once some group parks again, and kept per account until then).
      redis.call('SREM', parked_names_key(prefix), group)
      redis.call('SREM', freed_key(prefix), group)
      forget_group(prefix, group)
    end
  elseif state == 'pending' then
    local priority = tonumber(record[4])
    removed = taken or redis.call('LREM', ready_list(queue.ready, priority), 1, task_id)
    forget_if_empty(queue.ready, priority)
  elseif state == 'delayed' then
    removed = redis.call('ZREM', queue.delayed, task_id)
  elseif state == 'dead' then
    -- LPUSHed (fail.lua, reap.lua)
    removed = taken or redis.call('LREM', queue.dlq, 1, task_id)
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
