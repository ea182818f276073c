-- lift_fence: run before a script that draws fences is loaded again after
-- Redis lost its scripts (a restart, a failover to a replica, SCRIPT
-- FLUSH). A restart from a snapshot (RDB, or an AOF that lost its tail)
-- brings the counter back behind fences given since; they are all below
-- the server's clock in microseconds (a counter starts from that clock and
-- rises by one a grant, far slower), so the counter is lifted to it.
-- KEYS[1] fence counter
-- returns the counter.
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local counter = tonumber(redis.call('GET', KEYS[1]) or '0')
if counter < now then
  redis.call('SET', KEYS[1], string.format('%d', now))
  return now
end
return counter
