-- pttl: the remaining lease of a lock this grant still holds.
-- KEYS[1] lock hash
-- ARGV[1] owner
-- ARGV[2] fence
-- returns the lease left in milliseconds, or -3 when not held.
local cur = redis.call('HMGET', KEYS[1], 'owner', 'fence')
if cur[1] ~= ARGV[1] or cur[2] ~= ARGV[2] then
  return -3
end
return redis.call('PTTL', KEYS[1])
