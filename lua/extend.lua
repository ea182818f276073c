-- extend: reset the lease of a lock this hold still has (after lib.lua).
-- KEYS[1] lock
-- ARGV[1] token
-- ARGV[2] ttl     new lease in ms
-- returns 1 when extended, 0 when the lock is gone, -1 when it is another
-- grant's.
local v = redis.call('GET', KEYS[1])
if not v then
  return 0
end
local _, _, holds = parse(v)
if not holds or not holds_token(holds, ARGV[1]) then
  return -1
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
