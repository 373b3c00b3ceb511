--[[
  fire: turn a periodic schedule's due ticks into tasks, each tick at most once ever.
  The caller proposes tick times; the server's clock decides which are due, and the
  schedule's last handled tick, advanced in this same step, refuses any tick again.
  KEYS[1] schedules HASH  last:<schedule> -> tick ms handled last (one that is no whole
                          number, written by hand, counts as none: the schedule starts
                          again as a new one), version:<schedule>, definition:<schedule>
  KEYS[2] ready    LIST   task ids of the default priority that can run now (the left
                          end is the back; other priorities: see _common)
  KEYS[3] events   STREAM change feed
  KEYS[4] seq      STRING last event sequence number
  KEYS[5] epoch    STRING event log incarnation
  KEYS[6] wake     LIST   wake-up tokens for idle workers
  ARGV[1] prefix          queue key prefix; task keys derive from it
  ARGV[2] retention       events kept in the stream (1 to 10^9)
  ARGV[3] schedule        schedule name; its tick's task id is sched:<schedule>:<tick ms>
  ARGV[4] version         the schedule's definition hash, kept for `taskq schedules`
  ARGV[5] definition      JSON object describing the schedule, its "version" field equal
                          to ARGV[4] (2 to 4096 bytes), kept for readers without the app
                          (the dashboard): written with a new version, or where the
                          stored one differs
  ARGV[6] name            registered task name
  ARGV[7] payload         JSON text
  ARGV[8] max_retries     retries before a task goes to the DLQ (0 to 1000)
  ARGV[9] policy          'all' | 'latest' | 'skip': what becomes of due ticks a later
                          due tick overtook (all: each runs; else the latest only, and
                          under skip only if it is at most grace_ms late)
  ARGV[10] grace_ms       how late a tick may fire under skip (1 to 315360000000)
  ARGV[11] after_ms       the last handled tick the caller knew of, which it proposes
                          ticks after (0 to 10^13): one later than the stored one means
                          Redis lost writes the caller saw (a failover, a crash), and
                          nothing fires, lest the ticks between be passed over
  ARGV[12] priority       its task's: 0 (lowest) to 9 (highest)
  ARGV[13] count          ticks proposed (0 to 10000); then one value each:
  ARGV[14] tick_ms        a tick time (ms, server TIME), strictly ascending
  Returns: {'new' | 'same' | 'replaced', last tick ms, server now ms, task_id...}: how
           the stored version compared (a new schedule, or one whose last tick is no
           whole number, starts at the server's now and fires nothing), the last
           handled tick after the call (propose from it next), and each task created;
           an argument out of its range, or a key of another type where the
           schedule's state or its tick's task goes, is an error, and nothing is written
  Emits:   enqueued (state pending), one per created task
]]
--- @include "_common"

local schedules_key, ready_key = KEYS[1], KEYS[2]
local events_key, seq_key, epoch_key, wake_key = KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local prefix, retention, schedule, version = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local definition, name, payload, max_retries = ARGV[5], ARGV[6], ARGV[7], ARGV[8]
local policy, grace_ms, after_ms, priority = ARGV[9], ARGV[10], ARGV[11], ARGV[12]
local count = ARGV[13]

-- Checked before the first write (see whole_arg); retention by open_feed.
whole_arg('max_retries', max_retries, 0, LIMITS.max_retries)
grace_ms = whole_arg('grace_ms', grace_ms, 1, LIMITS.delay_ms)
after_ms = whole_arg('after_ms', after_ms, 0, LIMITS.run_at_ms)
priority = whole_arg('priority', priority, 0, LIMITS.priority)
count = whole_arg('count', count, 0, LIMITS.count)
if policy ~= 'all' and policy ~= 'latest' and policy ~= 'skip' then
  error('policy must be all, latest or skip, not ' .. tostring(policy))
end
-- A definition that is not the fired version's would show readers another schedule.
local decoded, described = pcall(cjson.decode, definition or '')
if #(definition or '') < 2 or #definition > LIMITS.definition_bytes or not decoded or
    type(described) ~= 'table' or described.version ~= version then
  error('definition must be a JSON object of at most ' .. LIMITS.definition_bytes ..
    ' bytes whose version is ' .. tostring(version))
end
if #ARGV ~= 13 + count then
  error('count ' .. count .. ' needs ' .. (13 + count) .. ' ARGV values, not ' .. #ARGV)
end
local ticks = {}
for i = 1, count do
  local base = 13 + i
  ticks[i] = whole_arg('tick_ms', ARGV[base], 0, LIMITS.run_at_ms)
  if i > 1 and ticks[i] <= ticks[i - 1] then
    error('tick_ms values must be strictly ascending: ' .. integer_text(ticks[i - 1]) ..
      ' then ' .. integer_text(ticks[i]))
  end
end

-- A tick's task goes to its ready list: that list and the log must take it, or the
-- tick would be marked handled with its task in no place; and the schedules hash its
-- state is read from and kept in.
expect_types(ready_types({events_key, 'stream', schedules_key, 'hash'}, ready_key,
  priority))
local now = server_now_ms()
local now_text = integer_text(now)
local feed = open_feed(events_key, seq_key, epoch_key, retention, now)
local last_field, version_field = 'last:' .. schedule, 'version:' .. schedule
local definition_field = 'definition:' .. schedule
local stored = redis.call('HMGET', schedules_key, last_field, version_field,
  definition_field)
local compared = 'same'
-- Judged before the first write: a value written by hand names no tick to go on from.
local last = stored_whole(stored[1])
if not last then
  -- A schedule seen for the first time starts now: its past ticks were never missed.
  redis.call('HSET', schedules_key, last_field, now_text, version_field, version,
    definition_field, definition)
  return {'new', now_text, now_text}
end
if stored[2] ~= version then
  compared = 'replaced'
  redis.call('HSET', schedules_key, version_field, version, definition_field, definition)
elseif stored[3] ~= definition then
  -- Missing (a taskq that kept none fired it) or left by a firer of another version.
  redis.call('HSET', schedules_key, definition_field, definition)
end

local due = {}
for _, tick in ipairs(ticks) do
  if tick > last and tick <= now then due[#due + 1] = tick end
end
local reply = {compared, integer_text(last), now_text}
if #due == 0 or after_ms > last then return reply end

local latest = due[#due]
local run = {}
if policy == 'all' then
  run = due
elseif policy == 'latest' or now - latest <= grace_ms then
  run = {latest}
end
reply[2] = integer_text(latest)
redis.call('HSET', schedules_key, last_field, reply[2])

for _, tick in ipairs(run) do
  local tick_text = integer_text(tick)
  local task_id = 'sched:' .. schedule .. ':' .. tick_text
  local task_key = prefix .. 'task:' .. task_id
  -- The last tick already refuses a second firing; the id guards a record written by
  -- hand or a schedule record lost on its own.
  if redis.call('EXISTS', task_key) == 0 then
    local event = {'type', 'enqueued', 'task', task_id, 'state', 'pending', 'name', name,
      'at', now_text}
    redis.call('HSET', task_key, 'state', 'pending', 'name', name, 'payload', payload,
      'max_retries', max_retries, 'retries', '0', 'fencing_token', '0',
      'idempotency_key', '', 'created_at', now_text, 'run_at', now_text,
      'schedule', schedule, 'tick', tick_text)
    if priority ~= DEFAULT_PRIORITY then  -- as enqueue: the default is not written
      redis.call('HSET', task_key, 'priority', integer_text(priority))
      event[#event + 1], event[#event + 2] = 'priority', integer_text(priority)
    end
    emit(feed, event)
    push_ready(ready_key, task_id, priority, false)
    reply[#reply + 1] = task_id
  end
end
close_feed(feed)
wake_workers(wake_key, #reply - 3)
return reply
