--[[
  _common: helpers included (by the loader, at "--- @include") into every operation:
  the clock, argument checks, ready lists and priorities, waking workers, the change
  feed and backoff. Not an operation itself: it has no KEYS or ARGV of its own. The
  helpers only some operations need live in _slots and _ended, since every script call
  pays for defining each helper its script includes.
]]

-- Redis server time in milliseconds: the only clock any script uses.
local function server_now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- An integer as text. Lua 5.1 turns a number into text with "%.14g", the C library's
-- slow floating-point path, each time it is passed to redis.call or joined to a
-- string; numbers a script writes many times are converted once, as integers.
local function integer_text(n)
  return string.format('%d', n)
end

-- The largest value each argument may take: taskq.limits' ranges in the units the
-- scripts get (a test pins the two tables together). They keep every sum a script
-- makes (now + delay, now + lease, a backoff, a TTL) far inside 2^53, below which
-- Lua's numbers (doubles) still count single milliseconds, and inside what Redis
-- accepts (PX, EX, PEXPIRE, XTRIM MAXLEN).
local LIMITS = {
  delay_ms = 315360000000,        -- ten years
  run_at_ms = 10000000000000,     -- server time in ms: the year 2286
  lease_ms = 604800000,           -- a week
  backoff_ms = 86400000,          -- a day
  ttl_ms = 315360000000,          -- ten years (completed and dead records)
  idempotency_ttl = 315360000,    -- ten years, in seconds
  retention = 1000000000,         -- events kept in the stream
  max_retries = 1000,
  count = 10000,                  -- tasks leased or enqueued by one call
  limit = 100000,                 -- tasks reaped, promoted or purged by one call
  jitter_seed = 2147483646,       -- 2^31 - 2: the Park-Miller generator's range
  definition_bytes = 4096,        -- a periodic schedule's definition (JSON)
  priority = 9,                   -- priorities run from 0 (lowest) to 9 (highest)
  interval_us = 86400000000,      -- a rate limit's spacing between starts: a day
  burst = 10000,                  -- starts a rate limit lets through at once
  concurrency = 10000,            -- runs a concurrency limit lets hold leases at once
  payload_bytes = 536870912,      -- a task's payload: 512 MiB, Redis's largest string
}

-- `value` (an ARGV string) as a number if it is a whole number from `low` to `high`;
-- else an error naming the argument, the value and the range. Every script calls this
-- for each argument a write could refuse or overflow with, before its first write: a
-- script that fails part way keeps what it wrote (see open_feed).
local function whole_arg(name, value, low, high)
  local n = string.match(value or '', '^%d+$') and tonumber(value)
  if not n or n < low or n > high then
    error(name .. ' must be a whole number between ' .. integer_text(low) .. ' and ' ..
      integer_text(high) .. ', not ' .. tostring(value))
  end
  return n
end

-- A whole number a record holds (a count, a token, a TTL, a time), from 0 to 2^53, or
-- `default` when the field holds anything else: written by hand, and tonumber alone
-- reads 'nan', 'inf' and '1e400' as numbers that a ZADD or PEXPIRE then refuses, or
-- a comparison never settles, part way through a script.
local function stored_whole(value, default)
  local n = value and string.match(value, '^%d+$') and tonumber(value)
  if n and n <= 9007199254740992 then return n end
  return default
end

-- A task's next fencing token, its record holding `stored`: one more than that, or the
-- server's time in milliseconds times TOKENS_PER_MS, whichever is larger. A crash that
-- loses the writes since the last fsync (`appendfsync everysec`), or a failover that
-- loses what the old primary had not passed on, takes a lease's token back with it
-- while its worker runs on; counting on from the record would mint that token again,
-- for a second worker, and neither effect()'s check nor the ledger's fence could tell
-- the two apart. The floor is past every token minted in an earlier millisecond, and
-- Redis answers again only after its clock has moved on, so long as that clock never
-- steps back (specs/TaskQueue/TokenMint.tla; its mutants TokenMintSameClock and
-- TokenMintStepBack are the clock behind). The floor stays below 2^53, where Lua's
-- numbers count single tokens, until the year 2255.
local TOKENS_PER_MS = 1000  -- far more than one task is ever given in a millisecond
local function mint_token(stored, now_ms)
  local token = stored_whole(stored, 0) + 1
  local floor = now_ms * TOKENS_PER_MS
  if floor > token then token = floor end
  return integer_text(token)
