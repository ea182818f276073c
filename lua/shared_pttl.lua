-- shared_pttl: the lease left of a hold of a read-write lock or a
-- semaphore (after lib.lua, shared.lua). KEYS as in shared.lua.
-- ARGV[1] token
-- returns the lease left in ms, or -3 when not held.
local ex = redis.call('GET', KEYS[1])
if ex then
  local _, _, holds = parse(ex)
  if holds == ARGV[1] then
    return redis.call('PTTL', KEYS[1])
  end
end
local lease_end = redis.call('ZSCORE', KEYS[4], ARGV[1])
if lease_end then
  local left = tonumber(lease_end) - now_ms()
  if left > 0 then
    return left
  end
end
return -3
