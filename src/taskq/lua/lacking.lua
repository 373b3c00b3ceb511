--[[
  lacking: which of some task names a live registered worker of this queue does not
  run, with one such worker each: a periodic schedule is not fired while a worker that
  would lease its tick and find no function for it (a rolling deploy that adds the
  task) may still lease. The runners index cannot say it, keeping for each name only
  the latest expiry among the workers that run it; so each live worker's names are read
  from its record ('tasks', written at every beat by every taskq version, whether or
  not it writes the runners index). A record that says nothing of its names (none
  left, no 'tasks' field, another type) counts as running every name. Reading them
  costs about two microseconds a live worker; the workers of one deploy share one list
  of names, which is looked through once. Read-only.
  KEYS[1] workers  ZSET   worker ids by the time (ms) their record expires
  ARGV[1] prefix          queue key prefix; worker records derive from it
  ARGV[2] name            the first name; each further ARGV is one more
  Returns: {name, worker_id, ...}: each name some worker whose record has not expired
           does not run, in the order given, with the first such worker to expire; of
           live workers, the first LIMITS.limit to expire are looked through
  Emits:   nothing
]]
--- @include "_common"

local workers_key = KEYS[1]
local prefix = ARGV[1]
local names = {}
for i = 2, #ARGV do names[#names + 1] = ARGV[i] end
local lacked, left = {}, #names
local looked = {}
local live = redis.call('ZRANGEBYSCORE', workers_key, server_now_ms(), '+inf', 'LIMIT', 0,
  LIMITS.limit)
for _, worker_id in ipairs(live) do
  if left == 0 then break end
  local tasks = redis.pcall('HGET', worker_key(prefix, worker_id), 'tasks')
  if type(tasks) == 'string' and not looked[tasks] then
    looked[tasks] = true
    local runs = {}
    for name in string.gmatch(tasks, '[^,]+') do runs[name] = true end
    for _, name in ipairs(names) do
      if not runs[name] and not lacked[name] then
        lacked[name], left = worker_id, left - 1
      end
    end
  end
end
local reply = {}
for _, name in ipairs(names) do
  if lacked[name] then
    reply[#reply + 1], reply[#reply + 2] = name, lacked[name]
    lacked[name] = nil  -- a name asked twice is answered once
  end
end
return reply
