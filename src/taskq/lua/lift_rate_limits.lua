--[[
  lift_rate_limits: forget the rate limits a deploy no longer declares. Each name is a
  task name the calling worker runs with no rate limit, one no live worker of the
  queue runs (its tasks die as unknown when leased, so they need not wait), or '*'
  when the queue has no limit of its own. A limit still stored for one of them has its
  line of throttled tasks released: each is made due at once, in the line's order (see
  _rates' make_due), to be checked again by the limits still in force, and its cursors
  are deleted, so no task waits for the slot of a limit no lease applies
  (QueueRateLimit.tla's Remove, checked by TLC; QueueRateLimitKeepLine is the mutant
  that keeps the line). A worker calls it as it starts, again while tasks are left,
  and now and then after, for lines that workers of an older deploy still make.
  KEYS[1] rates   HASH    <name>, <name>|next, <name>|interval, <name>|burst,
                          <name>|holders: see lease.lua
  KEYS[2] delayed ZSET    task id -> run-at (ms)
  KEYS[3] events  STREAM  change feed
  KEYS[4] seq     STRING  last event sequence number
  KEYS[5] epoch   STRING  event log incarnation
  ARGV[1] prefix          queue key prefix; the limits' lines (reserved:, released:)
                          and released_at derive from it
  ARGV[2] retention       events kept in the stream (1 to 10^9)
  ARGV[3] limit           most tasks made due by this call (1 to 100000)
  ARGV[4] names           the first name; each further ARGV is one more (1 to 10000
                          names in all, none empty or holding a '|')
  Returns: {lifted, left}: how many of the names had a stored limit or line that this
           call forgot whole; how many tasks still wait in their lines (0: done). An
           argument out of its range is an error, and nothing is written
  Emits:   rescheduled (state delayed, `at` its new run_at, `limit` the name) for each
           task made due: it stays delayed until promoted, as with lease.lua's release
           of a line whose rate changed
]]
--- @include "_common"
--- @include "_rates"

local rates_key, delayed_key = KEYS[1], KEYS[2]
local events_key, seq_key, epoch_key = KEYS[3], KEYS[4], KEYS[5]
local prefix, retention = ARGV[1], ARGV[2]

-- Checked before the first write (see whole_arg); retention by open_feed.
local limit = whole_arg('limit', ARGV[3], 1, LIMITS.limit)
local names = {}
for i = 4, #ARGV do names[#names + 1] = ARGV[i] end
if not ARGV[4] or #names > LIMITS.count then
  error('names must be 1 to ' .. LIMITS.count .. ' names, not ' .. #names)
end
for _, name in ipairs(names) do
  -- A '|' would name another limit's field (<name>|next...); '' no limit at all.
  if name == '' or string.find(name, '|', 1, true) then
    error('names must be task names or *, not ' .. string.format('%q', name))
  end
end

-- Every key it writes is checked first: a line of another type, refused after the lines
-- before it were popped, would leave their tasks in no line and not delayed.
local places = {rates_key, 'hash', delayed_key, 'zset', events_key, 'stream',
  prefix .. 'released_at', 'string'}
for _, name in ipairs(names) do
  places[#places + 1], places[#places + 2] = released_key(prefix, name), 'zset'
  places[#places + 1], places[#places + 2] = reserved_key(prefix, name), 'zset'
end
expect_types(places)
local now = server_now_ms()
local feed = open_feed(events_key, seq_key, epoch_key, retention, now)
-- Its first write only removes (ZPOPMIN), so it checks for room first (see _common).
refuse_when_out_of_memory(prefix)
-- Each task made due, beside the name of the limit whose line it was in.
local due, lifted, left = {}, 0, 0
for _, name in ipairs(names) do
  -- The released line first: its tasks were given slots before those still reserved.
  local lines = {released_key(prefix, name), reserved_key(prefix, name)}
  local stored = redis.call('HEXISTS', rates_key, name) == 1
  local had_line = false
  for _, line in ipairs(lines) do
    local room = limit - #due
    local popped = room > 0 and redis.call('ZPOPMIN', line, room) or {}
    for j = 1, #popped, 2 do due[#due + 1] = {popped[j], name} end
    had_line = had_line or #popped > 0
  end
  local waiting = redis.call('ZCARD', lines[1]) + redis.call('ZCARD', lines[2])
  if waiting == 0 and (stored or had_line) then
    redis.call('HDEL', rates_key, name, name .. '|next', name .. '|interval', name .. '|burst',
      name .. '|holders')
    redis.call('DEL', holders_key(prefix, name))
    lifted = lifted + 1
  end
  left = left + waiting
end

make_due(prefix, delayed_key, feed, due, now)
close_feed(feed)
return {lifted, left}
