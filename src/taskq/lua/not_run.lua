--[[
  not_run: which of some task names no live registered worker of this queue runs. Each
  is looked up in the runners index. A name the index shows unrun may still be run by
  a live worker whose names the index does not hold: one of a version that writes no
  index (a rolling deploy), or one that registered while the index was emptied or held
  by a key of another type. Such workers are those whose '#<worker_id>' mark, written
  with their names, is missing from the index; only their records are read, and only
  when the index shows some name unrun (a look at each live worker's mark, about a
  microsecond a worker). Read-only.
  KEYS[1] runners   ZSET   task names by the latest time (ms) a record of a worker that
                           runs the name expires; '#<worker_id>' by its record's expiry
  KEYS[2] workers   ZSET   worker ids by the time (ms) their record expires
  ARGV[1] prefix           queue key prefix; worker records derive from it
  ARGV[2] name             the first name; each further ARGV is one more
  Returns: {name, ...}: the names no worker whose record has not expired runs, in the
           order given (a worker that stopped counts until its record would have
           expired: others may run the name, so its unregister leaves the index); of
           live workers, the first LIMITS.limit to expire are looked through
  Emits:   nothing
]]
--- @include "_common"

local runners_key, workers_key = KEYS[1], KEYS[2]
local prefix = ARGV[1]
local now = server_now_ms()
local unseen, unrun = {}, {}
for i = 2, #ARGV do
  local name = ARGV[i]
  local expiry = redis.call('ZSCORE', runners_key, name)
  if not expiry or tonumber(expiry) < now then
    unseen[#unseen + 1], unrun[name] = name, true
  end
end
if #unseen == 0 then return unseen end

local live = redis.call('ZRANGEBYSCORE', workers_key, now, '+inf', 'LIMIT', 0, LIMITS.limit)
for _, worker_id in ipairs(live) do
  if not redis.call('ZSCORE', runners_key, '#' .. worker_id) then
    -- A record of another type (written by something else) runs nothing.
    local tasks = redis.pcall('HGET', worker_key(prefix, worker_id), 'tasks')
    if type(tasks) == 'string' then
      for name in string.gmatch(tasks, '[^,]+') do unrun[name] = nil end
    end
  end
end
local reply = {}
for _, name in ipairs(unseen) do
  if unrun[name] then reply[#reply + 1] = name end
end
return reply
