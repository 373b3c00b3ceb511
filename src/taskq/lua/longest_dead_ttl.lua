--[[
  longest_dead_ttl: the longest any live registered worker of this queue keeps a dead
  task, read from the top of the dead_ttls index, so it costs the same for two workers
  or twenty thousand. Read-only.
  KEYS[1] workers   ZSET   worker ids by the time (ms) their record expires
  KEYS[2] dead_ttls ZSET   worker ids by the ms each keeps a dead task
  Returns: {dead_ttl_ms, walked}: the longest a live worker keeps (0: no live worker
           says); `walked` entries of the index were read. An entry of a worker that
           expired is passed over; past 1000 of them (registrations prune them, so
           that many means none registered for a lease) the longest read is returned,
           since keeping a dead task too long loses nothing and too short loses it. A
           worker of a version that does not write the index is not counted (its own
           purge applies its own retention whatever the others keep). A score written
           by hand past what a worker can say (up to inf) reads as the most it can
           (LIMITS.ttl_ms), one below 0 as 0
  Emits:   nothing
]]
--- @include "_common"

local workers_key, dead_ttls_key = KEYS[1], KEYS[2]
local WALK = 1000

-- Clamped here: Redis turns a Lua number past a 64-bit integer (inf, 1e300) into the
-- most negative one, and the purge would apply its own shorter retention.
local function kept(score)
  return math.max(0, math.min(tonumber(score), LIMITS.ttl_ms))
end

local now = server_now_ms()
local top = redis.call('ZREVRANGE', dead_ttls_key, 0, WALK - 1, 'WITHSCORES')
for i = 1, #top, 2 do
  local expiry = redis.call('ZSCORE', workers_key, top[i])
  if expiry and tonumber(expiry) >= now then
    return {kept(top[i + 1]), (i + 1) / 2}
  end
end
if #top == 2 * WALK then return {kept(top[2]), WALK} end
return {0, #top / 2}
