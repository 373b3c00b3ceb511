--[[
  forget_schedule: remove a periodic schedule's record (its last handled tick, version
  and definition), so that readers stop listing a schedule no worker declares any more.
  The tasks its ticks made stay as they are. A worker that still declares it starts it
  again at its next firing, at the server's now, firing nothing (fire.lua's first
  sight): the ticks in between are skipped, and none is ever fired twice (PeriodicTick's
  Forget, checked by TLC; RESTART = "caller" is the mutant that fires them again).
  KEYS[1] schedules HASH  last:<schedule> -> tick ms handled last, version:<schedule>,
                          definition:<schedule>
  ARGV[1] schedule        schedule name (1 to 100 bytes)
  ARGV[2] last_ms         the last handled tick the caller read (0 to 10^13), or '' for
                          whatever is stored: the record is kept if its tick is another
                          (a worker fired it since the caller decided)
  Returns: {'forgotten', last tick text} | {'fired', last tick text} (kept: the stored
           tick is not last_ms) | {'missing', ''} (no record);
           an argument out of its range is an error, and nothing is written
  Emits:   nothing: no task changes state (as fire.lua's first and replaced firings)
]]
--- @include "_common"

local schedules_key = KEYS[1]
local schedule, last_ms = ARGV[1], ARGV[2]

if #(schedule or '') < 1 or #schedule > 100 then
  error('schedule must be a name of 1 to 100 bytes, not ' .. tostring(schedule))
end
if last_ms ~= '' then last_ms = whole_arg('last_ms', last_ms, 0, LIMITS.run_at_ms) end

local last_field = 'last:' .. schedule
local last = redis.call('HGET', schedules_key, last_field)
if not last then return {'missing', ''} end
-- Compared as text: a last tick written by hand (no whole number) matches only ''.
if last_ms ~= '' and last ~= integer_text(last_ms) then return {'fired', last} end
redis.call('HDEL', schedules_key, last_field, 'version:' .. schedule,
  'definition:' .. schedule)
return {'forgotten', last}
