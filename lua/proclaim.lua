-- proclaim: a leader changes the value it leads with (after lib.lua).
-- KEYS[1] the election's grant
-- ARGV[1] token   the leadership
-- ARGV[2] tail    "0:<value>"
-- ARGV[3] pub     "PUBLISH" or "SPUBLISH"
-- returns 1 when changed, 0 when nobody leads, -1 when another leadership
-- holds the election.
local v = redis.call('GET', KEYS[1])
if not v then
  return 0
end
local fence, since, holds, line = parse(v)
if holds ~= ARGV[1] then
  return -1
end
redis.call('SET', KEYS[1], grant(fence, since, holds, line, ARGV[2]), 'KEEPTTL')
-- 'v', a new value: not 'p', which Clients take for a ping (clear_gone)
redis.call(ARGV[3], KEYS[1] .. ':released', 'v')
return 1
