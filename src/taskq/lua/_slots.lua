--[[
  _slots: concurrency limits, included (after _common) by the operations that take,
  hold, give back or count a limit's slots. Not an operation itself.
]]

-- Concurrency limits (see taskq/concurrency.py). A run of a limited task name holds one
-- of the name's slots from its lease until its lease ends (ack, fail, release, reap or a
-- cancelled end): `holding:<name>`, a SET of task ids, and the record's `slot` field
-- (the name) say which runs hold one. A ready task that finds every slot taken waits,
-- still pending, on `parked:<name>` (the record's `parked` field set), and `parked` (a
-- SET) names the limited names with waiting tasks; a lease moves them back to the front
-- of their ready lists as slots come free. A limit kept per key (the record's
-- `limit_key`, e.g. an account) keeps each pair's slots and waiting tasks apart under the
-- group `<name>|<key>` (no task name holds a '|'), and `groups:<name>` (a SET) names the
-- groups of a name that hold a slot or wait for one. Every key below takes a group.
-- Whether a limit is kept per key is the lease's declaration, which a redeploy may
-- change under tasks sent before it: a run holds its slot by its record's key, and a
-- task waits in the group of the declaration that parked it (see declared_group), so
-- it may wait in its name's group while its record names a key (ConcurrencyKeyMode.tla).
local function holding_key(prefix, name)
  return prefix .. 'holding:' .. name
end

-- The group a task's slot is kept in: its name, or its name and key.
local function limit_group(name, limit_key)
  if limit_key == nil or limit_key == false or limit_key == '' then return name end
  return name .. '|' .. limit_key
end

-- The task name of a group.
local function group_name(group)
  return string.match(group, '^[^|]*')
end

local function groups_key(prefix, name)
  return prefix .. 'groups:' .. name
end

-- The runs of `name` holding a slot of one of its keyed groups (a SET). A run holds its
-- slot in the group of its record's key whatever the limit is declared as, so with the
-- name's own holding set (its runs sent with no key) these are every run of the name:
-- a redeploy that drops or adds the key finds the runs the one before started counted.
local function keyed_runs_key(prefix, name)
  return prefix .. 'keyed:' .. name
end

-- The group a task of `name` sent with `limit_key` waits in under its limit as
-- declared (`keyed`): its key's group, or the name's when the limit is not kept per key
-- (or the task has no key).
local function declared_group(name, limit_key, keyed)
  if keyed then return limit_group(name, limit_key) end
  return name
end

-- The groups a task of `name` sent with `limit_key` may wait in, or be promised a slot
-- of: its key's, or its name's, where a lease that did not keep the limit per key put
-- it.
local function waiting_groups(name, limit_key)
  local group = limit_group(name, limit_key)
  if group == name then return {name} end
  return {group, name}
end

-- The runs a task of `name` sent with `limit_key` is counted against under its limit
-- as declared: those of its key (or, with none, those with none) when the limit is kept
-- per key; every run of the name when it is not.
-- A keyed run ended by a script that does not keep `keyed:<name>` (an older taskq's,
-- still running in a rolling upgrade) is left in it, holding no slot: three members are
-- checked at each count, and those that hold no slot of their group are dropped, so
-- that such leftovers cannot hold the name's every slot for ever.
local HEALED_AT_ONCE = 3
local function runs_counted(prefix, name, limit_key, keyed)
  local group = limit_group(name, limit_key)
  if keyed then return redis.call('SCARD', holding_key(prefix, group)) end
  local runs = keyed_runs_key(prefix, name)
  for _, id in ipairs(redis.call('SRANDMEMBER', runs, HEALED_AT_ONCE)) do
    local slot = redis.pcall('HGET', prefix .. 'task:' .. id, 'slot')
    local holds = not failed(slot) and slot and slot ~= name and group_name(slot) == name
      and redis.pcall('SISMEMBER', holding_key(prefix, slot), id) == 1
    if not holds then redis.call('SREM', runs, id) end
  end
  return redis.call('SCARD', holding_key(prefix, name)) + redis.call('SCARD', runs)
