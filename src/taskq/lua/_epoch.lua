--[[
  _epoch: the event log's epoch as the scripts that read the log hand it out. Not an
  operation itself: it has no KEYS or ARGV of its own.
]]

-- taskq writes an epoch as digits (close_feed's renumber), and a feed id carries it
-- to the SSE `id:` line; one written by hand (a CR or LF in it would start an SSE
-- field of the writer's choosing there) is read as 24 digits of its SHA-1 instead, the
-- same on every read, so a client's resume from it still matches. No epoch taskq
-- writes (16 digits) is 24 long.
local EPOCH_DIGITS = 24
local function feed_epoch(stored)
  if not stored then return '' end
  if #stored <= EPOCH_DIGITS and string.match(stored, '^%d*$') then return stored end
  local digest = string.sub(redis.sha1hex(stored), 1, EPOCH_DIGITS)
  return (string.gsub(digest, '%x', function(c) return tostring(tonumber(c, 16) % 10) end))
end
