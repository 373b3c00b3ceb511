--[[
  progress: a running task's handler says how far it has got, if the caller still holds
  the lease. Kept in the record with the token of the run that said it, so a reader
  shows it only while that run is the current one (a run leased again starts at none).
  KEYS[1] leased  ZSET    task id -> lease expiry (ms, server TIME)
  KEYS[2] events  STREAM  change feed
  KEYS[3] seq     STRING  last event sequence number
  KEYS[4] epoch   STRING  event log incarnation
  ARGV[1] prefix          queue key prefix; the task key derives from it
  ARGV[2] task_id
  ARGV[3] token           fencing token from lease
  ARGV[4] permille        how far, 0 to 1000 (thousandths)
  ARGV[5] message         what it is doing, up to 200 characters ('' = none)
  ARGV[6] retention       events kept in the stream (1 to 10^9; checked before any write)
  Returns: 1 recorded | 0 stale (lease lost, or the task is not running; nothing changed)
  Emits:   progress (state running, progress = permille, message), one per call recorded
]]
--- @include "_common"

local leased_key, events_key, seq_key, epoch_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local prefix, task_id, token, message, retention = ARGV[1], ARGV[2], ARGV[3], ARGV[5],
  ARGV[6]

-- Checked before the first write (see whole_arg); retention by open_feed.
local permille = whole_arg('permille', ARGV[4], 0, 1000)
if #message > 800 then
  error('message: at most 200 characters (800 bytes of UTF-8), not ' .. #message .. ' bytes')
end

local task_key = prefix .. 'task:' .. task_id
if not redis.call('ZSCORE', leased_key, task_id) then return 0 end
if redis.call('HGET', task_key, 'fencing_token') ~= token then return 0 end

-- Checked before the record's write: refused in close_feed, it would keep no event.
expect_types({events_key, 'stream'})
local now = server_now_ms()
local feed = open_feed(events_key, seq_key, epoch_key, retention, now)
emit(feed, {'type', 'progress', 'task', task_id, 'state', 'running', 'token', token,
  'progress', permille, 'message', message})
redis.call('HSET', task_key, 'progress', permille, 'progress_message', message,
  'progress_token', token, 'progress_at', now)
close_feed(feed)
return 1
