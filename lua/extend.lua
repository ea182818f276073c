-- extend: reset the lease of a lock this grant still holds.
-- KEYS[1] lock hash
-- ARGV[1] owner
-- ARGV[2] fence
-- ARGV[3] ttl         new lease in milliseconds
-- returns 1 when extended, 0 when the lock is gone, -1 when another grant
-- holds it.
local cur = redis.call('HMGET', KEYS[1], 'owner', 'fence')
if not cur[1] then
  return 0
end
if cur[1] ~= ARGV[1] or cur[2] ~= ARGV[2] then
  return -1
end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
