-- release, first part: the last hold of a lock nobody waits for, the
-- common case, runs before lib.lua, whose function definitions cost every
-- call that reaches them. KEYS and ARGV as in release.lua; v is the lock's
-- value when read here.
local v
if not ARGV[5] then -- no line entry to drop, no notice to publish
  v = redis.call('GET', KEYS[1])
  if v then
    local holds, line = string.match(v, '^%d+ %d+ (%S+) ([01]) ')
    if holds == ARGV[1] and line == '0' then
      redis.call('DEL', KEYS[1])
      return 0
    end
  end
end
