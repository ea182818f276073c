-- shared_extend: reset the lease of a hold of a read-write lock or a
-- semaphore (after lib.lua, shared.lua). KEYS as in shared.lua.
-- ARGV[1] token
-- ARGV[2] ttl     new lease in ms
-- ARGV[3] guard   optional: the least lease left, in ms, for the renewal
--                 to apply (see extend.lua)
-- returns 1 when extended, 0 when the hold is gone, {lease left in ms} when
-- refused by the guard.
local ex = redis.call('GET', KEYS[1])
if ex then
  local _, _, holds = parse(ex)
  if holds == ARGV[1] then
    local left = redis.call('PTTL', KEYS[1])
    if ARGV[3] and left < tonumber(ARGV[3]) then
      return {left}
    end
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return 1
  end
end
local now = now_ms()
local lease_end = redis.call('ZSCORE', KEYS[4], ARGV[1])
if not lease_end or tonumber(lease_end) <= now then
  return 0
end
if ARGV[3] and tonumber(lease_end) - now < tonumber(ARGV[3]) then
  return {tonumber(lease_end) - now}
end
redis.call('ZADD', KEYS[4], 'XX', now + tonumber(ARGV[2]), ARGV[1])
if now + tonumber(ARGV[2]) < tonumber(lease_end) then
  fit() -- cut short: the keys may live on for the old lease
else
  keep(KEYS[4], ARGV[2])
  keep(KEYS[5], ARGV[2])
end
return 1