end

-- taskq's keys may have been written by something else, as another type. Redis refuses
-- a write to such a key, and a script refused part way keeps what it wrote before (a
-- task taken off leased and never put on delayed is in no place at all). A script checks
-- the keys a task's place or its events are written to with this, before its first
-- write: `expected` is a flat list of key, type ('list', 'zset', 'set', 'stream'), and a
-- key of another type fails the call before it has written anything. (The wake list and
-- the event totals are hints and counts: a write to them Redis refuses is skipped, and
-- the workers and /metrics that read them report the key.)
local function wrong_type(key, want)
  local held = redis.call('TYPE', key)['ok']
  if held ~= 'none' and held ~= want then return held end
end

local function wrong_type_error(key, held, want, outcome)
  error('WRONGTYPE ' .. key .. ' holds a ' .. held .. ' where taskq keeps a ' .. want ..
    ': something else wrote it; ' .. outcome)
end

local function expect_type(key, want)
  local held = wrong_type(key, want)
  if held then wrong_type_error(key, held, want, 'nothing was changed') end
end

local function expect_types(expected)
  local checked = {}
  for i = 1, #expected, 2 do
    local key = expected[i]
    if not checked[key] then
      checked[key] = true
      expect_type(key, expected[i + 1])
    end
  end
end

