-- try: one attempt to take the lock, without waiting. The common case, a
-- free lock, runs here before lib.lua, whose function definitions cost
-- every call that reaches them; try.lua answers for a lock that is held.
-- Only what that common case needs is passed: Redis and the client pay for
-- every argument (about half a microsecond each in Redis).
-- KEYS[1] lock, KEYS[2] fence counter
-- ARGV[1] grant   "<since> <token> 0 <tail>": the lock's value after its
--                 fence (see lib.lua); since is the caller's clock, unix ms
-- ARGV[2] ttl     lease in ms
-- ARGV[3] pub     optional, "PUBLISH" or "SPUBLISH": publish "a" on
--                 "<lock>:released" when granted (elections)
-- returns the fence of a new grant (an integer: cheaper for Redis to encode
-- and for the client to decode than an array), {1, fence, holds} when the
-- caller's owner took it again, {1, fence, 1, lease left in ms} when the
-- caller's token held it already, else {0, lease left in ms}.
--
-- A fence drawn for an attempt that fails is skipped: fences only need to
-- increase.
local fence = redis.call('INCR', KEYS[2])
if fence == 1 then -- a missing counter: as draw() in lib.lua
  local t = redis.call('TIME')
  fence = t[1] * 1000000 + t[2]
  redis.call('SET', KEYS[2], string.format('%d', fence))
end
local tried = redis.call('SET', KEYS[1], string.format('%d ', fence) .. ARGV[1], 'NX', 'GET', 'PX', ARGV[2])
if not tried then
  if ARGV[3] then
    redis.call(ARGV[3], KEYS[1] .. ':released', 'a')
  end
  return fence
end
