-- guard_set: SET a string key only for a fence not below the highest fence
-- the key has seen.
-- KEYS[1] fence marker of KEYS[2] (same Cluster slot, never expires)
-- KEYS[2] the guarded string key
-- ARGV[1] fence       positive decimal integer, no leading zeros
-- ARGV[2] value
-- ARGV[3] ttl         milliseconds, 0 for no expiry
-- returns 1 when written; an error reply "STALEFENCE <highest>" otherwise.
-- Fences are compared as decimal strings (length, then bytes) so that values
-- beyond 2^53 compare exactly, which Lua numbers would not.
local high = redis.call('GET', KEYS[1])
if high and (#ARGV[1] < #high or (#ARGV[1] == #high and ARGV[1] < high)) then
  return redis.error_reply('STALEFENCE ' .. high)
end
if ARGV[3] == '0' then
  redis.call('SET', KEYS[2], ARGV[2])
else
  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
end
if high ~= ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1])
end
return 1
