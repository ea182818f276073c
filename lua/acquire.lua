-- acquire: take a free lock, or take it again as the same owner (reentrant).
-- KEYS[1] lock hash   {owner, count, fence, meta, since}
-- KEYS[2] fence counter (never expires, so fences never repeat for a key)
-- ARGV[1] owner       token, or the caller's owner id when reentrant
-- ARGV[2] ttl         lease in milliseconds
-- ARGV[3] reentrant   "1" lets the same owner take the lock again
-- ARGV[4] meta        holder metadata (host, pid)
-- ARGV[5] since       holder's clock in unix milliseconds
-- returns {1, fence, count} when held, {0, pttl} when another owner holds it.
local owner = redis.call('HGET', KEYS[1], 'owner')
if not owner then
  local fence = redis.call('INCR', KEYS[2])
  redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'count', 1, 'fence', fence,
    'meta', ARGV[4], 'since', ARGV[5])
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, fence, 1}
end
if ARGV[3] == '1' and owner == ARGV[1] then
  local count = redis.call('HINCRBY', KEYS[1], 'count', 1)
  if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
  end
  return {1, tonumber(redis.call('HGET', KEYS[1], 'fence')), count}
end
return {0, redis.call('PTTL', KEYS[1])}