-- Out of memory (maxmemory with noeviction), Redis refuses a script's first command that
-- could grow memory, but once the script has written, lets every later write through. A
-- script whose first write only removes (a lease's pop) would go on under OOM and hand
-- out work whose acks Redis then refuses: the task runs again and again. So such a
-- script calls this before its first write: SETRANGE of nothing is a command that could
-- grow memory, refused out of memory, and otherwise writes nothing (no key is created,
-- nothing reaches the AOF or replicas).
local function refuse_when_out_of_memory(prefix)
  redis.call('SETRANGE', prefix .. 'memory-check', 0, '')
end

-- A registered worker's record (see register_worker.lua), which lives while it does.
local function worker_key(prefix, worker_id)
  return prefix .. 'worker:' .. worker_id
end

-- Priorities. A task's priority (0 to LIMITS.priority, higher first) is fixed when it is
-- enqueued and kept in its record, as `priority`, unless it is the default. Ready tasks
-- of the default priority wait on the ready list itself, the others on
-- `<ready>:<priority>`; `<ready>:levels` (a ZSET, each member its own score) names the
-- other levels that hold any. A queue that never uses priorities pays one EXISTS per
-- lease and no other command.
local DEFAULT_PRIORITY = 5

local function levels_key(ready_key)
  return ready_key .. ':levels'
end

-- The ready list a task of `priority` (a number, or nil: the default) waits on. A
-- priority no script writes (a record's field changed by hand: NaN, 12, 2.5) is taken
-- as the default, rather than naming a list no lease reads.
local function ready_list(ready_key, priority)
  if priority == nil or priority == DEFAULT_PRIORITY or priority ~= priority
      or priority < 0 or priority > 9 or priority % 1 ~= 0 then
    return ready_key
  end
  return ready_key .. ':' .. integer_text(priority)
end

-- Puts `task_id` on its priority's ready list: at the back, or with `front` at the
-- front (a released task already waited its turn).
local function push_ready(ready_key, task_id, priority, front)
  local list = ready_list(ready_key, priority)
  redis.call(front and 'RPUSH' or 'LPUSH', list, task_id)
  if list ~= ready_key then
    redis.call('ZADD', levels_key(ready_key), priority, integer_text(priority))
  end
end

-- Adds to `expected` (see expect_types) the keys push_ready writes for `priority`.
local function ready_types(expected, ready_key, priority)
  local list = ready_list(ready_key, priority)
  expected[#expected + 1], expected[#expected + 2] = list, 'list'
  if list ~= ready_key then
    expected[#expected + 1], expected[#expected + 2] = levels_key(ready_key), 'zset'
  end
  return expected
end

-- A level whose list an LREM or a pop may have emptied leaves the levels set.
-- Its ZREM comes after the write that emptied the list, so it is skipped if the levels
-- set is of another type (written by hand), rather than fail the call part way; every
-- lease then reports that key.
local function forget_if_empty(ready_key, priority)
  local list = ready_list(ready_key, priority)
  if list ~= ready_key and redis.call('LLEN', list) == 0 then
    redis.pcall('ZREM', levels_key(ready_key), integer_text(priority))
  end
end

-- The ready lists in the order a lease takes from them, highest priority first, each
-- as {list, priority}.
local function ready_lists(ready_key)
  local default = {ready_key, DEFAULT_PRIORITY}
  if redis.call('EXISTS', levels_key(ready_key)) == 0 then return {default} end
  local lists, placed = {}, false
  for _, level in ipairs(redis.call('ZREVRANGE', levels_key(ready_key), 0, -1)) do
    local priority = tonumber(level)
    if not placed and priority < DEFAULT_PRIORITY then
      lists[#lists + 1], placed = default, true
    end
    lists[#lists + 1] = {ready_key .. ':' .. level, priority}
  end
  if not placed then lists[#lists + 1] = default end
  return lists
end

-- How many tasks are ready, over every priority.
local function ready_count(ready_key)
  local n = 0
  for _, list in ipairs(ready_lists(ready_key)) do n = n + redis.call('LLEN', list[1]) end
  return n
end

-- Idle workers block on the wake list; a bounded number of tokens is enough to wake
-- them all, and the list never grows past it while every worker is busy. LPUSH answers
-- the list's length, so the trim is paid only by a push that passed the cap.
local WAKE_CAP = 256
local function wake_workers(wake_key, n)
  if n <= 0 then return end
  if n > WAKE_CAP then n = WAKE_CAP end
  local tokens = {}
  for i = 1, n do tokens[i] = '1' end
  local length = redis.pcall('LPUSH', wake_key, unpack(tokens))
  if type(length) == 'number' and length > WAKE_CAP then
    redis.call('LTRIM', wake_key, 0, WAKE_CAP - 1)
  end
end

-- Runs `command key item...` over a list in chunks: unpacking a very large table at
-- once overflows the Lua stack. The chunk is even, so score/member pairs stay whole.
-- Returns the chunks' array replies joined in order (an HMGET's values); empty for a
-- command whose reply is no array.
local CHUNK = 1000
local function call_chunked(command, key, items)
  local joined = {}
  for i = 1, #items, CHUNK do
    local reply = redis.call(command, key, unpack(items, i, math.min(i + CHUNK - 1, #items)))
    if type(reply) == 'table' then
      for j = 1, #reply do joined[#joined + 1] = reply[j] end
    end
  end
  return joined
end

-- The change feed as one script call writes it. Every event gets the dense id <seq>-0.
-- A call's events are held until it closes its feed, then numbered with one INCRBY and
-- appended in order: a batch of a thousand events costs a thousand XADDs and one bump
-- of the counter, not two thousand commands. A counter that lands on exactly this
-- call's count means the log starts over (new queue, or its keys were lost): a new
-- epoch tells feed clients that ids from before are meaningless now. If the counter
-- alone was lost, it restarts after the stream's last id, so XADD can never fail
-- mid-script. The lifetime totals are likewise added once per call, not per event,
-- and the log is trimmed to its retention once per call, after the appends: an exact
-- MAXLEN on each XADD costs a full log several times what the append does, and the
-- script is atomic, so no reader sees the log longer than its retention.
--
-- Every script opens its feed before its first write and checks there, or before, each
-- argument a write could refuse: a script that fails part way keeps what it wrote, and
-- the events it still held for those writes would be lost.
local function open_feed(events_key, seq_key, epoch_key, retention, now_ms)
  return {events = events_key, seq = seq_key, epoch = epoch_key,
          retention = whole_arg('retention', retention, 1, LIMITS.retention),
          now = integer_text(now_ms), pending = {}}
end

-- Queues one event; `fields` starts with 'type', <type>, 'task', <id>, 'state', <state>.
local function emit(feed, fields)
  feed.pending[#feed.pending + 1] = fields
end

-- The id the stream's next entry must exceed: its last-generated id (which an XDEL of its
-- tail or an XSETID leaves above its last entry), or 0 for no stream.
local function stream_top(events_key)
  local info = redis.pcall('XINFO', 'STREAM', events_key)
  if type(info) ~= 'table' or info.err then return 0 end
  for i = 1, #info, 2 do
    if info[i] == 'last-generated-id' then
      return tonumber(string.match(info[i + 1], '^(%d+)'))
    end
  end
  return 0
end

-- Numbers the call's events after the stream's top in a new epoch: the counter was
-- lost, or is behind an entry something other than taskq added.
local function renumber(feed, n)
  local last = stream_top(feed.events) + n
  redis.call('SET', feed.seq, last)
  local t = redis.call('TIME')
  redis.call('SET', feed.epoch, t[1] .. string.format('%06d', tonumber(t[2])))
  return last
end

local function failed(reply)
  return type(reply) == 'table' and reply.err ~= nil
end

-- Appends the call's events and adds them to the lifetime totals per event type and
-- resulting state, for /metrics (the stream itself is trimmed, so it cannot be
-- counted). Every script that emits calls this once before it returns: an event
-- queued by a script that does not close its feed is never written.
--
-- The keys are taskq's own, but someone else may have written to them (an XADD by
-- hand, a counter set to text): the writes that would fail then are made with pcall
-- and mended, since by now the script has made its other writes, and failing here
-- would keep those without their events. Only an events key of another type is past
-- mending, and fails the call.
local function close_feed(feed)
  local n = #feed.pending
  if n == 0 then return end
  local last = redis.pcall('INCRBY', feed.seq, n)
  if failed(last) or last == n or redis.call('EXISTS', feed.epoch) == 0 then
    last = renumber(feed, n)
  end
  local totals = {}
  for i, fields in ipairs(feed.pending) do
    local id = string.format('%d-0', last - n + i)
    local added = redis.pcall('XADD', feed.events, id, 'ts', feed.now, unpack(fields))
    if failed(added) and i == 1 then
      last = renumber(feed, n)
      id = string.format('%d-0', last - n + i)
      added = redis.call('XADD', feed.events, id, 'ts', feed.now, unpack(fields))
    elseif failed(added) then
      error(added.err)
    end
    local total = fields[2] .. ':' .. fields[6]
    totals[total] = (totals[total] or 0) + 1
  end
  redis.call('XTRIM', feed.events, 'MAXLEN', feed.retention)
  local stats = feed.events .. ':stats'
  for total, count in pairs(totals) do
    if failed(redis.pcall('HINCRBY', stats, total, count)) then
      -- It held no number: it starts again (unless the totals are not a hash at all).
      redis.pcall('HSET', stats, total, count)
    end
  end
end

-- Equal-jitter exponential backoff: the full delay doubles per retry up to the cap,
-- and the wait is between half of it and all of it so failed tasks spread out.
local function backoff_ms(retries, base_ms, max_ms, jitter)
  local full = base_ms * (2 ^ (retries - 1))
  if base_ms == 0 then full = 0 elseif full > max_ms then full = max_ms end
  return math.floor(full / 2 + (full / 2) * jitter)
end
