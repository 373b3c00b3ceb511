--[[
  read_events: the change feed's one read step: check for a gap after the cursor and
  read the rows that follow it, atomically, so nothing can be trimmed or appended
  between the check and the read. Read-only.
  KEYS[1] events  STREAM  change feed, ids <seq>-0
  KEYS[2] seq     STRING  last event sequence number (the head; the stream's last id
                          when it is missing or behind)
  KEYS[3] epoch   STRING  event log incarnation (handed out as _epoch reads it)
  ARGV[1] epoch           the cursor's epoch; '' when the client has none (cursor 0)
  ARGV[2] cursor          sequence number of the last row the client has
  ARGV[3] fingerprint     that row's ts (ms); '' or '0' when unknown
  ARGV[4] count           most rows to return
  Returns: {'rows', epoch, head, first, seq, ts, fields, seq, ts, fields, ...}: the rows
           after the cursor (fields as a flat name/value array) |
           {'gap', epoch, head, first, head_ts, reason}: head_ts is the head row's ts
           ('' when no row holds the head); reason is 'epoch' (the log was
           recreated), 'ahead' (cursor beyond the head), 'trimmed' (rows after the
           cursor are gone) or 'diverged' (the cursor's row was rewritten after a crash);
           first = oldest retained seq (head + 1 when the log is empty)
  Emits:   nothing
]]

--- @include "_epoch"

local events_key, seq_key, epoch_key = KEYS[1], KEYS[2], KEYS[3]
local cursor_epoch, cursor = ARGV[1], tonumber(ARGV[2])
local fingerprint, count = ARGV[3], tonumber(ARGV[4])
-- The cursor's row as a stream id: joined to a string as it is, a number of 1e14 or
-- more reads "1e+14", which XRANGE refuses.
local cursor_id = string.format('%d-0', cursor)

local epoch = feed_epoch(redis.call('GET', epoch_key))
-- The head is the id of the log's last row. The counter names it, unless the counter
-- alone was lost (or set behind): then the stream's last row does, as it will for the
-- next writer (close_feed). A head behind the rows would send a client a gap whose
-- resume point gets the same gap again, for ever.
local head = tonumber(redis.call('GET', seq_key) or '0') or 0
local newest = redis.call('XREVRANGE', events_key, '+', '-', 'COUNT', 1)[1]
if newest then head = math.max(head, tonumber(string.match(newest[1], '^(%d+)'))) end
local first = head + 1
local oldest = redis.call('XRANGE', events_key, '-', '+', 'COUNT', 1)[1]
if oldest then first = tonumber(string.match(oldest[1], '^(%d+)')) end

local function field(entry, name)
  local fields = entry[2]
  for i = 1, #fields, 2 do
    if fields[i] == name then return fields[i + 1] end
  end
  return '0'
end

-- The resume point is the head, fingerprinted by its row's ts; '' where no row holds
-- the head (its row deleted by hand, the counter set ahead), which a resume from there
-- then does not check, rather than find the row missing and get the same gap again.
local function gap(reason)
  local head_ts = ''
  if newest and tonumber(string.match(newest[1], '^(%d+)')) == head then
    head_ts = field(newest, 'ts')
  end
  return {'gap', epoch, head, first, head_ts, reason}
end

if cursor_epoch ~= '' and cursor_epoch ~= epoch then return gap('epoch') end
if cursor > head then return gap('ahead') end
if cursor < first - 1 then return gap('trimmed') end
-- A fingerprint of 0 is the wire form of none (see taskq.feed.cursor).
if cursor > 0 and fingerprint ~= '' and fingerprint ~= '0' and cursor >= first then
  local row = redis.call('XRANGE', events_key, cursor_id, cursor_id)[1]
  if not row or field(row, 'ts') ~= fingerprint then return gap('diverged') end
end

local reply = {'rows', epoch, head, first}
local rows = redis.call('XRANGE', events_key, '(' .. cursor_id, '+', 'COUNT', count)
for _, row in ipairs(rows) do
  reply[#reply + 1] = tonumber(string.match(row[1], '^(%d+)'))
  reply[#reply + 1] = field(row, 'ts')
  reply[#reply + 1] = row[2]
end
return reply
