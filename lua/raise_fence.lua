-- raise_fence: settle a node on the fence a quorum grant chose (the largest
-- of its majority): lift the node's counter to it, so that any later
-- majority sees it (majorities overlap), and store it in the node's copy of
-- the grant, so that every node answers a reentry with the grant's one
-- fence, whichever majority answers first.
-- KEYS[1] fence counter, KEYS[2] lock
-- ARGV[1] fence
-- ARGV[2] token   the grant's first hold (reentries may have added more)
-- returns 1.
local f = tonumber(ARGV[1])
if tonumber(redis.call('GET', KEYS[1]) or '0') < f then
  redis.call('SET', KEYS[1], ARGV[1]) -- not f: a number argument may be formatted as 1.7e+15
end
local v = redis.call('GET', KEYS[2])
local fence, since, holds, rest = string.match(v or '', '^(%d+) (%d+) (%S+) (.*)$')
-- A reentry may have added holds before this lands: the grant is still
-- the one whose holds include the token.
if holds and fence ~= ARGV[1] and string.find(',' .. holds .. ',', ',' .. ARGV[2] .. ',', 1, true) then
  redis.call('SET', KEYS[2], ARGV[1] .. ' ' .. since .. ' ' .. holds .. ' ' .. rest, 'KEEPTTL')
end
return 1
