--[[
  workers: the workers registered on this queue whose record has not expired, read in
  one step, at most `limit` of them, the one whose record expires soonest first (a
  reader that wants them in start order sorts by started_at).
  KEYS[1] workers  ZSET    worker ids by the time (ms) their record expires
  ARGV[1] prefix           queue key prefix; worker records derive from it
  ARGV[2] limit            most workers to return (1 to 100000)
  Returns: {now_ms, {field, value, ...}, ...}: each live worker's record as HGETALL
           gives it; a record key of another type (written by something else) is left
           out, as an empty one is, so that one key fails no listing (`taskq
           workers`, the dashboard, the JSON API)
  Emits:   nothing (it only reads)
]]
--- @include "_common"

local workers_key, prefix = KEYS[1], ARGV[1]
local limit = whole_arg('limit', ARGV[2], 1, LIMITS.limit)
local now = server_now_ms()
local found = {now}
local ids = redis.call('ZRANGEBYSCORE', workers_key, now, '+inf', 'LIMIT', 0, limit)
for _, worker_id in ipairs(ids) do
  local record = redis.pcall('HGETALL', worker_key(prefix, worker_id))
  if not failed(record) and #record > 0 then found[#found + 1] = record end
end
return found
