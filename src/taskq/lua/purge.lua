--[[
  purge: delete dead tasks that have sat in the DLQ longer than its retention, oldest
  first, record and DLQ entry together, so no id is ever left pointing at nothing; a
  task whose idempotency key still names it is kept until the key expires, as an ended
  record is (see _ended's expire_ended), so the key never names a missing record. A
  record of another type (written by hand) is no task's: its entry is purged, and the
  key left alone.
  KEYS[1] dlq     LIST    dead task ids, most recent at the left (oldest at the right)
  KEYS[2] events  STREAM  change feed
  KEYS[3] seq     STRING  last event sequence number
  KEYS[4] epoch   STRING  event log incarnation
  ARGV[1] prefix          queue key prefix; task keys derive from it
  ARGV[2] limit           most tasks to purge in this call (1 to 100000)
  ARGV[3] dead_ttl        ms a dead task is kept (1 to 315360000000: ten years)
  ARGV[4] retention       events kept in the stream (1 to 10^9)
  Returns: {task_id, ...} purged; an argument out of its range is an error, and
           nothing is written
  Emits:   purged (state purged)
]]
--- @include "_common"

local dlq_key, events_key, seq_key, epoch_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local prefix, limit, dead_ttl, retention = ARGV[1], ARGV[2], ARGV[3], ARGV[4]

-- Checked before the first write (see whole_arg); retention by open_feed.
limit = whole_arg('limit', limit, 1, LIMITS.limit)
dead_ttl = whole_arg('dead_ttl', dead_ttl, 1, LIMITS.ttl_ms)

-- Refused in close_feed, after the purges, the log would miss them.
expect_types({events_key, 'stream', dlq_key, 'list'})
local now = server_now_ms()
local feed = open_feed(events_key, seq_key, epoch_key, retention, now)
local purged = {}
-- Oldest first, from the right. A task kept for its key moves to the left end, where a
-- task that has just died goes, so the next call does not meet it first again: however
-- many are kept, the ones behind them get their turn (a kept task's own purge waits at
-- most another retention after its key expires). Every task looked at counts against
-- a budget, so a DLQ full of kept tasks costs one call a bounded scan; and the scan ends
-- where it meets the first task it kept again, having looked at every one.
local budget = math.min(limit * 10, LIMITS.limit)
local first_kept = nil
while #purged < limit and budget > 0 do
  budget = budget - 1
  local task_id = redis.call('LINDEX', dlq_key, -1)
  if not task_id or task_id == first_kept then break end
  local task_key = prefix .. 'task:' .. task_id
  local record = redis.pcall('HMGET', task_key, 'dead_at', 'idempotency_key')
  local foreign = failed(record)
  if foreign then record = {} end
  if not foreign and stored_whole(record[1], 0) > now - dead_ttl then break end
  local idem_key = record[2] and record[2] ~= '' and prefix .. 'idem:' .. record[2]
  -- An idempotency key of another type (written by hand) names no task: read with
  -- pcall, its error would otherwise fail the call after the purges before it, and
  -- every later purge at the same task.
  if idem_key and redis.pcall('GET', idem_key) == task_id then
    redis.call('LMOVE', dlq_key, dlq_key, 'RIGHT', 'LEFT')
    first_kept = first_kept or task_id
  else
    emit(feed, {'type', 'purged', 'task', task_id, 'state', 'purged'})
    redis.call('RPOP', dlq_key)  -- the entry just read; an id is in the DLQ once (T1)
    if not foreign then redis.call('DEL', task_key) end
    purged[#purged + 1] = task_id
  end
end
close_feed(feed)
return purged
