-- pttl: the lease left of a lock this hold still has (after lib.lua).
-- KEYS[1] lock
-- ARGV[1] token
-- returns the lease left in ms, or -3 when not held.
local v = redis.call('GET', KEYS[1])
if v then
  local _, _, holds = parse(v)
  if holds and holds_token(holds, ARGV[1]) then
    return redis.call('PTTL', KEYS[1])
  end
end
return -3
