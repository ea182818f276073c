-- inspect_shared: read a read-write lock or a semaphore as it is now, for
-- status tools (after lib.lua, shared.lua). Changes nothing.
-- KEYS as in shared.lua
-- returns {exclusive grant|false, its pttl, waiters in line, limit|false,
-- token, grant, lease left ms, token, grant, lease left ms, ...} for the
-- shared holds whose lease has not run out.
local now = now_ms()
local out = {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1]),
  redis.call('LLEN', KEYS[3]), redis.call('HGET', KEYS[5], '!n')}
local holds = redis.call('ZRANGEBYSCORE', KEYS[4], '(' .. now, '+inf', 'WITHSCORES')
for i = 1, #holds, 2 do
  local v = redis.call('HGET', KEYS[5], holds[i])
  if v then
    table.insert(out, holds[i])
    table.insert(out, v)
    table.insert(out, tonumber(holds[i + 1]) - now)
  end
end
return out
