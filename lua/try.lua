-- try, after try_head.lua and lib.lua: the lock is held (its value is
-- tried), so it is taken again by its owner, or not obtained.
local token, tail = string.match(ARGV[1], '^%d+ (%S+) 0 (.*)$')
return held(tried, token, owner_of(tail), ARGV[2]) or {0, redis.call('PTTL', KEYS[1])}
