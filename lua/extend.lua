-- extend: reset the lease of a lock this hold still has, with other holds
-- (after extend_head.lua, which read the lock's value v, and lib.lua).
-- KEYS[1] lock
-- ARGV[1] token
-- ARGV[2] ttl     new lease in ms
-- ARGV[3] guard   optional, given by the renewer: the least lease, in ms,
--                 that must be left for the renewal to apply. With less
--                 left, it may have been delayed past the moment its
--                 holder's loss signal fired, and extending then would
--                 keep a lease that nobody holds.
-- returns 1 when extended, 0 when the lock is gone, -1 when it is another
-- grant's, {lease left in ms} when refused by the guard.
local _, _, holds = parse(v)
if not holds or not holds_token(holds, ARGV[1]) then
  return -1
end
-- Held with other holds (extend_head.lua took the lone hold): the lease is
-- theirs too, and each hold's loss signal counts on the lease it last set,
-- so a hold with a shorter TTL may lengthen it but never cut it short
-- (as held() in holds.lua does on a reentry).
local left = redis.call('PTTL', KEYS[1])
if ARGV[3] and left < tonumber(ARGV[3]) then
  return {left}
end
if left < tonumber(ARGV[2]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 1
