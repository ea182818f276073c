-- rw_acquire: one attempt at a read-write lock (after lib.lua, shared.lua).
-- KEYS as in shared.lua; ARGV as in shared.lua, ARGV[7] want: "r" read
-- (shared) or "w" write (exclusive); in mode "j" a read-write lock is
-- always fair.
-- A caller takes the lock only if nobody waits ahead of it: a reader that
-- comes while a writer waits queues behind it, so writers do not starve.
-- returns the fence when granted ({1, fence, 1, 0} when a handoff gave it
-- to the caller: 0, the lease left is not told), else {0, how long until a hold ends (ms), or -1} (and the
-- caller is in line in mode "j"; a re-ask gets the fence counter's value
-- third, and 1 fourth when it was not found in line; {2, fence}: granted,
-- and a re-ask not found in line).
local token, ttl, tail, since, want, mode, entry, again = shared_args()
local now = now_ms()
local head, held = serve_ahead(entry, since, ARGV[5], ARGV[6], 1e9, prune(now))
local writing = redis.call('EXISTS', KEYS[1]) == 1
-- A caller in line may have been handed a hold; and any caller's first run
-- may have taken one, when go-redis sent the script again after a lost
-- answer (none can be held while nothing is). It leaves the line then: its
-- first run may have joined it.
local f = (again == '1' or held > 0 or writing) and own(token)
if f then
  if entry ~= '' then
    redis.call('LREM', KEYS[3], 0, entry)
  end
  return {1, f, 1, 0}
end
if not writing and (want == 'r' or held == 0) and (not head or head == entry) then
  if head then
    redis.call('LPOP', KEYS[3])
  end
  -- (a re-ask not first in line was passed over: see acquire.lua)
  local missed = again == '1' and head ~= entry
  local fence = draw()
  local value = grant(fence, since, token, '1', tail)
  if want == 'w' then
    redis.call('SET', KEYS[1], value, 'PX', ttl)
  else
    hold_shared(token, ttl, value, now, held)
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
