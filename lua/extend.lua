-- extend: reset the lease of a lock this hold still has (after
-- extend_head.lua, which read the lock's value v, and lib.lua).
-- KEYS[1] lock
-- ARGV[1] token
-- ARGV[2] ttl     new lease in ms
-- returns 1 when extended, 0 when the lock is gone, -1 when it is another
-- grant's.
local _, _, holds = parse(v)
if not holds or not holds_token(holds, ARGV[1]) then
  return -1
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
