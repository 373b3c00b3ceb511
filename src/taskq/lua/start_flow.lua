--[[
  start_flow: create a workflow (see _flow): its record, and a task record for every
  step. The first stage's steps are ready at once; every later step waits (state
  waiting, in no list) until the stage before it has ended. A flow id that already
  names a flow, or any of whose step ids names a task, creates nothing.
  KEYS[1] ready   LIST    task ids of the default priority that can run now (other
                          priorities: see _common)
  KEYS[2] events  STREAM  change feed
  KEYS[3] seq     STRING  last event sequence number
  KEYS[4] epoch   STRING  event log incarnation
  KEYS[5] wake    LIST    wake-up tokens for idle workers
  ARGV[1] prefix          queue key prefix; flow and task keys derive from it
  ARGV[2] retention       events kept in the stream (1 to 10^9)
  ARGV[3] flow_id         1-100 letters, digits, '_' or '-'
  ARGV[4] ttl_ms          ms the ended flow's record is kept (1 to 315360000000)
  ARGV[5] max_payload     bytes a step's payload may take with its input (2 to
                          536870912): a later stage whose input would take a step
                          past it is not started, and the flow fails (see _flow)
  ARGV[6] stages          how many stages (1 to 10000); then three values per stage:
  ARGV[7] size            its steps (1 to 10000 in all the stages)
  ARGV[8] group           '1' = it hands on the list of its results; '0' = its one result
  ARGV[9] policy          'fail' | 'partial': what a step that does not complete does
                          (partial: the next stage gets its failure in its place)
                          then six values per step, stage by stage:
  ARGV[10] name           registered task name
  ARGV[11] payload        JSON text; a later stage's begins '{"args":[' (the stage
                          before's output becomes its first argument)
  ARGV[12] max_retries    retries before the step goes to the DLQ (0 to 1000)
  ARGV[13] result_ttl_ms  '' = the queue's completed_ttl; else 1 to 315360000000
  ARGV[14] priority       0 (lowest) to 9 (highest)
  ARGV[15] limit_key      '' = none; else the value its concurrency limit is kept per
  Returns: 1 created | 0 the flow id names a flow: nothing written | the id of a step
           that already names a task (no flow of that id; a task of another flow, or
           one enqueued on its own, kept longer than its flow's record): nothing
           written; an argument out of its range is an error, and nothing is written
  Emits:   enqueued (state pending for the first stage's steps, waiting for the
           others, each with its flow), one per step
]]
--- @include "_common"
--- @include "_ended"

local ready_key, events_key, seq_key, epoch_key, wake_key = KEYS[1], KEYS[2], KEYS[3],
  KEYS[4], KEYS[5]
local prefix, retention, flow_id = ARGV[1], ARGV[2], ARGV[3]

-- Checked before the first write (see whole_arg); retention by open_feed.
if not string.match(flow_id, '^[%w_%-]+$') or #flow_id > 100 then
  error('flow_id must be 1-100 letters, digits, _ or -, not ' .. tostring(flow_id))
end
local ttl = whole_arg('ttl_ms', ARGV[4], 1, LIMITS.ttl_ms)
local max_payload = whole_arg('max_payload', ARGV[5], 2, LIMITS.payload_bytes)
local stages = whole_arg('stages', ARGV[6], 1, LIMITS.count)
local STEP_WIDTH, sizes, total = 6, {}, 0
for k = 1, stages do
  local base = 7 + (k - 1) * 3
  sizes[k] = whole_arg('size', ARGV[base], 1, LIMITS.count)
  total = total + sizes[k]
  if ARGV[base + 1] ~= '0' and ARGV[base + 1] ~= '1' then
    error("group must be '0' or '1', not " .. tostring(ARGV[base + 1]))
  end
  if ARGV[base + 2] ~= 'fail' and ARGV[base + 2] ~= 'partial' then
    error("policy must be 'fail' or 'partial', not " .. tostring(ARGV[base + 2]))
  end
end
if total > LIMITS.count then
  error('a flow has at most ' .. LIMITS.count .. ' steps, not ' .. total)
end
local first_step = 7 + stages * 3
if #ARGV ~= first_step - 1 + total * STEP_WIDTH then
  error(total .. ' steps need ' .. (first_step - 1 + total * STEP_WIDTH) ..
    ' ARGV values, not ' .. #ARGV)
end
local steps, n = {}, 0
for k = 1, stages do
  for i = 1, sizes[k] do
    local base = first_step + n * STEP_WIDTH
    n = n + 1
    local step = {id = flow_step_id(flow_id, k, i), stage = k, name = ARGV[base],
      payload = ARGV[base + 1], limit_key = ARGV[base + 5],
      max_retries = whole_arg('max_retries', ARGV[base + 2], 0, LIMITS.max_retries),
      priority = whole_arg('priority', ARGV[base + 4], 0, LIMITS.priority)}
    if ARGV[base + 3] ~= '' then
      step.result_ttl = integer_text(whole_arg('result_ttl_ms', ARGV[base + 3], 1,
        LIMITS.ttl_ms))
    end
    if k > 1 and string.sub(step.payload, 1, #FLOW_ARGS_HEAD) ~= FLOW_ARGS_HEAD then
      error("the payload of step " .. step.id .. " must begin '" .. FLOW_ARGS_HEAD ..
        "' so the stage before can hand it its input")
    end
    steps[n] = step
  end
end

local flow = flow_key(prefix, flow_id)
if redis.call('EXISTS', flow) == 1 then return 0 end
for _, step in ipairs(steps) do
  if redis.call('EXISTS', prefix .. 'task:' .. step.id) == 1 then return step.id end
end
-- The first stage's steps go to their ready lists: those and the log must take them.
local places = {events_key, 'stream'}
for _, step in ipairs(steps) do
  if step.stage == 1 then ready_types(places, ready_key, step.priority) end
end
expect_types(places)

local now = server_now_ms()
local now_text = integer_text(now)
local feed = open_feed(events_key, seq_key, epoch_key, retention, now)
redis.call('HSET', flow, 'state', 'running', 'stages', stages, 'stage', 1, 'ttl', ttl,
  'created_at', now_text, 'max_payload', max_payload)
for k = 1, stages do
  local base = 7 + (k - 1) * 3
  redis.call('HSET', flow, 'size:' .. k, sizes[k], 'group:' .. k, ARGV[base + 1],
    'policy:' .. k, ARGV[base + 2])
end
for _, step in ipairs(steps) do
  local state = 'waiting'
  if step.stage == 1 then state = 'pending' end
  local task_key = prefix .. 'task:' .. step.id
  local event = {'type', 'enqueued', 'task', step.id, 'state', state, 'name', step.name,
    'at', now_text, 'flow', flow_id}
  redis.call('HSET', task_key, 'state', state, 'name', step.name, 'payload', step.payload,
    'max_retries', step.max_retries, 'retries', '0', 'fencing_token', '0',
    'idempotency_key', '', 'created_at', now_text, 'run_at', now_text, 'flow', flow_id)
  if step.result_ttl then redis.call('HSET', task_key, 'result_ttl', step.result_ttl) end
  if step.limit_key ~= '' then
    redis.call('HSET', task_key, 'limit_key', step.limit_key)
    event[#event + 1], event[#event + 2] = 'limit_key', step.limit_key
  end
  if step.priority ~= DEFAULT_PRIORITY then
    redis.call('HSET', task_key, 'priority', integer_text(step.priority))
    event[#event + 1], event[#event + 2] = 'priority', integer_text(step.priority)
  end
  emit(feed, event)
  if state == 'pending' then push_ready(ready_key, step.id, step.priority, false) end
end
close_feed(feed)
wake_workers(wake_key, sizes[1])
return 1
