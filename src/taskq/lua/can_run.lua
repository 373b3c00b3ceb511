--[[
  can_run: the commands taskq's scripts call that the connection's ACL user may not run
  on the queue's keys. A script refused a command part way keeps the writes it made
  before it (Redis undoes none): a user denied XTRIM leased tasks it never ran, each
  then reaped as a lost lease until it went dead. So a worker asks before it leases,
  and a producer before its first enqueue. Read-only.
  KEYS[1] events  STREAM  change feed; it stands for every key of the queue, since an
                          ACL key pattern sees names alone and every key a script uses
                          shares the queue's prefix
  ARGV[1] command         the first command to check (a container command with its
                          subcommand: "XINFO STREAM"); each further ARGV is one more
  Returns: {checked, refused, ...}: checked is 0 where Redis cannot check (6.2 has no
           redis.acl_check_cmd), else 1; then each command of ARGV the user may not run
  Emits:   nothing
]]

if not redis.acl_check_cmd then return {0} end
local reply = {1}
for i = 1, #ARGV do
  local words = {}
  for word in string.gmatch(ARGV[i], '%S+') do words[#words + 1] = word end
  words[#words + 1] = KEYS[1]
  -- A command this server does not know is no refusal: check_version judges the server.
  local known, allowed = pcall(redis.acl_check_cmd, unpack(words))
  if known and not allowed then reply[#reply + 1] = ARGV[i] end
end
return reply
