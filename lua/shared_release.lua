-- shared_release: end a hold of a read-write lock or a semaphore (after
-- lib.lua, shared.lua), and hand what is free to the waiters in line. Also
-- how a caller that gave up leaves: it drops its line entry and any hold
-- made to it.
-- KEYS as in shared.lua
-- ARGV[1..2] as in release.lua, and pub and claim as there
-- ARGV[3] limit   "0" for a read-write lock; for a semaphore the caller's
--                 number of permits, which only says "a semaphore": the
--                 script hands permits by the limit recorded, "!n" (with
--                 none, by the first waiter's own)
-- ARGV[4..6] entry, notify (unused) and link as release.lua's ARGV[3..5],
--                 passed together or not at all
-- returns {-1} when the token holds nothing, 0 when released, {0, n} when n
-- waiters were handed a hold.
--
-- A semaphore hands permits by the limit in use ("!n"), not the caller's:
-- a caller refused for asking with another limit leaves through here too,
-- and must not hand out permits by its own. With no limit in use (its keys
-- expired under waiters whose holders died) it hands them by the limit of
-- the first waiter served, which that grant records (see handoff_shared).
-- It reads "!n" only when someone is in line.
local token, limit = ARGV[1], tonumber(ARGV[3])
local sem = limit > 0
if ARGV[4] and ARGV[4] ~= '' then
  redis.call('LREM', KEYS[3], 0, ARGV[4])
end
local now = now_ms()
local found, exclusive = false, false
-- A semaphore (limit > 0) never has an exclusive grant.
local ex = limit == 0 and redis.call('GET', KEYS[1])
if ex then
  local _, _, holds = parse(ex)
  if holds == token then
    redis.call('DEL', KEYS[1])
    found = true
  else
    exclusive = true
  end
end
local lease_end = not found and redis.call('ZSCORE', KEYS[4], token)
if lease_end then
  found = tonumber(lease_end) > now
  redis.call('ZREM', KEYS[4], token)
  redis.call('HDEL', KEYS[5], token)
end
local held = prune(now)
local handed = 0
if not exclusive then
  local room = 1e9
  if sem then
    room = function()
      local n = redis.call('HGET', KEYS[5], '!n')
      return n and tonumber(n) - held
    end
  end
  handed = handoff_shared(pub, ARGV[2], claim, ARGV[6] or '', room, held)
end
-- Redis deletes an empty zset or hash itself; only a semaphore's hash keeps
-- a field ("!n") when no permit is held.
if sem and (handed == 0 and held or redis.call('ZCARD', KEYS[4])) == 0 then
  redis.call('DEL', KEYS[4], KEYS[5])
elseif lease_end and held + handed > 0 then
  -- The keys may live on for the lease of the hold that left.
  fit()
end
if not found then
  return {-1}
end
if handed > 0 then
  return {0, handed}
end
return 0
