-- force_release: delete a lock whoever holds it (administrative release) and
-- wake its waiters. The holder learns of it at its next renewal.
-- KEYS[1] lock hash   {owner, count, fence, meta, since}
-- ARGV[1] release channel (same hash tag as KEYS[1])
-- returns {owner, count, fence, meta, since, pttl} of the removed lock, or
-- {} when there was no lock.
local cur = redis.call('HMGET', KEYS[1], 'owner', 'count', 'fence', 'meta', 'since')
if not cur[1] then
  return {}
end
local pttl = redis.call('PTTL', KEYS[1])
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[1], cur[3] or '0')
return {cur[1], cur[2], cur[3], cur[4], cur[5], pttl}
