-- release: drop one hold; the last hold frees the lock, hands it to the
-- first live waiter in line if any, and tells waiters.
-- KEYS[1..5] as in handoff.lua
-- ARGV[1] owner
-- ARGV[2] fence       identifies the grant, so a stale holder that shares an
--                     owner id with a later grant cannot release it
-- ARGV[3] notice      "PUBLISH <channel>" or "SPUBLISH <channel>"
-- ARGV[4] claim       first lease of a handed-off grant, in milliseconds
-- returns {-1} when not held, {holds left} while held, {0} when freed,
-- {0, fence, token} when handed to the waiter with that token.
local cur = redis.call('HMGET', KEYS[1], 'owner', 'fence')
if cur[1] ~= ARGV[1] or cur[2] ~= ARGV[2] then
  return {-1}
end
local left = redis.call('HINCRBY', KEYS[1], 'count', -1)
if left > 0 then
  return {left}
end
redis.call('DEL', KEYS[1])
local grant = handoff(ARGV[3], tonumber(ARGV[4]))
if grant then
  return {0, grant[1], grant[2]}
end
return {0}
