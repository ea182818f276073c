-- shared_release: end a hold of a read-write lock or a semaphore (after
-- lib.lua, shared.lua), and hand what is free to the waiters in line. Also
-- how a caller that gave up leaves: it drops its line entry and any hold
-- made to it.
-- KEYS as in shared.lua
-- ARGV[1..7] as in release.lua, always all passed
-- ARGV[8] limit   a semaphore's number of permits, "0" for a read-write lock
-- returns {-1} when the token holds nothing, {0} when released, {0, n}
-- when n waiters were handed a hold.
local token = ARGV[1]
if ARGV[5] ~= '' then
  redis.call('LREM', KEYS[3], 1, ARGV[5])
end
local now = now_ms()
local found, exclusive = false, false
local ex = redis.call('GET', KEYS[1])
if ex then
  local _, _, holds = parse(ex)
  if holds == token then
    redis.call('DEL', KEYS[1])
    found = true
  else
    exclusive = true
  end
end
if not found then
  local lease_end = redis.call('ZSCORE', KEYS[4], token)
  if lease_end then
    found = tonumber(lease_end) > now
    redis.call('ZREM', KEYS[4], token)
    redis.call('HDEL', KEYS[5], token)
  end
end
local held = prune(now)
local handed = 0
if not exclusive then
  local limit = tonumber(ARGV[8])
  local room = limit > 0 and limit - held or 1e9
  handed = handoff_shared(ARGV[2], ARGV[3], ARGV[4], ARGV[7], room, held)
end
if (handed == 0 and held or redis.call('ZCARD', KEYS[4])) == 0 then
  redis.call('DEL', KEYS[4], KEYS[5])
end
if not found then
  return {-1}
end
if handed > 0 then
  return {0, handed}
end
return {0}
