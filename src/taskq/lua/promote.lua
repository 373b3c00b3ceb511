--[[
  promote: move delayed tasks that are due to the back of ready, each to its own
  priority's list.
  KEYS[1] delayed ZSET    task id -> run-at (ms, server TIME)
  KEYS[2] ready   LIST    task ids of the default priority that can run now (the left
                          end is the back; other priorities: see _common)
  KEYS[3] events  STREAM  change feed
  KEYS[4] seq     STRING  last event sequence number
  KEYS[5] epoch   STRING  event log incarnation
  KEYS[6] wake    LIST    wake-up tokens for idle workers
  ARGV[1] prefix          queue key prefix; task keys derive from it
  ARGV[2] limit           most tasks to promote in this call (1 to 100000)
  ARGV[3] retention       events kept in the stream (1 to 10^9)
  Returns: {task_id, ...} promoted, earliest run-at first (a due id whose record is
           gone, deleted or evicted, is dropped from delayed and not returned); an
           argument out of its range is an error, and nothing is written
  Emits:   promoted (state pending)
]]
--- @include "_common"

local delayed_key, ready_key = KEYS[1], KEYS[2]
local events_key, seq_key, epoch_key, wake_key = KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local prefix, limit, retention = ARGV[1], ARGV[2], ARGV[3]

-- Checked before the first write (see whole_arg); retention by open_feed.
limit = whole_arg('limit', limit, 1, LIMITS.limit)

local now = server_now_ms()
local feed = open_feed(events_key, seq_key, epoch_key, retention, now)
local due = redis.call('ZRANGEBYSCORE', delayed_key, '-inf', now, 'LIMIT', 0, limit)
local records, places = {}, {events_key, 'stream'}
for i, task_id in ipairs(due) do
  -- A record of another type (written by hand) reads as gone, and is dropped below.
  local record = redis.pcall('HMGET', prefix .. 'task:' .. task_id, 'name', 'priority')
  records[i] = failed(record) and {false, false} or record
  ready_types(places, ready_key, tonumber(records[i][2]))
end
-- Each due task goes to its ready list: read first, so those lists and the log are
-- checked before the first write.
if #due > 0 then expect_types(places) end
local promoted = {}
for i, task_id in ipairs(due) do
  redis.call('ZREM', delayed_key, task_id)
  local task_key = prefix .. 'task:' .. task_id
  local record = records[i]
  -- An id whose record is gone (deleted by hand, or evicted) is dropped: written here,
  -- its record would be a made-up one that no worker could run.
  if record[1] then
    emit(feed, {'type', 'promoted', 'task', task_id, 'state', 'pending'})
    redis.call('HSET', task_key, 'state', 'pending')
    push_ready(ready_key, task_id, tonumber(record[2]), false)
    promoted[#promoted + 1] = task_id
  end
end
wake_workers(wake_key, #promoted)
close_feed(feed)
return promoted
