-- release, first part: the last hold of a lock nobody waits for, the
-- common case, runs before lib.lua, whose function definitions cost every
-- call that reaches them. KEYS and ARGV as in release.lua; v is the lock's
-- value when read here.
local v
if ARGV[4] == '' then
  v = redis.call('GET', KEYS[1])
  if v and ARGV[5] ~= '1' then
    local holds, line = string.match(v, '^%d+ %d+ (%S+) ([01]) ')
    if holds == ARGV[1] and line == '0' then
      redis.call('DEL', KEYS[1])
      return {0}
    end
  end
end
