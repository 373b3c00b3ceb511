--[[
  _common: helpers included (by the loader, at "--- @include") into every operation.
  Not an operation itself: it has no KEYS or ARGV of its own.
]]

-- Redis server time in milliseconds: the only clock any script uses.
local function server_now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Idle workers block on the wake list; a bounded number of tokens is enough to wake
-- them all, and the list never grows past it while every worker is busy.
local WAKE_CAP = 256
local function wake_workers(wake_key, n)
  if n <= 0 then return end
  if n > WAKE_CAP then n = WAKE_CAP end
  local tokens = {}
  for i = 1, n do tokens[i] = '1' end
  redis.call('LPUSH', wake_key, unpack(tokens))
  redis.call('LTRIM', wake_key, 0, WAKE_CAP - 1)
end

-- Appends one event to the change feed with the dense id <seq>-0. `fields` starts
-- with 'type', <type>, 'task', <id>, 'state', <state>. A counter of 1
-- means the log starts over (new queue, or its keys were lost): a new epoch tells
-- feed clients that ids from before are meaningless now. If the counter alone was
-- lost, it restarts after the stream's last id, so XADD can never fail mid-script.
local function emit(events_key, seq_key, epoch_key, retention, now_ms, fields)
  local seq = redis.call('INCR', seq_key)
  if seq == 1 or redis.call('EXISTS', epoch_key) == 0 then
    local last = redis.call('XREVRANGE', events_key, '+', '-', 'COUNT', 1)[1]
    if last then
      seq = tonumber(string.match(last[1], '^(%d+)')) + 1
      redis.call('SET', seq_key, seq)
    end
    local t = redis.call('TIME')
    redis.call('SET', epoch_key, t[1] .. string.format('%06d', tonumber(t[2])))
  end
  redis.call('XADD', events_key, 'MAXLEN', tonumber(retention), seq .. '-0',
    'ts', now_ms, unpack(fields))
  -- Lifetime totals per event type and resulting state, for /metrics; the stream
  -- itself is trimmed, so it cannot be counted.
  redis.call('HINCRBY', events_key .. ':stats', fields[2] .. ':' .. fields[6], 1)
  return seq
end

-- Equal-jitter exponential backoff: the full delay doubles per retry up to the cap,
-- and the wait is between half of it and all of it so failed tasks spread out.
local function backoff_ms(retries, base_ms, max_ms, jitter)
  local full = base_ms * (2 ^ (retries - 1))
  if full > max_ms then full = max_ms end
  return math.floor(full / 2 + (full / 2) * jitter)
end
