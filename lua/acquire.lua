-- acquire: one attempt to take the lock or line up for it (after lib.lua);
-- try.lua is the attempt that does not line up.
-- KEYS[1] lock, KEYS[2] fence counter, KEYS[3] line
-- ARGV[1] token   this Lock call
-- ARGV[2] ttl     lease in ms
-- ARGV[3] owner   WithOwner id, "" when not reentrant
-- ARGV[4] tail    "<#owner>:<owner><meta>"
-- ARGV[5] since   the caller's clock, unix ms
-- ARGV[6] mode    "j": join the line if held; "f": fair, join the line
--                 unless first in it; "n": a fair try, which leaves a
--                 free lock to the line's head and never joins the line
-- ARGV[7] entry   the caller's line entry (modes j and f; "" in mode n)
-- ARGV[8] again   "1" when the caller may be in line already (a re-ask)
-- ARGV[9] pub     "PUBLISH" or "SPUBLISH", for a handoff in fair mode
-- ARGV[10] linettl how long the line lives without a re-ask, ms
-- ARGV[11] claim  first lease of a handoff in fair mode, ms
-- ARGV[12] notify "1": publish "a" on "<lock>:released" when granted
-- returns the fence of a new grant (a bare integer, as try.lua; {2, fence}
-- when a re-ask did not find the caller in line), {1, fence,
-- holds} when the caller's owner took it again, {1, fence, 1, lease left
-- in ms} when a handoff gave it to the caller before this call (or when
-- the call's own first run took it: see held), else {0, lease left in
-- ms, the holder's fence} (and the caller is in line in modes j and f): a
-- handoff to the caller with a fence up to the holder's was made before
-- this call, and its grant had ended by then, so that its notice, if it
-- comes later, is dropped; a fourth element 1 says that a re-ask did not
-- find the caller in line. Either way a handoff passed the caller over
-- because nobody heard its client: the client moves its subscription
-- (notifier.rehome).
local token, ttl, owner, tail, since, mode, entry, again =
  ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8]

local v = redis.call('GET', KEYS[1])
local head -- the line's first entry, when a fair call looked at it
local fair = mode == 'f' or mode == 'n'
if not v and fair then
  head = redis.call('LINDEX', KEYS[3], 0)
  if head and head ~= entry then
    -- Free, but others came first (its holder died): the head takes it.
    if handoff(ARGV[9], since, ARGV[11]) then
      v = redis.call('GET', KEYS[1])
      if ARGV[12] == '1' then -- a new leader, as a release's handoff says
        redis.call(ARGV[9], KEYS[1] .. ':released', 'h')
      end
    end
  end
end
if v then
  local r, line = held(v, token, owner, ttl)
  if r then
    if again == '1' and not r[4] then
      -- Its owner came to hold the lock while it waited: it leaves the
      -- line (a handoff to it, {1, fence, 1, left}, took its entry already).
      redis.call('LREM', KEYS[3], 0, entry)
    end
    return r
  end
  if mode == 'n' then
    return {0, redis.call('PTTL', KEYS[1])}
  end
  local holder = tonumber(string.match(v, '^%d+'))
  local missed = line_up(entry, again, ARGV[10], ARGV[9], since)
  if line == '0' then
    local f, s, h, _, t = parse(v)
    redis.call('SET', KEYS[1], grant(f, s, h, '1', t), 'KEEPTTL')
  end
  if missed then
    return {0, redis.call('PTTL', KEYS[1]), holder, 1}
  end
  return {0, redis.call('PTTL', KEYS[1]), holder}
end
local line, missed = '0', false
if again == '1' then
  missed = redis.call('LREM', KEYS[3], 0, entry) == 0
  line = '1'
elseif (not fair or head) and redis.call('EXISTS', KEYS[3]) == 1 then
  -- (a fair call that found the line empty above knows it still is)
  line = '1'
end
local fence = draw()
redis.call('SET', KEYS[1], grant(fence, since, token, line, tail), 'PX', ttl)
if ARGV[12] == '1' then
  redis.call(ARGV[9], KEYS[1] .. ':released', 'a')
end
if missed then
  return {2, fence}
end
return fence
