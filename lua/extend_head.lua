-- extend, first part: a lock held once, by this token, the common case,
-- runs before lib.lua, whose function definitions cost every call that
-- reaches them. KEYS and ARGV as in extend.lua; v is the lock's value.
local v = redis.call('GET', KEYS[1])
if not v then
  return 0
end
if string.match(v, '^%d+ %d+ (%S+) ') == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
