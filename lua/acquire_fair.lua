-- acquire_fair: take the lock in arrival order. A caller that cannot have it
-- now joins the waiter list (or refreshes its deadline there); releases hand
-- the lock to the list's head.
-- KEYS[1..5] as in handoff.lua
-- ARGV[1] token       this Lock call
-- ARGV[2] owner       token, or the WithOwner id
-- ARGV[3] ttl         lease in milliseconds
-- ARGV[4] reentrant   "1" lets the same owner take the lock again
-- ARGV[5] meta
-- ARGV[6] wait        how long the waiter entry lives without a refresh (ms)
-- ARGV[7] notice      "PUBLISH <channel>" or "SPUBLISH <channel>"
-- ARGV[8] inbox       notice argument of this Client's channel for handoffs
-- returns {1, fence, count} when held, {0, pttl} when queued.
local token, owner = ARGV[1], ARGV[2]
local cur = redis.call('HMGET', KEYS[1], 'owner', 'grant')
if cur[1] then
  if cur[2] == token then
    -- handed to this call while it was not listening
    local h = redis.call('HMGET', KEYS[1], 'fence', 'count')
    return {1, tonumber(h[1]), tonumber(h[2])}
  end
  if ARGV[4] == '1' and cur[1] == owner then
    local count = redis.call('HINCRBY', KEYS[1], 'count', 1)
    if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[3]) then
      redis.call('PEXPIRE', KEYS[1], ARGV[3])
    end
    return {1, tonumber(redis.call('HGET', KEYS[1], 'fence')), count}
  end
else
  local head = redis.call('LINDEX', KEYS[3], 0)
  if head and head ~= token then
    -- the holder died: the lock is free but others came first
    handoff(ARGV[7], tonumber(ARGV[6]))
    if redis.call('HGET', KEYS[1], 'grant') == token then
      local h = redis.call('HMGET', KEYS[1], 'fence', 'count')
      return {1, tonumber(h[1]), tonumber(h[2])}
    end
  end
  if not redis.call('HGET', KEYS[1], 'owner') then
    drop_waiter(token)
    local fence = redis.call('INCR', KEYS[2])
    redis.call('HSET', KEYS[1], 'owner', owner, 'count', 1, 'fence', fence,
      'meta', ARGV[5], 'since', now_ms())
    redis.call('PEXPIRE', KEYS[1], ARGV[3])
    return {1, fence, 1}
  end
end
if not redis.call('ZSCORE', KEYS[4], token) then
  redis.call('RPUSH', KEYS[3], token)
  redis.call('HSET', KEYS[5], token, ARGV[3] .. ' ' .. #owner .. ' ' .. #ARGV[8] .. ' ' ..
    owner .. ARGV[8] .. ARGV[5])
end
local deadline = now_ms() + tonumber(ARGV[6])
redis.call('ZADD', KEYS[4], deadline, token)
for _, k in ipairs({KEYS[3], KEYS[4], KEYS[5]}) do
  redis.call('PEXPIRE', k, ARGV[6])
end
return {0, redis.call('PTTL', KEYS[1])}
