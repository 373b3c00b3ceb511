--[[
  lease: pop up to `count` task ids from ready, highest priority first and the oldest
  first within a priority, lease each to the worker with a new fencing token, and
  return what the worker needs to run them. A retried request (same request id, same
  worker) gets back what it already leased instead of more tasks; another worker
  naming that request id gets nothing.
  KEYS[1] ready   LIST    task ids of the default priority that can run now (those of
                          other priorities wait on <ready>:<priority>; see _common)
  KEYS[2] leased  ZSET    task id -> lease expiry (ms, server TIME)
  KEYS[3] delayed ZSET    task id -> run-at (ms); read only, for the wait hint
  KEYS[4] events  STREAM  change feed
  KEYS[5] seq     STRING  last event sequence number
  KEYS[6] epoch   STRING  event log incarnation
  KEYS[7] wake    LIST    wake-up tokens; cleared when ready is found empty
  KEYS[8] rates   HASH    <name> -> the rate limit's theoretical start time (us), moved
                          by starts only; <name>|next -> the next slot a throttled task
                          waits for (us); <name>|interval and <name>|burst -> the
                          spacing (us) and burst they were set at (no task name
                          holds a '|'); the workers whose leases applied them as
                          their own since are kept on holders:<name> (see cursor)
  ARGV[1] prefix          queue key prefix; task and request keys, and the limits'
                          (holding:, parked:, reserved:, released:, holders:...),
                          derive from it
  ARGV[2] worker          worker id
  ARGV[3] lease_ms        lease length (1 to 604800000: a week)
  ARGV[4] count           most tasks to lease (1 to 10000), or 0: only replay the
                          request, leasing nothing new
  ARGV[5] retention       events kept in the stream (1 to 10^9)
  ARGV[6] request_id      '' = none; else remembered for lease_ms
  ARGV[7] limits          limited task names in this call (0 to 10000); then five
                          values each:
  ARGV[8] name            the task name, or '*': the queue's own limit, which every
                          task of the queue starts under too
  ARGV[9] interval_us     spacing between its starts (1 to 86400000000: a day), or 0:
                          no rate limit
  ARGV[10] burst          starts let through at once (1 to 10000)
  ARGV[11] max            most of its runs holding leases at once (1 to 10000), or 0:
                          no concurrency limit
  ARGV[12] keyed          1: its concurrency limit is kept per key (each value of the
                          record's limit_key its own group of slots), 0: it is not
  Returns: {n, wait_ms, id, token, name, payload, retries, max_retries, ...,
           name, interval_us, burst, worker, ...}: n leased tasks of six fields each,
           then four for each limit this call applied as stored rather than as
           declared, another live worker holding it (see cursor); wait_ms = ms until
           the next delayed task is due or the next lease expires when fewer than
           count were leased, else -1 (-1 too when nothing is scheduled); an
           argument out of its range, or a key of another type where a leased, parked
           or throttled task would go, is an error, and nothing is written; but a
           task's keyed concurrency group is known only once the task is popped, as
           are the places a task whose limit this call does not apply gives its slot
           back to: of another type, that task and those popped after it go back to
           their ready list in their order, the call ends there (wait_ms 0), and it
           is an error if the call had leased none
  Emits:   leased (one per task); throttled (state delayed, `limit` task, queue or
           both: which refused) for each rate-limited task that may not start yet: it
           waits on delayed for a slot (the record's rate_slot), and is not counted
           against `count`; parked (state pending) for
           each task whose name has every concurrency slot taken: it waits on its
           name's parked list, not counted against `count`; unparked (state pending)
           for each parked task a free slot sends back to the front of ready;
           rescheduled (state delayed, `at` its new run_at, `limit` the task name or
           '*') for each throttled task a changed limit's released line makes due now

  Rate limits (see taskq/rates.py) follow GCRA: a name's theoretical start time advances
  by one interval per start, and every start, a throttled task's included, is let
  through only while that time is at most (burst - 1) intervals ahead of now. So the
  rate holds on the actual start times, however late a worker leases. Throttled tasks
  are spread over the slots after those already handed out, one interval apart, so
  they come back one at a time rather than all at once. The queue's own limit ('*')
  holds for all its tasks together, beside each name's: a start must pass both.

  A throttled task that leaves the line (it starts, or is throttled again once a start
  took its slot) gives back its slot (see _rates); one throttled again before its slot
  keeps it (see admitted). The first call after a redeploy that changed a rate releases
  that limit's line (see release_lines), unless a live worker of the deploy before
  still applies the old one (see cursor).

  Concurrency limits (see _slots and taskq/concurrency.py) are checked first: a task
  parked for a slot takes no rate-limit slot, and a throttled one holds no concurrency
  slot while it waits. A run holds its slot by its record's key, and a task is counted
  and parked by the limit as this call declares it (kept per key or not), so a redeploy
  that changes that counts the runs the one before started (ConcurrencyKeyMode.tla). A
  call looks at the groups with parked tasks whose slot came free since the last call,
  and at 100 more in turn (a cursor over them all), so its work is bounded however many
  groups wait; every group is looked at within (groups / 100) calls, which is how a
  raised or removed limit reaches its waiting tasks.
]]
--- @include "_common"
--- @include "_slots"
--- @include "_rates"

local ready_key, leased_key, delayed_key = KEYS[1], KEYS[2], KEYS[3]
local events_key, seq_key, epoch_key, wake_key = KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local rates_key = KEYS[8]
local prefix, worker = ARGV[1], ARGV[2]
local lease_ms, count, retention = ARGV[3], ARGV[4], ARGV[5]
local request_id = ARGV[6]

-- Checked before the first write (see whole_arg); retention by open_feed.
lease_ms = whole_arg('lease_ms', lease_ms, 1, LIMITS.lease_ms)
count = whole_arg('count', count, 0, LIMITS.count)
local n_limits = whole_arg('limits', ARGV[7], 0, LIMITS.count)
if #ARGV ~= 7 + n_limits * 5 then
  error('limits ' .. n_limits .. ' needs ' .. (7 + n_limits * 5) .. ' ARGV values, not ' .. #ARGV)
end
-- Each name's rate limit (`limits`) and concurrency limit (`most`, and whether it is
-- kept per key: `keyed`), where it has one.
local limits, most, keyed, n_rates, n_conc = {}, {}, {}, 0, 0
for i = 0, n_limits - 1 do
  local base = 8 + i * 5
  local interval = whole_arg('interval_us', ARGV[base + 1], 0, LIMITS.interval_us)
  local burst = whole_arg('burst', ARGV[base + 2], 1, LIMITS.burst)
  local max = whole_arg('max', ARGV[base + 3], 0, LIMITS.concurrency)
  local per_key = whole_arg('keyed', ARGV[base + 4], 0, 1)
  if interval > 0 then
    limits[ARGV[base]], n_rates = {interval = interval, burst = burst}, n_rates + 1
  end
  if max > 0 then
    most[ARGV[base]], keyed[ARGV[base]], n_conc = max, per_key == 1, n_conc + 1
  end
end

local now = server_now_ms()
local reply = {0, -1}
local request_key = prefix .. 'lreq:' .. request_id

local function add(task_id, token, record)
  reply[1] = reply[1] + 1
  local n = #reply
  reply[n + 1], reply[n + 2], reply[n + 3] = task_id, token, record[1] or ''
  reply[n + 4], reply[n + 5], reply[n + 6] = record[2] or '', record[3] or '0', record[4] or '0'
end

if request_id ~= '' then
  local handed = redis.call('GET', request_key)
  if handed then
    -- The memo is "id token id token ...": ids and tokens never hold a space.
    local task_id
    for word in string.gmatch(handed, '%S+') do
      if not task_id then
        task_id = word
      else
        local task_key = prefix .. 'task:' .. task_id
        local record = redis.call('HMGET', task_key, 'name', 'payload', 'retries',
          'max_retries', 'fencing_token', 'worker')
        -- Only to the worker that made the request: another naming the same id would
        -- otherwise hold a token it was never leased.
        if redis.call('ZSCORE', leased_key, task_id) and record[5] == word
            and record[6] == worker then
          add(task_id, word, record)
        end
        task_id = nil
      end
    end
    return reply
  end
end
-- A count of 0 only replays a request (a call whose reply was lost, asked again to
-- give back what it leased): with no memo of it, nothing is leased.
if count == 0 then return reply end

refuse_when_out_of_memory(prefix)
-- A leased task must be on leased, with its event; a rate limit's may go to delayed, and
-- a concurrency limit's to its parked list. Every key a limit named in this call, or a
-- group with parked tasks, writes is checked too, so that no task leaves a list for a
-- place Redis then refuses. (A task's keyed group, known once it is popped, is checked
-- then: see lease_from.)
local places = {leased_key, 'zset', events_key, 'stream', parked_names_key(prefix), 'set'}
local function expect(key, type_name)
  places[#places + 1], places[#places + 2] = key, type_name
end
if n_rates > 0 then
  expect(delayed_key, 'zset')
  expect(rates_key, 'hash')
  expect(prefix .. 'released_at', 'string')
  for name in pairs(limits) do
    expect(reserved_key(prefix, name), 'zset')
    expect(released_key(prefix, name), 'zset')
    expect(holders_key(prefix, name), 'zset')
  end
end
-- The keys a concurrency group's slots and waiting tasks are kept in; `typed` holds the
-- groups checked in this call.
local typed = {}
local function expect_group(group)
  typed[group] = true
  expect(holding_key(prefix, group), 'set')
  expect(parked_key(prefix, group), 'list')
  expect(unparked_key(prefix, group), 'set')
  expect(groups_key(prefix, group_name(group)), 'set')
  expect(keyed_runs_key(prefix, group_name(group)), 'set')
end
if n_conc > 0 then
  expect(prefix .. 'parked_line', 'string')
  expect(prefix .. 'limits', 'hash')
  for name in pairs(most) do expect_group(name) end
end
expect_types(places)
-- The groups with waiting tasks this call looks at: those whose slot a run gave back
-- since (marked by free_slot, or by a cancel that dropped a promise), and the next
-- SWEEP of all of them in turn, whose slots may have come free another way (a limit
-- raised or removed, a promise whose task was deleted). A limit kept per account may
-- have a group for each of thousands: looking at every one in every call would cost
-- Redis milliseconds per call, and block it meanwhile.
-- (With no group waiting, as on most queues, all this costs one SCARD.)
local SWEEP = 100
local sweep_key = prefix .. 'parked_sweep'
local parked_groups, marked, looked, swept_from, swept = {}, {}, {}, nil, nil
local function look_at(group)
  if not looked[group] then
    looked[group] = true
    parked_groups[#parked_groups + 1] = group
  end
end
if redis.call('SCARD', parked_names_key(prefix)) > 0 then
  places = {freed_key(prefix), 'set', sweep_key, 'string'}
  expect_types(places)
  for _, group in ipairs(redis.call('SMEMBERS', freed_key(prefix))) do
    marked[group] = true
    look_at(group)
  end
  swept_from = redis.call('GET', sweep_key) or '0'
  swept = redis.call('SSCAN', parked_names_key(prefix), swept_from, 'COUNT', SWEEP)
  for _, group in ipairs(swept[2]) do look_at(group) end
  places = {}
  for _, group in ipairs(parked_groups) do expect_group(group) end
  expect_types(places)
end
local now_text, expires_text = integer_text(now), integer_text(now + lease_ms)
local feed = open_feed(events_key, seq_key, epoch_key, retention, now)
local scores, memo = {}, {}
-- Each limited name's cursors (us) as this call moves them, written back once at the
-- end: `start`, the theoretical start time, moved by starts only; `next`, the next slot
-- to hand a throttled task, never behind `start`.
local cursors = {}
-- Limited names whose limit this call has written to <prefix>limits (for dashboards).
local limited = {}
-- Tasks this call popped and did not lease (parked, throttled, or without a record):
-- at PASS_LIMIT it stops, so one call never walks a whole backlog of waiting tasks.
local PASS_LIMIT = 1000
local passed = 0
-- Tasks sent back from their parked lists that a newer run beat to the slot, each with
-- its place in the line (the record's `line`, from a counter bumped as it was first
-- parked): once the call is done they go back to the front of their lines in the order
-- of those places, whatever order their priorities popped them in.
local reparked = {}

-- Each limit's start, next, interval and burst as stored, read for every limit in one
-- HMGET by release_lines before any task is looked at.
local stored_cursors = {}

-- Whether `name`'s limit was stored (`stored`: its start, next, interval and burst as
-- read) with another spacing or burst than this call's: declared anew.
local function changed(name, stored)
  local was_interval, was_burst = tonumber(stored[3]), tonumber(stored[4])
  return (was_interval and was_interval > 0 and was_interval ~= limits[name].interval)
    or (was_burst and was_burst ~= limits[name].burst) or false
end

-- Limits this call applies as stored, not as declared (see cursor): {name, interval,
-- burst, holder} each, for the reply.
local deferred = {}

-- The declaration the holders of a limit hold (`<name>|holders` in rates): its spacing
-- and burst as stored.
local function declaration(interval, burst)
  return (interval or '') .. '/' .. (burst or '')
end

local function alive(worker_id)
  return redis.call('EXISTS', worker_key(prefix, worker_id)) == 1
end

-- A live holder of `name`'s stored limit other than this call's worker, or nil: the
-- latest first, those whose record is gone dropped on the way. While one lives, a call
-- that declares the limit otherwise applies the stored one and releases nothing: two
-- deploys that both kept their own would release each other's line at every lease,
-- rescheduling every waiting task again and again at a rate neither declared
-- (RateDeclaration.tla's NoThrash; mutant RateDeclarationEveryLease). Any holder, not
-- only the last: a rolling deploy keeps the old limit until every old worker that
-- applied it has stopped (KeepsARunningDeploysLimit; mutant RateDeclarationLastHolder,
-- which switched at the first one's stop, and back). Once none lives (stopped, or a
-- crashed one's record expired a lease later), the next call stores its own and
-- releases the line (TakesOverFromTheStopped). A spacing or burst out of a lease's
-- range, written by hand, is no limit to apply.
local function live_holder(name, stored)
  local interval, burst = stored_whole(stored[3], 0), stored_whole(stored[4], 0)
  if interval < 1 or interval > LIMITS.interval_us or burst < 1 or burst > LIMITS.burst then
    return nil
  end
  local key, from = holders_key(prefix, name), 0
  -- Holders of another declaration than the stored one (an older taskq stored it,
  -- which keeps no holders) hold nothing of it.
  if stored[5] ~= declaration(stored[3], stored[4]) then
    redis.call('DEL', key)
    return nil
  end
  -- This worker among them held the stored limit before it declared another: a worker
  -- restarted under its id by the next deploy, which no longer applies it.
  redis.call('ZREM', key, worker)
  -- Ten at a time: a fleet's thousand holders cost one read while the latest lives.
  repeat
    local page, dropped = redis.call('ZREVRANGE', key, from, from + 9), 0
    for _, holder in ipairs(page) do
      if alive(holder) then return holder end
      redis.call('ZREM', key, holder)
      dropped = dropped + 1
    end
    from = from + #page - dropped
  until #page < 10
  return nil
end

-- This worker holds `name`'s stored limit, applied as its own by this call, whether or
-- not a task of it comes up: a worker that seldom meets one still keeps its deploy's
-- limit. The three oldest holders but this one are looked at too: each dropped if its
-- record is gone, else moved to the newest, so that holders gone over months of
-- restarts leave no trail, live ones behind them or not.
local holding = {}
local function hold(name, stored)
  if holding[name] then return end
  holding[name] = true
  local held = declaration(integer_text(limits[name].interval), integer_text(limits[name].burst))
  if stored[5] ~= held then redis.call('HSET', rates_key, name .. '|holders', held) end
  local key = holders_key(prefix, name)
  redis.call('ZADD', key, now_text, worker)
  for _, oldest in ipairs(redis.call('ZRANGE', key, 0, 2)) do
    if oldest ~= worker then
      if alive(oldest) then
        redis.call('ZADD', key, now_text, oldest)
      else
        redis.call('ZREM', key, oldest)
      end
    end
  end
end

local function cursor(name)
  local c = cursors[name]
  if not c then
    local stored = stored_cursors[name]
    local holder = changed(name, stored) and live_holder(name, stored)
    if holder then  -- applied as stored, which live_holder found in range
      limits[name] = {interval = stored_whole(stored[3], 0), burst = stored_whole(stored[4], 0)}
      deferred[#deferred + 1] = {name, stored[3], stored[4], holder}
    end
    c = {start = tonumber(stored[1]) or 0, next = tonumber(stored[2]) or 0,
         interval = limits[name].interval, burst = limits[name].burst, own = not holder}
    cursors[name] = c
    if holder then return c end
    -- Declared anew with another rate: the start cursor, ahead at the old spacing, is
    -- put as far ahead at the new one, and the line of throttled tasks is released
    -- (see release_lines): a limit raised from one an hour to a hundred a second holds
    -- neither new starts nor the waiting ones back for hours behind the old spacing.
    -- Another burst releases the line too: its tasks wait (burst - 1) spacings less
    -- than their slots, a tolerance the new burst changes.
    local was, now_us = tonumber(stored[3]), now * 1000
    if was and was > 0 and was ~= c.interval then
      if c.start > now_us then
        c.start = now_us + math.floor((c.start - now_us) * c.interval / was)
      end
    end
    if changed(name, stored) then
      c.next = c.start
      redis.call('DEL', holders_key(prefix, name))  -- they held the limit it replaces
      local line = reserved_key(prefix, name)
      if redis.call('EXISTS', line) == 1 then
        local released = released_key(prefix, name)
        -- Handed on whole unless an earlier release is still being worked off: a
        -- rename costs the same for 200,000 throttled tasks as for two, where a union
        -- walks each of them while every worker's lease waits.
        if redis.call('EXISTS', released) == 0 then
          redis.call('RENAME', line, released)
        else
          redis.call('ZUNIONSTORE', released, 2, released, line)
          redis.call('DEL', line)
        end
      end
    end
  end
  return c
end

-- A limit's interval and burst as the last lease stored them, against this call's: the
-- first call after a redeploy that changed a rate or burst sees the change, and its
-- cursor() releases the line. Then each call makes up to RELEASE_LIMIT of a released
-- line due at once: their delayed scores (and records' run_at) become now, and
-- promotion and the next leases check each again like any other start, throttling it
-- at the new spacing if it must wait. Each stays delayed until promoted; its
-- `rescheduled` event gives the log its new run_at.
local RELEASE_LIMIT = 1000
local function release_lines()
  if n_rates == 0 then return end
  local due = {}
  local names, fields = {}, {}
  for name in pairs(limits) do
    names[#names + 1] = name
    local n = #fields
    fields[n + 1], fields[n + 2], fields[n + 3], fields[n + 4], fields[n + 5] =
      name, name .. '|next', name .. '|interval', name .. '|burst', name .. '|holders'
  end
  local stored = call_chunked('HMGET', rates_key, fields)
  for i, name in ipairs(names) do
    local at = 5 * (i - 1)
    stored_cursors[name] = {stored[at + 1], stored[at + 2], stored[at + 3], stored[at + 4],
                            stored[at + 5]}
    -- None stored yet: this call stores its own, a task met or not, and holds it.
    if changed(name, stored_cursors[name]) or not stored[at + 3] then
      cursor(name)
    else
      hold(name, stored_cursors[name])
    end
    -- In the order of the slots they held (ZPOPMIN's): promoted and checked again in
    -- that order, they take the new spacing's slots in their old order.
    local popped = redis.call('ZPOPMIN', released_key(prefix, name), RELEASE_LIMIT)
    for j = 1, #popped, 2 do due[#due + 1] = {popped[j], name} end
  end
  make_due(prefix, delayed_key, feed, due, now)
end

-- Whether the task may start now under the rate limits it falls under: its name's and the
-- queue's. It starts only if every limit lets it, moving each one's start cursor; else
-- each limit that refuses hands it a slot, and it waits on delayed for the latest of
-- them, to be checked again like any other start when it comes. A task throttled
-- before (`slot`) gives back the slots it waited for (see _rates), but for one a limit
-- that refuses it again still holds for it, no start having taken it: made due early by
-- another limit's release (a raised rate), it keeps its place in this limit's line
-- rather than go to the back (QueueRateLimit.tla's NoPlaceLost).
local function admitted(task_id, task_key, name, slot)
  local applied, refused = {}, {}
  local now_us = now * 1000
  for _, key in ipairs({name, QUEUE_LIMIT}) do
    local limit = limits[key]
    if limit then
      local c = cursor(key)
      local a = {limit = limit, c = c, start = math.max(c.start, now_us),
                 tolerance = (limit.burst - 1) * limit.interval, key = key}
      applied[#applied + 1] = a
      local refuses = a.start - a.tolerance > now_us
      if refuses then refused[#refused + 1] = a end
      if slot then
        local held = refuses and tonumber(redis.call('ZSCORE', reserved_key(prefix, key), task_id))
        if held and held >= a.start then
          a.kept = held
        else
          c.next = give_back_slot(prefix, key, task_id, c.start, c.next, c.interval)
        end
        redis.call('ZREM', released_key(prefix, key), task_id)
      end
    elseif slot then
      give_back_stored(prefix, key, task_id)  -- a limit this call does not apply
    end
  end
  if #refused == 0 then
    for _, a in ipairs(applied) do
      a.c.start = a.start + a.limit.interval
      if a.c.next < a.c.start then a.c.next = a.c.start end
    end
    if slot then redis.call('HDEL', task_key, 'rate_slot') end
    return true
  end
  local run_at_us, by = 0, 'task'
  for _, a in ipairs(refused) do
    local given = a.kept
    if not given then
      given = math.max(a.c.next, a.start)
      a.c.next = given + a.limit.interval
      redis.call('ZADD', reserved_key(prefix, a.key), integer_text(given), task_id)
    end
    run_at_us = math.max(run_at_us, given - a.tolerance)
    if a.key == QUEUE_LIMIT then by = #refused > 1 and 'both' or 'queue' end
  end
  local run_at = integer_text(math.ceil(run_at_us / 1000))
  emit(feed, {'type', 'throttled', 'task', task_id, 'state', 'delayed', 'at', run_at,
    'limit', by})
  redis.call('HSET', task_key, 'state', 'delayed', 'run_at', run_at, 'rate_slot', run_at)
  redis.call('ZADD', delayed_key, run_at, task_id)
  return false
end

-- Parked tasks of the groups this call looks at whose name has slots free (or no limit
-- in this call) go back to the front of their ready lists, oldest first, at most one
-- per free slot. A keyed group's tasks go back whole when the limit is no longer kept
-- per key: none waits there as declared, and each parks again in its name's group,
-- in its line's order, when popped with no slot free (ConcurrencyKeyMode.tla).
local function unpark()
  local names_key = parked_names_key(prefix)
  if swept and swept[1] ~= swept_from then redis.call('SET', sweep_key, swept[1]) end
  for _, group in ipairs(parked_groups) do
    local list = parked_key(prefix, group)
    local free = LIMITS.count
    local name = group_name(group)
    local max = most[name]
    if max and (keyed[name] or group == name) then
      -- A promise whose task is gone from ready unseen (its record deleted) is dropped.
      local promised = 0
      for _, id in ipairs(redis.call('SMEMBERS', unparked_key(prefix, group))) do
        if redis.call('HGET', prefix .. 'task:' .. id, 'parked') == 'back' then
          promised = promised + 1
        else
          redis.call('SREM', unparked_key(prefix, group), id)
        end
      end
      -- The runs a task of this group is counted against: its key's, or the name's
      -- (all of them, or those with no key; see runs_counted).
      local key = name ~= group and string.sub(group, #name + 2) or nil
      free = max - runs_counted(prefix, name, key, keyed[name]) - promised
    end
    local ids = free > 0 and redis.call('LPOP', list, free)
    -- Each goes to the front, the newest first, so the oldest ends at the very front.
    for i = #(ids or {}), 1, -1 do
      local task_key = prefix .. 'task:' .. ids[i]
      -- An id with no record (evicted, deleted by hand) or one of another type is no
      -- task's: it is dropped, as lease_from drops one, and no record is made up for it.
      local fields = redis.pcall('HMGET', task_key, 'name', 'priority')
      if not failed(fields) and fields[1] then
        emit(feed, {'type', 'unparked', 'task', ids[i], 'state', 'pending'})
        redis.call('HSET', task_key, 'parked', 'back')
        redis.call('SADD', unparked_key(prefix, group), ids[i])
        push_ready(ready_key, ids[i], tonumber(fields[2]), true)
      end
    end
    if marked[group] then redis.call('SREM', freed_key(prefix), group) end
    if redis.call('LLEN', list) == 0 then
      redis.call('SREM', names_key, group)
      forget_group(prefix, group)
    end
  end
end

-- Writes `name`'s concurrency limit to <prefix>limits (what the dashboard shows beside
-- its runs and parked tasks) once a call, as the call starts a run or parks a task under
-- it: a limit lowered by a redeploy shows as lowered while older runs hold their slots.
local function note_limit(name)
  if not limited[name] then
    redis.call('HSET', prefix .. 'limits', name, integer_text(most[name]))
    limited[name] = true
  end
end

-- Whether a task of `name` sent with `limit_key` must wait for a concurrency slot; one
-- that must is parked in its group as declared, at the back of the line, or at its
-- front if it was sent back from a line (`back`) and a newer run took the slot first.
local function parked(task_id, task_key, name, limit_key, back, line)
  local max = most[name]
  if not max or runs_counted(prefix, name, limit_key, keyed[name]) < max then return false end
  local group = declared_group(name, limit_key, keyed[name])
  note_limit(name)
  emit(feed, {'type', 'parked', 'task', task_id, 'state', 'pending', 'limit', max})
  if back then
    redis.call('HSET', task_key, 'parked', '1')
    reparked[#reparked + 1] = {group, task_id, tonumber(line) or 0}
  else
    local place = redis.call('INCR', prefix .. 'parked_line')
    redis.call('HSET', task_key, 'parked', '1', 'line', place)
    redis.call('RPUSH', parked_key(prefix, group), task_id)
  end
  redis.call('SADD', parked_names_key(prefix), group)
  if group ~= name then redis.call('SADD', groups_key(prefix, name), group) end
  return true
end

-- Takes a slot for a run that starts now, if the name is limited: in its record's key's
-- group (`group`), whatever the declaration, so that every later declaration counts it.
local function hold_slot(task_id, task_key, name, group)
  if not most[name] then return end
  redis.call('SADD', holding_key(prefix, group), task_id)
  redis.call('HSET', task_key, 'slot', group)
  if group ~= name then
    redis.call('SADD', groups_key(prefix, name), group)
    redis.call('SADD', keyed_runs_key(prefix, name), task_id)
  end
  note_limit(name)
end

-- A key of another type that lease_from met: {key, type held, type wanted}.
local refused

local function lease_from(list)
  -- No more than may yet be passed over: each popped task is leased or passed.
  local popped = redis.call('RPOP', list, math.min(count - reply[1], PASS_LIMIT - passed))
  if not popped then return false end
  for at, task_id in ipairs(popped) do
    local task_key = prefix .. 'task:' .. task_id
    local record = redis.pcall('HMGET', task_key, 'name', 'payload', 'retries',
      'max_retries', 'fencing_token', 'rate_slot', 'limit_key', 'parked', 'state', 'line')
    -- A record of another type is no task's: its id is dropped, as one with none.
    if failed(record) then record = {} end
    local group = record[1] and limit_group(record[1], record[7])
    -- Where this task may write that the checks above did not look: its keyed group, a
    -- promise of a group no limit of this call names, a rate slot of a limit it does not
    -- apply (a limit removed while tasks waited). A promise is in the group it was sent
    -- back from: its key's, or its name's (see _slots).
    places = {}
    if group and most[record[1]] and not typed[group] then expect_group(group) end
    if group and record[8] == 'back' then
      for _, from in ipairs(waiting_groups(record[1], record[7])) do
        if not typed[from] then expect(unparked_key(prefix, from), 'set') end
      end
    end
    if record[6] then
      for _, key in ipairs({record[1], QUEUE_LIMIT}) do
        if not limits[key] then
          expect(rates_key, 'hash')
          expect(reserved_key(prefix, key), 'zset')
          expect(released_key(prefix, key), 'zset')
        end
      end
    end
    if #places > 0 then
      for i = 1, #places, 2 do
        local held = wrong_type(places[i], places[i + 1])
        if held then
          -- Back where they were, this one and those after it; the call ends with what
          -- it leased so far, its writes and their events whole (see the end).
          for j = #popped, at, -1 do redis.call('RPUSH', list, popped[j]) end
          refused = {places[i], held, places[i + 1]}
          return false
        end
      end
    end
    -- An unparked task leaves the slots promised to its kind (see unpark) as it is popped.
    -- A record with no name has no group to give a promise back to: it is dropped below.
    local back = group and record[8] == 'back'
    if back then
      for _, from in ipairs(waiting_groups(record[1], record[7])) do
        redis.call('SREM', unparked_key(prefix, from), task_id)
      end
      redis.call('HDEL', task_key, 'parked')
    end
    -- An id without a record cannot run; dropping it beats handing a worker nothing.
    -- Nor may one whose record is not pending (an id pushed back by hand, or left by a
    -- lost write): a completed task run again would apply its effect twice.
    if record[1] and record[9] == 'pending'
        and (n_conc == 0 or not parked(task_id, task_key, record[1], record[7], back, record[10]))
        and (n_rates == 0 or admitted(task_id, task_key, record[1], record[6])) then
      if n_conc > 0 then hold_slot(task_id, task_key, record[1], group) end
      -- Throttled before, by a rate limit no worker applies now: it waits for no slot.
      if n_rates == 0 and record[6] then
        redis.call('HDEL', task_key, 'rate_slot')
        give_back_slots(prefix, task_id, record[1])
      end
      if record[10] then redis.call('HDEL', task_key, 'line') end
      local token = mint_token(record[5], now)
      emit(feed, {'type', 'leased', 'task', task_id, 'state', 'running', 'token', token,
       'worker', worker, 'retries', integer_text(stored_whole(record[3], 0)),
       'at', expires_text})
      redis.call('HSET', task_key, 'fencing_token', token, 'state', 'running',
        'worker', worker, 'leased_at', now_text, 'heartbeat_at', now_text)
      scores[#scores + 1], scores[#scores + 2] = expires_text, task_id
      memo[#memo + 1], memo[#memo + 2] = task_id, token
      add(task_id, token, record)
    else
      passed = passed + 1
    end
  end
  return true
end

release_lines()
unpark()
for _, level in ipairs(ready_lists(ready_key)) do
  while reply[1] < count and passed < PASS_LIMIT and lease_from(level[1]) do end
  if reply[1] < count and not refused then forget_if_empty(ready_key, level[2]) end
  if reply[1] >= count or passed >= PASS_LIMIT or refused then break end
end
table.sort(reparked, function(a, b) return a[3] < b[3] end)
for i = #reparked, 1, -1 do
  redis.call('LPUSH', parked_key(prefix, reparked[i][1]), reparked[i][2])
end
for name, c in pairs(cursors) do
  redis.call('HSET', rates_key, name, integer_text(c.start), name .. '|next',
    integer_text(c.next), name .. '|interval', integer_text(c.interval),
    name .. '|burst', integer_text(c.burst))
  if c.own then hold(name, stored_cursors[name]) end
end
for _, held in ipairs(deferred) do
  for _, value in ipairs(held) do reply[#reply + 1] = value end
end
if #scores > 0 then
  call_chunked('ZADD', leased_key, scores)
  if request_id ~= '' then
    redis.call('SET', request_key, table.concat(memo, ' '), 'PX', lease_ms)
  end
end
close_feed(feed)

if refused then
  -- Every write of the call is made and its events appended: the error says why it
  -- leased nothing, and a call that leased tasks returns them, the next one erring.
  if reply[1] == 0 then
    wrong_type_error(refused[1], refused[2], refused[3], 'no task was leased, and the ' ..
      'tasks popped are back in their ready list')
  end
  reply[2] = 0
elseif passed >= PASS_LIMIT and reply[1] < count then
  -- Ready may hold more than this call looked at: look again at once.
  reply[2] = 0
elseif reply[1] < count then
  -- Ready is empty: pending wake tokens are stale, and the worker sleeps until the
  -- next scheduled moment at most.
  redis.call('DEL', wake_key)
  local next_due = -1
  for _, key in ipairs({delayed_key, leased_key}) do
    local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    if first[2] then
      local due = tonumber(first[2]) - now
      if due < 0 then due = 0 end
      if next_due < 0 or due < next_due then next_due = due end
    end
  end
  reply[2] = next_due
end
return reply
