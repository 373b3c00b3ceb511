-- Workflows (see taskq/canvas.py and taskq/flows.py). A flow runs its stages one after
-- another; a stage's steps run in parallel. Its record, `flow:<id>` (a HASH), holds:
--   state       running | completed | failed | cancelled
--   stages, stage   how many stages, and the one running now (1-based)
--   ttl         ms an ended flow's record (and a skipped step's) is kept
--   max_payload bytes a step's payload may take once its input is in it: a stage
--               whose input would take a waiting step past it, or whose copies of
--               its input would come to more than STAGE_COPIES times it, is not
--               started, and the flow fails at it as at a failed member
--               (specs/Workflow's OversizedNeverRuns): 200 members handing a 1 MB
--               list each to 200 more would otherwise write 200 copies of it in one
--               script
--   size:<k>, group:<k>, policy:<k>   stage k's step count; '1' if it hands on the
--               list of its results (a group), else its one result; 'fail' or
--               'partial': what a step of it that does not complete does
--   ended:<k>, failed:<k>   its steps that ended, and those that did not complete
--   end:<k>:<i> completed | dead | cancelled: set once (HSETNX), so a step that runs
--               twice is counted once; result:<k>:<i> what it hands on (its result's
--               JSON, or under 'partial' a {"taskq_failed": ...} object)
-- Step i of stage k is the task `<flow id>.<k>.<i>`; its record names its `flow`. Steps
-- of later stages wait, in state `waiting` and in no list, until the script that records
-- the end of the last step before them makes them pending: every script that ends a
-- step calls step_ended in the same call (ack with the current token; fail or reap at
-- its death; end_cancelled), so a stage is started exactly once and never by a
-- separate call that a crash could skip or repeat (specs/Chord, specs/Workflow).

local FLOW_ARGS_HEAD = '{"args":['
-- The error type of a stage whose input is over the payload limit (taskq.errors).
local PAYLOAD_TOO_LARGE = 'taskq.errors.PayloadTooLargeError'
-- How many payload limits the copies of a stage's input may come to, one in each of
-- its waiting steps: the one script that starts a stage writes them all while every
-- other client waits, and a group of thousands would otherwise copy an input of up to
-- the limit into every step. The steps' own arguments are not counted: start_flow
-- wrote them all in one script already. A stage of sixteen steps or fewer is held to
-- the limit per step alone.
local STAGE_COPIES = 16

local function flow_key(prefix, flow_id)
  return prefix .. 'flow:' .. flow_id
end

local function flow_step_id(flow_id, stage, index)
  return flow_id .. '.' .. stage .. '.' .. index
end

-- `payload` (a step's own arguments, as taskq encodes them) with `input` (JSON text)
-- as its first positional argument.
local function with_input(payload, input)
  local rest = string.sub(payload, #FLOW_ARGS_HEAD + 1)
  if string.sub(rest, 1, 1) ~= ']' then rest = ',' .. rest end
  return FLOW_ARGS_HEAD .. input .. rest
end

-- What stage k hands on: its one result, or the JSON list of its results in order.
local function stage_output(flow, k, size, is_group)
  local fields = {}
  for i = 1, size do fields[i] = 'result:' .. k .. ':' .. i end
  local values = {}
  for first = 1, size, CHUNK do
    local part = redis.call('HMGET', flow,
      unpack(fields, first, math.min(first + CHUNK - 1, size)))
    for j = 1, #part do values[#values + 1] = part[j] or 'null' end
  end
  if not is_group then return values[1] end
  return '[' .. table.concat(values, ',') .. ']'
end

-- The bytes `payload` takes once `input` is its first argument (see with_input).
local function with_input_bytes(payload, input)
  local comma = 1
  if string.sub(payload, #FLOW_ARGS_HEAD + 1, #FLOW_ARGS_HEAD + 1) == ']' then comma = 0 end
  return #payload + #input + comma
end

-- Makes stage k's waiting steps pending, each with `input` as its first argument. A
-- step cancelled while it waited stays as it is (it was counted as ended then). If
-- `input` would take a waiting step's payload past `max_payload` (nil: no limit, a
-- flow started before there was one), nothing is written, and that step's id and the
-- bytes its payload would take are returned; if its copies in the waiting steps would
-- come to more than STAGE_COPIES times `max_payload`, nothing is written, and the
-- first waiting step's id, the bytes of those copies and how many steps there are are
-- returned.
local function trigger_stage(prefix, feed, flow_id, k, size, input, max_payload)
  local waiting, copies = {}, 0
  for i = 1, size do
    local step = flow_step_id(flow_id, k, i)
    local record = redis.call('HMGET', prefix .. 'task:' .. step, 'state', 'payload',
      'priority')
    if record[1] == 'waiting' then
      local bytes = with_input_bytes(record[2], input)
      if max_payload and bytes > max_payload then return step, bytes end
      copies = copies + bytes - #record[2]
      waiting[#waiting + 1] = {step, record[2], tonumber(record[3]) or DEFAULT_PRIORITY}
    end
  end
  if max_payload and copies > STAGE_COPIES * max_payload then
    return waiting[1][1], copies, #waiting
  end
  for _, w in ipairs(waiting) do
    emit(feed, {'type', 'triggered', 'task', w[1], 'state', 'pending', 'flow', flow_id})
    redis.call('HSET', prefix .. 'task:' .. w[1], 'state', 'pending', 'payload',
      with_input(w[2], input), 'run_at', feed.now)
    push_ready(prefix .. 'ready', w[1], w[3], false)
  end
  wake_workers(prefix .. 'wake', #waiting)
end

-- Why stage k stops the flow: the first of its steps that did not complete, that
-- step's error type, and "<n> of <size> steps of stage <k> did not complete: <id>
-- (<how>: <type>: <message>); ..." (five at most).
local function stage_failure(prefix, flow, flow_id, k, size)
  local lines, first, first_how, count = {}, nil, nil, 0
  for i = 1, size do
    local how = redis.call('HGET', flow, 'end:' .. k .. ':' .. i)
    if how and how ~= 'completed' then
      local step = flow_step_id(flow_id, k, i)
      count = count + 1
      first, first_how = first or step, first_how or how
      if #lines < 5 then
        -- A record of another type (written by hand) says nothing of its error. A
        -- failure given as plain text (Broker.fail's str) has a line and no type.
        local e = redis.pcall('HMGET', prefix .. 'task:' .. step, 'error_type',
          'error_message', 'last_error')
        if failed(e) then e = {} end
        -- A described failure's own message, empty or not (last_error, its summary,
        -- names the type again); an undescribed one's line.
        local said = how
        if e[1] and e[1] ~= '' then
          said = how .. ': ' .. e[1]
          if e[2] and e[2] ~= '' then said = said .. ': ' .. e[2] end
        else
          local message = (e[2] and e[2] ~= '') and e[2] or e[3]
          if message and message ~= '' then said = how .. ': ' .. message end
        end
        lines[#lines + 1] = step .. ' (' .. said .. ')'
      end
    end
  end
  local more = ''
  if count > #lines then more = '; and ' .. (count - #lines) .. ' more' end
  local error_type = redis.pcall('HGET', prefix .. 'task:' .. first, 'error_type')
  if type(error_type) ~= 'string' or error_type == '' then
    error_type = first_how == 'cancelled' and 'taskq.Cancelled' or 'taskq.TaskFailed'
  end
  return first, error_type, count .. ' of ' .. size .. ' steps of stage ' .. k ..
    ' did not complete: ' .. table.concat(lines, '; ') .. more
end

-- Ends every waiting step of stages `from` to the last cancelled, naming `upstream`
-- (the first step that did not complete) and why, so each one's handle reports it.
local function skip_waiting(prefix, feed, flow, flow_id, from, upstream, error_type, why)
  local stages = tonumber(redis.call('HGET', flow, 'stages'))
  local ttl = redis.call('HGET', flow, 'ttl')
  for k = from, stages do
    for i = 1, tonumber(redis.call('HGET', flow, 'size:' .. k)) do
      local step = flow_step_id(flow_id, k, i)
      local step_key = prefix .. 'task:' .. step
      -- A record of another type (written by hand) is no step's: passed over.
      local record = redis.pcall('HMGET', step_key, 'state', 'waiters', 'result_ttl',
        'idempotency_key')
      if not failed(record) and record[1] == 'waiting' then
        emit(feed, {'type', 'cancelled', 'task', step, 'state', 'cancelled', 'from', 'waiting',
          'flow', flow_id, 'upstream', upstream})
        redis.call('HSET', step_key, 'state', 'cancelled', 'cancelled_at', feed.now,
          'upstream', upstream, 'error_type', error_type, 'error_message', why,
          'last_error', why)
        -- As long as an idempotency key names it too, as every ended record is kept.
        expire_ended(prefix, step_key, stored_whole(record[3], tonumber(ttl) or 1),
          record[4])
        if record[2] then wake_waiters(prefix, step) end
      end
    end
  end
end

local function finish_flow(flow, state, now_text)
  redis.call('HSET', flow, 'state', state, 'ended_at', now_text)
  redis.call('PEXPIRE', flow, redis.call('HGET', flow, 'ttl'))
end

-- Ends the flow failed, naming `upstream` and why, and skips its waiting steps from
-- stage `from` on (none when `from` is past the last stage).
local function fail_flow(prefix, feed, flow, flow_id, from, upstream, error_type, why)
  redis.call('HSET', flow, 'upstream', upstream, 'error_type', error_type,
    'error_message', why)
  skip_waiting(prefix, feed, flow, flow_id, from, upstream, error_type, why)
  finish_flow(flow, 'failed', feed.now)
end

-- Moves a running flow on for as long as its current stage has ended: starts the next
-- stage with what this one hands on, or ends the flow. A stage whose steps were all
-- cancelled while they waited has ended before it starts, so the loop goes on.
local function advance_flow(prefix, feed, flow, flow_id)
  while true do
    local f = redis.call('HMGET', flow, 'state', 'stage', 'stages', 'max_payload')
    if f[1] ~= 'running' then return end
    local k, stages = tonumber(f[2]), tonumber(f[3])
    local s = redis.call('HMGET', flow, 'size:' .. k, 'ended:' .. k, 'failed:' .. k,
      'group:' .. k, 'policy:' .. k)
    local size = tonumber(s[1])
    if (tonumber(s[2]) or 0) < size then return end
    local partial = s[4] == '1' and s[5] == 'partial'
    if (tonumber(s[3]) or 0) > 0 and not partial then
      local upstream, error_type, why = stage_failure(prefix, flow, flow_id, k, size)
      fail_flow(prefix, feed, flow, flow_id, k + 1, upstream, error_type, why)
      return
    end
    if k == stages then
      finish_flow(flow, 'completed', feed.now)
      return
    end
    local input = stage_output(flow, k, size, s[4] == '1')
    redis.call('HSET', flow, 'stage', k + 1)
    local limit = tonumber(f[4])
    local step, bytes, steps = trigger_stage(prefix, feed, flow_id, k + 1,
      tonumber(redis.call('HGET', flow, 'size:' .. (k + 1))), input, limit)
    if step then
      local over = ', would make the payload of step ' .. step .. ' ' ..
        integer_text(bytes) .. ' bytes, over the limit of ' .. integer_text(limit) ..
        ' bytes (TASKQ_MAX_PAYLOAD_BYTES)'
      if steps then
        over = ', copied into each of its ' .. steps ..
          ' waiting steps, would come to ' .. integer_text(bytes) ..
          ' bytes, over the limit of ' .. integer_text(STAGE_COPIES * limit) ..
          ' bytes for one stage (' .. STAGE_COPIES .. ' times TASKQ_MAX_PAYLOAD_BYTES)'
      end
      local why = 'the input of stage ' .. (k + 1) .. ', what stage ' .. k ..
        ' handed on (' .. integer_text(#input) .. ' bytes)' .. over ..
        '; no step of stage ' .. (k + 1) .. ' ran'
      fail_flow(prefix, feed, flow, flow_id, k + 1, step, PAYLOAD_TOO_LARGE, why)
      return
    end
  end
end

-- Checks the records, and adds to `places` (see _common's expect_types) the ready lists,
-- that the end of step `task_id` of flow `flow_id` may write through step_ended: the
-- flow's record and, when this end
-- (with the ends of its stage counted in `ends` before it, in the same call) ends its
-- stage, the records and ready lists of the steps of the stage it starts, and of each
-- stage after that one whose steps all ended while they waited (advance_flow goes on
-- past those). So a script that ends a step checks them before its first write, and a
-- key of another type fails it before the step's own end is written. Only the stages
-- started are read: a chain of 2000 stages would otherwise read every later step at
-- each stage's end. A stage that fails the flow instead skips its later steps, and
-- skip_waiting passes over a record or a done list of another type.
local function flow_types(places, ends, prefix, task_id, flow_id)
  local k, i = string.match(task_id, '%.(%d+)%.(%d+)$')
  local flow = flow_key(prefix, flow_id)
  expect_type(flow, 'hash')
  if not k then return end
  local f = redis.call('HMGET', flow, 'state', 'stage', 'stages', 'size:' .. k,
    'ended:' .. k, 'end:' .. k .. ':' .. i)
  if f[1] ~= 'running' or f[2] ~= k or f[6] then return end
  local stage = flow_id .. '.' .. k
  ends[stage] = (ends[stage] or 0) + 1
  if (tonumber(f[5]) or 0) + ends[stage] < (tonumber(f[4]) or 0) then return end
  for later = tonumber(k) + 1, tonumber(f[3]) or 0 do
    local g = redis.call('HMGET', flow, 'size:' .. later, 'ended:' .. later)
    local size = tonumber(g[1]) or 0
    for j = 1, size do
      local step_key = prefix .. 'task:' .. flow_step_id(flow_id, later, j)
      expect_type(step_key, 'hash')
      local r = redis.call('HMGET', step_key, 'state', 'priority')
      if r[1] == 'waiting' then
        ready_types(places, prefix .. 'ready', tonumber(r[2]) or DEFAULT_PRIORITY)
      end
    end
    if (tonumber(g[2]) or 0) < size then return end
  end
end

-- Records that step `task_id` of flow `flow_id` ended `how` (completed; cut: completed
-- with no result, its handler cut off at shutdown after its effect, which its stage
-- counts as failed; dead or cancelled), with `result` (its result's JSON; '' or nil for
-- none) when it completed,
-- and moves the flow on if that ended its stage. A step ends once: a second end of the
-- same step (a revived dead step completing, a dead one cancelled) changes nothing, nor
-- does the end of a step whose flow's record has expired.
local function step_ended(prefix, feed, task_id, flow_id, how, result)
  local k, i = string.match(task_id, '%.(%d+)%.(%d+)$')
  local flow = flow_key(prefix, flow_id)
  if not k or redis.call('EXISTS', flow) == 0 then return end
  if redis.call('HSETNX', flow, 'end:' .. k .. ':' .. i, how) == 0 then return end
  local handed = result
  if how ~= 'completed' then
    local e = redis.call('HMGET', prefix .. 'task:' .. task_id, 'error_type', 'error_message')
    handed = cjson.encode({taskq_failed = {task_id = task_id, state = how,
      error_type = e[1] or '', error = e[2] or ''}})
    redis.call('HINCRBY', flow, 'failed:' .. k, 1)
  end
  if handed == nil or handed == '' then handed = 'null' end
  redis.call('HSET', flow, 'result:' .. k .. ':' .. i, handed)
  redis.call('HINCRBY', flow, 'ended:' .. k, 1)
  advance_flow(prefix, feed, flow, flow_id)
end
