--[[
  recent: one stretch of a search for the queue's most recently ended tasks, newest
  first, read from its event log: each task whose end (completed, dead or cancelled)
  the stretch holds and whose record is still kept in that state, so the list is as
  bounded as the log (its retention) and as lasting as the records (completed_ttl,
  dead_ttl). The caller walks the log a stretch a call, each a few ms of Redis: one
  call over the whole log would hold every other client back for as long.
  Read-only.
  KEYS[1] events  STREAM  change feed
  ARGV[1] prefix          queue key prefix; task keys derive from it
  ARGV[2] states          the ends wanted, comma-separated: completed, dead, cancelled
  ARGV[3] id_prefix       only ids that start with it ('' = any)
  ARGV[4] name            only task names that contain it ('' = any)
  ARGV[5] limit           most tasks listed (1 to 1000)
  ARGV[6] scan            most log entries read, newest first (1 to 1000)
  ARGV[7] upper           where the stretch starts: '+' (the newest entry) or '(<id>'
                          (the entry before the last one a previous stretch read)
  Returns: {scanned, start, last, n, (task_id, name, state, ended_at, retries,
           last_error) x n}: `scanned` log entries were read, the oldest of them `last`
           ('' when none); `start` is 1 when the stretch reached the log's oldest entry
           (nothing older is left to find), else 0. A task is listed once a stretch, at
           its newest end in it; an older end of it in a later stretch is the caller's
           to pass over.
  Emits:   nothing
]]
--- @include "_common"

local events_key, prefix = KEYS[1], ARGV[1]
local id_prefix, name_part = ARGV[3], ARGV[4]
local limit = whole_arg('limit', ARGV[5], 1, 1000)
local scan = whole_arg('scan', ARGV[6], 1, 1000)
local upper = ARGV[7]

local wanted = {}
for state in string.gmatch(ARGV[2], '[^,]+') do wanted[state] = true end

local function field(fields, name)
  for i = 1, #fields, 2 do
    if fields[i] == name then return fields[i + 1] end
  end
  return nil
end

local rows, seen, scanned, start, last = {}, {}, 0, 0, ''
local chunk = redis.call('XREVRANGE', events_key, upper, '-', 'COUNT', scan)
for _, entry in ipairs(chunk) do
  scanned, last = scanned + 1, entry[1]
  local fields = entry[2]
  local task_id, state = field(fields, 'task'), field(fields, 'state')
  if task_id and not seen[task_id] and (state == 'completed' or state == 'dead'
      or state == 'cancelled') then
    -- The task's latest end: older ones of it (a dead task revived) are passed over.
    seen[task_id] = true
    if wanted[state] and string.sub(task_id, 1, #id_prefix) == id_prefix then
      local record = redis.call('HMGET', prefix .. 'task:' .. task_id, 'name', 'state',
        'retries', 'last_error')
      if record[2] == state and (name_part == '' or
          string.find(record[1] or '', name_part, 1, true)) then
        rows[#rows + 1] = {task_id, record[1] or '', state, field(fields, 'ts') or '0',
          record[3] or '0', record[4] or ''}
        if #rows >= limit then break end
      end
    end
  end
end
if #chunk < scan and #rows < limit then start = 1 end
local reply = {scanned, start, last, #rows}
for _, row in ipairs(rows) do
  for _, value in ipairs(row) do reply[#reply + 1] = value end
end
return reply
