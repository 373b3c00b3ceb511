--[[
  not_run: which of some task names no live registered worker of this queue runs, each
  looked up in the runners index, so it costs the same for two workers or twenty
  thousand. Read-only.
  KEYS[1] runners  ZSET    task names by the latest time (ms) a record of a worker that
                           runs the name expires
  ARGV[1] name             the first name; each further ARGV is one more
  Returns: {name, ...}: the names no worker whose record has not expired runs, in the
           order given (a worker that stopped counts until its record would have
           expired: others may run the name, so its unregister leaves the index)
  Emits:   nothing
]]
--- @include "_common"

local runners_key = KEYS[1]
local now = server_now_ms()
local unseen = {}
for _, name in ipairs(ARGV) do
  local expiry = redis.call('ZSCORE', runners_key, name)
  if not expiry or tonumber(expiry) < now then unseen[#unseen + 1] = name end
end
return unseen
