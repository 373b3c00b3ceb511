--[[
  register_worker: say that a worker is alive on this queue, for one lease: its record,
  written again at every heartbeat, expires with it, so a worker that vanished leaves
  the registry within a lease. Old entries of the index, and of the dead_ttls beside
  it, are pruned on the way (at most 1000 a call: each later call prunes on), and a
  few dead_ttls entries picked at random that the index no longer holds (a worker of
  an older version pruned or unregistered it). The dead_ttls and runners keys expire
  with the last record written to them, so a fleet gone for good leaves neither.
  KEYS[1] workers   ZSET   worker ids by the time (ms) their record expires
  KEYS[2] worker    HASH   this worker's record
  KEYS[3] dead_ttls ZSET   worker ids by the ms each keeps a dead task, so a purge finds
                           the longest a live worker keeps without reading every record
  KEYS[4] runners   ZSET   task names by the latest time (ms) a record of a worker that
                           runs the name expires, so a lift finds whether a live worker
                           runs a name without reading every record; and '#<worker_id>'
                           by its record's expiry, written with its names
  ARGV[1] worker_id        the worker's id
  ARGV[2] ttl              ms the record lives unless written again (1 to 604800000)
  ARGV[3] host             its host name
  ARGV[4] pid              its process id
  ARGV[5] queues           the queues it leases from, comma-separated
  ARGV[6] concurrency      its handler slots
  ARGV[7] in_hand          tasks it holds now
  ARGV[8] tasks            the task names it runs, comma-separated
  ARGV[9] version          its taskq version
  ARGV[10] dead_ttl        ms it keeps a dead task in the DLQ (0 to 315360000000): a
                           purge keeps dead tasks as long as any live worker does
  Returns: the server time (ms) it was written at; workers or the record of another
           type is an error, and nothing is written. An index of another type (written
           by something else) is passed over, the record written all the same: the
           lift and the purge, which read the indexes, refuse to decide without them,
           and the workers view and a result's wait read the registry alone
  Emits:   nothing (a worker is not a task: the workers view reads the registry)
]]
--- @include "_common"

local workers_key, worker_key, dead_ttls_key, runners_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local worker_id = ARGV[1]

-- Checked before the first write (see whole_arg).
local ttl = whole_arg('ttl', ARGV[2], 1, LIMITS.lease_ms)
local concurrency = whole_arg('concurrency', ARGV[6], 1, LIMITS.count)
local in_hand = whole_arg('in_hand', ARGV[7], 0, LIMITS.count)
local dead_ttl = whole_arg('dead_ttl', ARGV[10], 0, LIMITS.ttl_ms)

-- A record written without its index entry would never be pruned from the workers view.
expect_types({workers_key, 'zset', worker_key, 'hash'})
local function usable(key)
  local kind = redis.call('TYPE', key)['ok']
  return kind == 'zset' or kind == 'none'
end
local index_ttls, index_runners = usable(dead_ttls_key), usable(runners_key)
local now = server_now_ms()
redis.call('HSETNX', worker_key, 'started_at', now)
redis.call('HSET', worker_key, 'worker_id', worker_id, 'host', ARGV[3], 'pid', ARGV[4],
  'queues', ARGV[5], 'concurrency', concurrency, 'in_hand', in_hand, 'tasks', ARGV[8],
  'version', ARGV[9], 'dead_ttl', dead_ttl, 'last_beat', now)
redis.call('PEXPIRE', worker_key, ttl)
redis.call('ZADD', workers_key, now + ttl, worker_id)
if index_runners then
  -- A ZADD for hundreds of names at once, not one a name: each call into Redis costs
  -- about what the write does, and every worker makes this every beat.
  -- With the names, in the same writes, '#' and the worker's id (no task name has a '#'):
  -- a worker whose mark is here has every name it runs here, so not_run need read the
  -- records of the others only, however the key was emptied or replaced meanwhile.
  local batch = {'ZADD', runners_key, 'GT', now + ttl, '#' .. worker_id}
  for name in string.gmatch(ARGV[8], '[^,]+') do
    batch[#batch + 1] = now + ttl
    batch[#batch + 1] = name
    if #batch >= 1003 then  -- 500 names: well within Lua's stack for unpack
      redis.call(unpack(batch))
      batch = {'ZADD', runners_key, 'GT'}
    end
  end
  if #batch > 3 then redis.call(unpack(batch)) end
  -- Each name is removed once, a lease after the last worker that ran it beat.
  redis.call('ZREMRANGEBYSCORE', runners_key, '-inf', '(' .. now)
end
-- Bounded, and unpacked whole: a thousand ids fit Lua's stack.
local gone = redis.call('ZRANGEBYSCORE', workers_key, '-inf', '(' .. now, 'LIMIT', 0, 1000)
if #gone > 0 then redis.call('ZREM', workers_key, unpack(gone)) end
if index_ttls then
  redis.call('ZADD', dead_ttls_key, dead_ttl, worker_id)
  if #gone > 0 then redis.call('ZREM', dead_ttls_key, unpack(gone)) end
  for _, id in ipairs(redis.call('ZRANDMEMBER', dead_ttls_key, 3)) do
    if not redis.call('ZSCORE', workers_key, id) then redis.call('ZREM', dead_ttls_key, id) end
  end
end
-- No entry of either counts once its worker's record expired, and this call wrote none
-- that outlives `ttl`: only a registration after the longest-lived one extends them.
for key, usable_key in pairs({[dead_ttls_key] = index_ttls, [runners_key] = index_runners}) do
  if usable_key and redis.call('PTTL', key) < ttl then redis.call('PEXPIRE', key, ttl) end
end
return now
