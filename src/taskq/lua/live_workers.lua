--[[
  live_workers: how many workers of this queue are registered with a record that has
  not expired by the server's clock (a fleet killed at once leaves its entries until
  the next registration prunes them). Read-only; the clock and the count in one call.
  KEYS[1] workers  ZSET    worker ids by the time (ms) their record expires
  Returns: the number of live workers
  Emits:   nothing
]]
--- @include "_common"

return redis.call('ZCOUNT', KEYS[1], server_now_ms(), '+inf')
