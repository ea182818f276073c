-- raise_fence: lift a node's fence counter to the fence a quorum grant
-- chose, so that any later majority sees it (majorities overlap).
-- KEYS[1] fence counter
-- ARGV[1] fence
-- returns 1.
local f = tonumber(ARGV[1])
if tonumber(redis.call('GET', KEYS[1]) or '0') < f then
  redis.call('SET', KEYS[1], f)
end
return 1
