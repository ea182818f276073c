-- force_release: delete a lock whoever holds it (administrative release) and
-- wake its waiters. The holder learns of it at its next renewal.
-- KEYS[1] lock hash   {owner, count, fence, meta, since}
-- ARGV[1] release channel (same hash tag as KEYS[1])
-- ARGV[2] fence       "0": any grant; else only the grant with this fence,
--                     so an operator never removes a grant they did not see
-- returns {owner, count, fence, meta, since, pttl, removed}: the lock found,
-- removed 1 when it was deleted, 0 when its fence did not match; {} when
-- there was no lock.
local cur = redis.call('HMGET', KEYS[1], 'owner', 'count', 'fence', 'meta', 'since')
if not cur[1] then
  return {}
end
local pttl = redis.call('PTTL', KEYS[1])
if ARGV[2] ~= '0' and cur[3] ~= ARGV[2] then
  return {cur[1], cur[2], cur[3], cur[4], cur[5], pttl, 0}
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[1], cur[3] or '0')
return {cur[1], cur[2], cur[3], cur[4], cur[5], pttl, 1}
