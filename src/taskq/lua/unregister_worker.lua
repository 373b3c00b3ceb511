--[[
  unregister_worker: a worker that stops takes itself out of the registry at once,
  rather than a lease later.
  KEYS[1] workers   ZSET   worker ids by the time (ms) their record expires
  KEYS[2] worker    HASH   this worker's record
  KEYS[3] dead_ttls ZSET   worker ids by the ms each keeps a dead task
  ARGV[1] worker_id        the worker's id
  Returns: 1 if it was registered, else 0; workers of another type is an error, and
           nothing is deleted; dead_ttls of another type is passed over, as
           register_worker passes it over
  Emits:   nothing (a worker is not a task)
]]
--- @include "_common"

expect_types({KEYS[1], 'zset'})
redis.call('DEL', KEYS[2])
redis.pcall('ZREM', KEYS[3], ARGV[1])
return redis.call('ZREM', KEYS[1], ARGV[1])
