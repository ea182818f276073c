-- release: drop one hold; the last hold deletes the lock and tells waiters.
-- KEYS[1] lock hash
-- ARGV[1] owner
-- ARGV[2] fence       identifies the grant, so a stale holder that shares an
--                     owner id with a later grant cannot release it
-- ARGV[3] channel     release notifications (same hash tag as KEYS[1])
-- returns -1 when not held, else the holds left (0: the lock is free).
local cur = redis.call('HMGET', KEYS[1], 'owner', 'fence')
if cur[1] ~= ARGV[1] or cur[2] ~= ARGV[2] then
  return -1
end
local left = redis.call('HINCRBY', KEYS[1], 'count', -1)
if left > 0 then
  return left
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[3], ARGV[2])
return 0
