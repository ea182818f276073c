-- guard_hset: HSET one field of a hash only for a fence not below the highest
-- fence the hash has seen.
-- KEYS[1] fence marker of KEYS[2] (same Cluster slot, never expires)
-- KEYS[2] the guarded hash
-- ARGV[1] fence       positive decimal integer, no leading zeros
-- ARGV[2] field
-- ARGV[3] value
-- returns 1 when written; an error reply "STALEFENCE <highest>" otherwise.
local high = redis.call('GET', KEYS[1])
if high and (#ARGV[1] < #high or (#ARGV[1] == #high and ARGV[1] < high)) then
  return redis.error_reply('STALEFENCE ' .. high)
end
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
if high ~= ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1])
end
return 1
