-- sem_acquire: one attempt at a semaphore permit (after lib.lua,
-- shared.lua). KEYS and ARGV as in shared.lua, ARGV[7] limit: the
-- semaphore's number of permits (permits go in arrival order), which the
-- line entry ARGV[9] carries too ("s<limit>", see lib.lua).
-- returns the fence when granted ({1, fence, 1, 0} when a handoff gave it
-- to the caller: 0, the lease left is not told), {0, ms until a permit's lease ends, or -1} otherwise (and
-- the caller is in line in mode "j"; a re-ask gets the fence counter's
-- value third), or an error reply "LIMIT <n>" when
-- the semaphore is in use with another limit.
local token, ttl, tail, since, limit, mode, entry, again = shared_args()
local now = now_ms()
local held = prune(now)
local have = redis.call('HGET', KEYS[5], '!n')
if have and held == 0 then
  -- Every permit's lease ran out, though the keys live on (they expire
  -- with the last lease, in the same millisecond; or they were written by
  -- an older client, whose keys outlived a hold with a longer lease): the
  -- limit is nobody's any more, and is forgotten as if the keys had
  -- expired.
  redis.call('DEL', KEYS[4], KEYS[5])
  have = nil
end
if have and have ~= limit then
  return redis.error_reply('LIMIT ' .. have)
end
local n = tonumber(limit)
local head
-- Waiters ahead are served by the limit in use, not the caller's; with
-- none in use, by the first one's own, which its grant records (see
-- handoff_shared).
head, held = serve_ahead(entry, since, ARGV[5], ARGV[6], have and n - held, held)
if not have and held > 0 then
  -- The waiters ahead were handed permits, and the limit they brought is
  -- the one in use now: the caller is held to it, as above.
  have = redis.call('HGET', KEYS[5], '!n')
end
-- A caller in line may have been handed a permit; and any caller's first
-- run may have taken one, when go-redis sent the script again after a lost
-- answer (none can be held while nothing is). It leaves the line then: its
-- first run may have joined it.
local f = (again == '1' or held > 0) and shared_fence(token)
if f then
  if entry ~= '' then
    redis.call('LREM', KEYS[3], 0, entry)
  end
  return {1, f, 1, 0}
end
if have and have ~= limit then
  return redis.error_reply('LIMIT ' .. have)
end
if held < n and (not head or head == entry) then
  if head then
    redis.call('LPOP', KEYS[3])
  end
  -- (a re-ask not first in line was passed over: see acquire.lua)
  local missed = again == '1' and head ~= entry
  local fence = draw()
  local value = grant(fence, since, token, '1', tail)
  if have then
    hold_shared(token, ttl, value, now, held)
  else
    hold_shared(token, ttl, value, now, held, '!n', limit)
  end
  if missed then
    return {2, fence}
  end
  return fence
end
local missed = mode ~= 't' and line_up(entry, again, ARGV[11], ARGV[5], since)
if again == '1' then
  -- A handoff to the caller with a fence up to the counter's was made
  -- before this call, and its grant had ended (as in acquire.lua); the
  -- fourth element as there.
  return {0, blocker_ttl(now), tonumber(redis.call('GET', KEYS[2])) or 0, missed and 1 or 0}
end
return {0, blocker_ttl(now)}
