--[[
  _rates: rate-limit reservations, included (after _common) by the operations that
  hand out or give back a throttled task's slot. Not an operation itself.
]]

-- Rate limits (see taskq/rates.py and lease.lua). A throttled task waits on delayed for
-- the slot a limit handed it, and `reserved:<limit>` (a ZSET: task id -> slot, us; the
-- limit a task name, or '*' for the queue's own) keeps the slots tasks still wait for.
-- A task that leaves the line (it starts, is throttled again once a start took its slot,
-- or is cancelled) gives its slot back: the limit's next slot comes back to one interval after the last slot still
-- held, or to the limit's start cursor, never forward. A slot in the middle of the line
-- stays empty (the tasks behind it keep theirs); one at its end is handed out again, so
-- cancelled tasks leave no slots that every later task waits behind (RateLimit.tla's
-- NoGhostSlot; its mutant RateLimitGhostSlot is the design without this).

-- The name under which a rate limit holds for every task of the queue together.
local QUEUE_LIMIT = '*'

local function reserved_key(prefix, limit)
  return prefix .. 'reserved:' .. limit
end

-- The line of a limit declared anew with another rate (see lease.lua's cursor): its
-- tasks, which waited for slots at the old spacing, are made due a call's worth at a
-- time, to be checked again, and throttled at the new spacing if they must wait.
local function released_key(prefix, limit)
  return prefix .. 'released:' .. limit
end

-- The workers whose leases applied `limit`'s stored rate as their own since it was
-- stored (a ZSET: worker id -> when it last did, ms): its holders (see lease.lua's
-- live_holder).
local function holders_key(prefix, limit)
  return prefix .. 'holders:' .. limit
end

-- Makes each of `due` ({task id, limit name}, in the order of the slots they held) due
-- again, to be checked by the limits in force: a millisecond apart, after every task an
-- earlier release made due (`released_at`), so that a line released over several calls
-- is promoted in its order. A task keeps an earlier run-at it had (ZADD LT), one in two
-- released lines is made due once, and an id whose record is gone, or of another type,
-- leaves delayed (as promote drops it). Each task made due gets a `rescheduled` event
-- with its new run-at.
local function make_due(prefix, delayed_key, feed, due, now)
  if #due == 0 then return end
  local mark_key = prefix .. 'released_at'
  local base = math.max(now - #due, tonumber(redis.call('GET', mark_key)) or 0)
  local seen, n = {}, 0
  for _, entry in ipairs(due) do
    local task_id = entry[1]
    local task_key = prefix .. 'task:' .. task_id
    -- A task waiting in two lines is made due once, by the first.
    if not seen[task_id] then
      if redis.call('TYPE', task_key)['ok'] ~= 'hash' then
        redis.call('ZREM', delayed_key, task_id)
      else
        seen[task_id] = true
        n = n + 1
        local at = integer_text(base + n)
        -- CH counts a changed score: 0 for a task gone from delayed, or due sooner already.
        if redis.call('ZADD', delayed_key, 'XX', 'LT', 'CH', at, task_id) == 1 then
          redis.call('HSET', task_key, 'run_at', at)
          emit(feed, {'type', 'rescheduled', 'task', task_id, 'state', 'delayed', 'at', at,
            'limit', entry[2]})
        end
      end
    end
  end
  -- Kept a minute: a release that far behind can only stamp after it anyway.
  redis.call('SET', mark_key, integer_text(base + n), 'PX', 60000)
end

-- Takes `task_id` out of `limit`'s line; returns the limit's next slot (us) once its
-- slot is given back, from the cursors `start` and `next` and the spacing `interval`.
local function give_back_slot(prefix, limit, task_id, start, next, interval)
  local key = reserved_key(prefix, limit)
  if redis.call('ZREM', key, task_id) == 0 then return next end
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2]
  local free = start
  if last then free = math.max(start, tonumber(last) + interval) end
  return math.min(next, free)
end

-- Gives back the slot `task_id` waits for under `limit`, that limit's cursors read from
-- and written to the `rates` hash (see lease.lua's KEYS): for a caller that holds no
-- cursor of it (a cancel; a lease that does not apply that limit).
local function give_back_stored(prefix, limit, task_id)
  local rates = prefix .. 'rates'
  local stored = redis.call('HMGET', rates, limit, limit .. '|next', limit .. '|interval')
  local start, next, interval = tonumber(stored[1]), tonumber(stored[2]), tonumber(stored[3])
  if start and next and interval then
    local given = give_back_slot(prefix, limit, task_id, start, next, interval)
    if given < next then redis.call('HSET', rates, limit .. '|next', integer_text(given)) end
  else
    redis.call('ZREM', reserved_key(prefix, limit), task_id)
  end
  redis.call('ZREM', released_key(prefix, limit), task_id)  -- see lease.lua's cursor
end

-- Gives back every slot the task `task_id` of `name` waits for, as a cancel does.
local function give_back_slots(prefix, task_id, name)
  for _, limit in ipairs({name, QUEUE_LIMIT}) do give_back_stored(prefix, limit, task_id) end
end
