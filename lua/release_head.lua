-- release, first part: the last hold of a lock nobody waits for, the
-- common case, runs before lib.lua, whose function definitions cost every
-- call that reaches them. KEYS and ARGV as in release.lua; v is the lock's
-- value when read here.
local v
if not ARGV[3] then -- no line entry to drop, no notice to publish
  v = redis.call('GET', KEYS[1])
  if v then
    -- v is "<fence> <since> <holds> <line> <tail>" (lib.lua): held once by
    -- this token, nobody in line, when " <token> 0 " follows the second
    -- space. Plain finds and bytes, not a pattern, a substring or a
    -- concatenation: every string that Lua makes is hashed and interned,
    -- and this runs on every Release.
    local a = string.find(v, ' ', 1, true)
    local b = a and string.find(v, ' ', a + 1, true)
    if b and string.find(v, ARGV[1], b + 1, true) == b + 1 then
      local sp, zero, sp2 = string.byte(v, b + #ARGV[1] + 1, b + #ARGV[1] + 3)
      if sp == 32 and zero == 48 and sp2 == 32 then
        redis.call('DEL', KEYS[1])
        return 0
      end
    end
  end
end
