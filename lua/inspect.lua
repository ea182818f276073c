-- inspect: read a lock as it is now, for status tools. Changes nothing.
-- KEYS[1] lock, KEYS[2] line
-- ARGV[1] "PUBLISH" or "SPUBLISH": how the lock's channels are published
-- returns {grant|false, pttl, waiters in line, connections subscribed to
-- "<lock>:released" on this node}.
local numsub = ARGV[1] == 'SPUBLISH' and 'SHARDNUMSUB' or 'NUMSUB'
local sub = redis.call('PUBSUB', numsub, KEYS[1] .. ':released')
return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1]),
  redis.call('LLEN', KEYS[2]), sub[2]}
