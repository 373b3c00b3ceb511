--[[
  flow_status: read a workflow (see _flow), its shape and the state of its first `most`
  steps, in one consistent view. A bigger workflow's other steps are the caller's to
  read after it, a stretch a round trip: all 10,000 in one call held Redis, and so
  every worker, 70 ms.
  KEYS[1] flow    HASH    the workflow's record
  ARGV[1] prefix          queue key prefix; step task keys derive from it
  ARGV[2] flow_id
  ARGV[3] most            most steps read, in order, stage by stage (1 to 10000)
  Returns: {} if there is no such flow; else {state, stage, created_at, ended_at,
           upstream, error_type, error_message, stages, then per stage: size, group,
           policy, then per step read, stage by stage: state, name, retries, upstream}
           (a field the record lacks as ''; a step whose record has expired, or is of
           another type, as state ''; upstream names the step whose failure ended a
           skipped step); a record whose stage counts no script wrote (more than
           10000 steps in all, or not whole numbers) is an error, and nothing else is
           read
  Emits:   nothing (no task changes state)
]]
--- @include "_common"
--- @include "_ended"

local record_key, prefix, flow_id = KEYS[1], ARGV[1], ARGV[2]

local f = redis.call('HMGET', record_key, 'state', 'stage', 'created_at', 'ended_at',
  'upstream', 'error_type', 'error_message', 'stages')
if not f[1] then return {} end
local reply = {}
for j = 1, 8 do reply[j] = f[j] or '' end
-- A record start_flow wrote has at most LIMITS.count steps in all; one changed by hand
-- could name millions, each a read in this one call, so its counts are checked first.
local function count_of(text, what, most)
  local n = tonumber(text)
  if not n or n ~= n or n < 0 or n > most or n % 1 ~= 0 then
    error('flow ' .. flow_id .. ' has a damaged record: ' .. what .. ' is ' ..
      tostring(text) .. ', not a whole number from 0 to ' .. most)
  end
  return n
end
local most = whole_arg('most', ARGV[3], 1, LIMITS.count)
local stages = count_of(f[8], 'stages', LIMITS.count)
-- The shape, read a thousand stages an HMGET: a chain of 10,000 stages read one stage
-- a call spent half the call's time on it.
local sizes, total = {}, 0
for first = 1, stages, 1000 do
  local last = math.min(stages, first + 999)
  local fields = {}
  for k = first, last do
    fields[#fields + 1], fields[#fields + 2] = 'size:' .. k, 'group:' .. k
    fields[#fields + 1] = 'policy:' .. k
  end
  local s = redis.call('HMGET', record_key, unpack(fields))
  for k = first, last do
    local j = (k - first) * 3
    sizes[k] = count_of(s[j + 1], 'size:' .. k, LIMITS.count - total)
    total = total + sizes[k]
    reply[#reply + 1], reply[#reply + 2], reply[#reply + 3] = s[j + 1], s[j + 2], s[j + 3]
  end
end
local function read_steps()
  local n = 0
  for k = 1, stages do
    for i = 1, sizes[k] do
      if n == most then return end
      n = n + 1
      local step = redis.pcall('HMGET', prefix .. 'task:' .. flow_step_id(flow_id, k, i),
        'state', 'name', 'retries', 'upstream')
      -- A record of another type is no step's: read as one that has expired.
      if failed(step) then step = {} end
      reply[#reply + 1], reply[#reply + 2] = step[1] or '', step[2] or ''
      reply[#reply + 1], reply[#reply + 2] = step[3] or '0', step[4] or ''
    end
  end
end
read_steps()
return reply