end

local function parked_key(prefix, name)
  return prefix .. 'parked:' .. name
end

-- The tasks of a group that a lease sent back from its parked list to ready and no lease
-- has popped since: each is promised a free slot, so the next lease sends back no more
-- than the slots left (a SET; the record's `parked` field is 'back' meanwhile).
local function unparked_key(prefix, name)
  return prefix .. 'unparked:' .. name
end

local function parked_names_key(prefix)
  return prefix .. 'parked'
end

-- The groups with waiting tasks whose slot a run gave back (or whose promise a cancel
-- dropped) since a lease last looked (a SET): the next lease looks at these, and at a
-- few others in turn (see lease.lua's unpark), never at every group.
local function freed_key(prefix)
  return prefix .. 'slots_freed'
end

-- Marks `group` for the next lease to look at, when it has tasks waiting.
local function mark_freed(prefix, group)
  if redis.call('LLEN', parked_key(prefix, group)) > 0 then
    redis.call('SADD', freed_key(prefix), group)
    return true
  end
  return false
end

-- Gives back the slot a run held (`slot`: the record's slot field, nil if it held
-- none) and wakes a worker if a task waits for it. Only a script that ends the current
-- token's lease calls this, so a stale holder never frees a slot a newer run holds.
-- A keyed group that holds no slot and has no waiting task leaves its name's groups.
local function forget_group(prefix, group)
  local name = group_name(group)
  if name ~= group and redis.call('SCARD', holding_key(prefix, group)) == 0
      and redis.call('LLEN', parked_key(prefix, group)) == 0 then
    redis.call('SREM', groups_key(prefix, name), group)
  end
end

-- Adds to `places` (see _common's expect_types) the keys free_slot writes for `slot`.
local function slot_types(places, prefix, slot)
  if not slot then return end
  local n, name = #places, group_name(slot)
  places[n + 1], places[n + 2] = holding_key(prefix, slot), 'set'
  places[n + 3], places[n + 4] = parked_key(prefix, slot), 'list'
  places[n + 5], places[n + 6] = groups_key(prefix, name), 'set'
  places[n + 7], places[n + 8] = freed_key(prefix), 'set'
  if name ~= slot then
    places[n + 9], places[n + 10] = keyed_runs_key(prefix, name), 'set'
    places[n + 11], places[n + 12] = parked_key(prefix, name), 'list'
  end
end

local function free_slot(prefix, task_id, slot)
  if not slot then return end
  local name = group_name(slot)
  redis.call('SREM', holding_key(prefix, slot), task_id)
  redis.call('HDEL', prefix .. 'task:' .. task_id, 'slot')
  -- A keyed run's end frees a slot of its key's group, and one of the name's whole
  -- count, which tasks parked while the limit was not kept per key wait on.
  local woken = mark_freed(prefix, slot)
  if not woken then forget_group(prefix, slot) end
  if name ~= slot then
    redis.call('SREM', keyed_runs_key(prefix, name), task_id)
    woken = mark_freed(prefix, name) or woken
  end
  if woken then wake_workers(prefix .. 'wake', 1) end
end

-- The group whose slot `task_id` holds, when its record cannot say (deleted or evicted:
-- rare, so every limited name's groups are looked through); nil if it holds none. Only
-- reads, each through pcall: a key of another type holds no slot of ours, and must not
-- fail the call that ends the run.
local function lost_slot(prefix, task_id)
  local function holds(group)
    return redis.pcall('SISMEMBER', holding_key(prefix, group), task_id) == 1
  end
  local names = redis.pcall('HKEYS', prefix .. 'limits')
  for _, name in ipairs(failed(names) and {} or names) do
    if holds(name) then return name end
    local groups = redis.pcall('SMEMBERS', groups_key(prefix, name))
    for _, group in ipairs(failed(groups) and {} or groups) do
      if holds(group) then return group end
    end
  end
  return nil
end
