-- inspect: read a lock as it is now, for status tools. Changes nothing.
-- KEYS[1] lock hash   {owner, count, fence, meta, since}
-- KEYS[2] waiter list
-- ARGV[1] notice: "PUBLISH <channel>", or "SPUBLISH <channel>" on Cluster
-- returns {owner|false, count, fence, meta, since, pttl, queued, listening}:
-- owner is false when the lock is free; pttl is the lease left in ms (-1:
-- no expiry, which distlock never sets); queued is the waiter list
-- length; listening counts connections subscribed to the release channel on
-- this node.
local cur = redis.call('HMGET', KEYS[1], 'owner', 'count', 'fence', 'meta', 'since')
local cmd, channel = string.match(ARGV[1], '^(%u+) (.*)$')
local sub = redis.call('PUBSUB', cmd == 'SPUBLISH' and 'SHARDNUMSUB' or 'NUMSUB', channel)
return {cur[1], cur[2], cur[3], cur[4], cur[5], redis.call('PTTL', KEYS[1]),
  redis.call('LLEN', KEYS[2]), sub[2]}
