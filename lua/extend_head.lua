-- extend, first part: a lock held once, by this token, the common case,
-- runs before lib.lua, whose function definitions cost every call that
-- reaches them. KEYS and ARGV as in extend.lua; v is the lock's value.
local v = redis.call('GET', KEYS[1])
if not v then
  return 0
end
-- Held once by this token when "<token> " follows the second space of
-- "<fence> <since> <holds> ..." (plain finds: see release_head.lua).
local a = string.find(v, ' ', 1, true)
local b = a and string.find(v, ' ', a + 1, true)
if b and string.sub(v, b + 1, b + #ARGV[1] + 1) == ARGV[1] .. ' ' then
  if ARGV[3] then -- a renewal: refuse it if it came too late (extend.lua)
    local left = redis.call('PTTL', KEYS[1])
    if left < tonumber(ARGV[3]) then
      return {left}
    end
  end
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
