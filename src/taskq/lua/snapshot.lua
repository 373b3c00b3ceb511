--[[
  snapshot: read a queue's state and the feed position it reflects, in one atomic
  step, so a dashboard can load it and follow the feed from exactly there. Read-only.
  KEYS[1] ready   LIST    task ids of the default priority that can run now (counted
                          with those of other priorities: see _common)
  KEYS[2] leased  ZSET    task id -> lease expiry (ms)
  KEYS[3] delayed ZSET    task id -> run-at (ms)
  KEYS[4] dlq     LIST    dead task ids, most recent first
  KEYS[5] events  STREAM  change feed
  KEYS[6] epoch   STRING  event log incarnation (handed out as _epoch reads it)
  ARGV[1] prefix          queue key prefix; task keys derive from it
  ARGV[2] limit           most tasks listed per section (0 to 100000; 0: counts alone)
  ARGV[3] groups          most concurrency groups listed (0 to 100000)
  Returns: {now_ms, ready, leased, delayed, dead, epoch, last_seq, last_ts,
            n, (id, expiry, name, worker, token, retries, progress, progress_message,
                progress_token) x n,
            m, (id, run_at, name, retries, last_error, error_type, rate_slot) x m,
            d, (id, name, retries, dead_at, last_error, error_type) x d,
            c, (group, max, holding, parked) x c, groups}: `ready` counts the pending tasks
           parked for a concurrency slot too; the last section has each concurrency
           limit's group (a name, or `<name>|<key>` for a limit kept per key), the
           name's limit as leases last applied it (0: unknown), the group's runs
           holding a slot and its parked tasks, the first `groups` of them by name (a
           limit kept per account may have a group for each of thousands); `groups` at
           the end: how many there are in all (0 when none is asked for)
  Emits:   nothing
]]
--- @include "_common"
--- @include "_slots"
--- @include "_epoch"

local ready_key, leased_key, delayed_key, dlq_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local events_key, epoch_key = KEYS[5], KEYS[6]
local prefix, limit = ARGV[1], whole_arg('limit', ARGV[2], 0, LIMITS.limit)
local shown_groups = whole_arg('groups', ARGV[3], 0, LIMITS.limit)

-- The concurrency limits' groups (see _common): each limited name, or its keyed groups
-- that hold a slot or wait for one (and the name itself if runs without a key do);
-- any group with parked tasks; and the parked tasks in all.
-- With no group listed, only the parked lines are read, to count their tasks as ready.
local limited, listed, parked_total = {}, {}, 0
local function list_group(group)
  if shown_groups > 0 and not listed[group] then
    limited[#limited + 1], listed[group] = group, true
  end
end
local most = shown_groups > 0 and redis.call('HGETALL', prefix .. 'limits') or {}
for i = 1, #most, 2 do
  local groups = redis.call('SMEMBERS', groups_key(prefix, most[i]))
  if #groups == 0 or redis.call('SCARD', holding_key(prefix, most[i])) > 0 then
    list_group(most[i])
  end
  for _, group in ipairs(groups) do list_group(group) end
end
for _, group in ipairs(redis.call('SMEMBERS', parked_names_key(prefix))) do
  parked_total = parked_total + redis.call('LLEN', parked_key(prefix, group))
  list_group(group)
end
table.sort(limited)

local reply = {server_now_ms(), ready_count(ready_key) + parked_total,
  redis.call('ZCARD', leased_key),
  redis.call('ZCARD', delayed_key), redis.call('LLEN', dlq_key),
  feed_epoch(redis.call('GET', epoch_key)), 0, '0'}
local last = redis.call('XREVRANGE', events_key, '+', '-', 'COUNT', 1)[1]
if last then
  reply[7] = tonumber(string.match(last[1], '^(%d+)'))
  for i = 1, #last[2], 2 do
    if last[2][i] == 'ts' then reply[8] = last[2][i + 1] end
  end
end

local function add(values)
  for _, value in ipairs(values) do reply[#reply + 1] = value or '' end
end

local function section(ids_with_scores, fields)
  local n = #ids_with_scores / 2
  reply[#reply + 1] = n
  for i = 1, #ids_with_scores, 2 do
    local id = ids_with_scores[i]
    local record = redis.call('HMGET', prefix .. 'task:' .. id, unpack(fields))
    add({id, ids_with_scores[i + 1]})
    for j = 1, #fields do reply[#reply + 1] = record[j] or '' end
  end
end

-- The first `limit` members of a sorted set or list; none for a limit of 0, where a
-- range to `limit - 1`, -1, would read every member: a count must cost the same
-- whatever the queue holds.
local function first(command, key, ...)
  if limit == 0 then return {} end
  return redis.call(command, key, 0, limit - 1, ...)
end

section(first('ZRANGE', leased_key, 'WITHSCORES'),
  {'name', 'worker', 'fencing_token', 'retries', 'progress', 'progress_message',
   'progress_token'})
section(first('ZRANGE', delayed_key, 'WITHSCORES'),
  {'name', 'retries', 'last_error', 'error_type', 'rate_slot'})
local dead = first('LRANGE', dlq_key)
reply[#reply + 1] = #dead
for _, id in ipairs(dead) do
  local record = redis.call('HMGET', prefix .. 'task:' .. id, 'name', 'retries', 'dead_at',
    'last_error', 'error_type')
  add({id, record[1], record[2], record[3], record[4], record[5]})
end
reply[#reply + 1] = math.min(#limited, shown_groups)
for i = 1, math.min(#limited, shown_groups) do
  local group = limited[i]
  add({group, redis.call('HGET', prefix .. 'limits', group_name(group)) or '0',
    redis.call('SCARD', holding_key(prefix, group)),
    redis.call('LLEN', parked_key(prefix, group))})
end
reply[#reply + 1] = #limited
return reply
