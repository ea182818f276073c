-- force_release: delete a lock whoever holds it (administrative release),
-- then free it like a release does: hand it to the first live
-- waiter in line, or tell waiters it is free. The holder learns at its next renewal.
-- Runs after handoff.lua, which defines handoff().
-- KEYS[1..5] as in handoff.lua (lock hash, fence counter, waiter list,
--            waiter deadlines, waiter arguments)
-- ARGV[1] notice      "PUBLISH <channel>" or "SPUBLISH <channel>"
-- ARGV[2] fence       "0": any grant; else only the grant with this fence,
--                     so an operator never removes a grant they did not see
-- ARGV[3] claim       first lease of a handed-off grant, in milliseconds
-- returns {owner, count, fence, meta, since, pttl, removed, handed}: the lock
-- found; removed 1 when it was deleted, 0 when its fence did not match;
-- handed the fence of the fair waiter it went to, else 0. Returns {} when
-- there was no lock.
local cur = redis.call('HMGET', KEYS[1], 'owner', 'count', 'fence', 'meta', 'since')
if not cur[1] then
  return {}
end
local pttl = redis.call('PTTL', KEYS[1])
if ARGV[2] ~= '0' and cur[3] ~= ARGV[2] then
  return {cur[1], cur[2], cur[3], cur[4], cur[5], pttl, 0, 0}
end
redis.call('DEL', KEYS[1])
local grant = handoff(ARGV[1], tonumber(ARGV[3]))
local handed = 0
if grant then
  handed = grant[1]
end
return {cur[1], cur[2], cur[3], cur[4], cur[5], pttl, 1, handed}
