-- release: drop one hold (after release_head.lua and lib.lua); the last one frees the lock,
-- handing it to the first waiter still listening. Also how a caller that
-- gave up leaves: it drops its line entry and any grant made to it.
-- KEYS[1] lock, KEYS[2] fence counter, KEYS[3] line
-- ARGV[1] token   the hold to drop
-- ARGV[2] since   the caller's clock, unix ms: the time of a handoff
-- ARGV[3..5] are passed together or not at all (the common case: Redis and
-- the client pay for every argument):
-- ARGV[3] entry   line entry to drop first, "" for none
-- ARGV[4] notify  "1": publish on "<lock>:released" when freed: "h" when
--                 handed over, else "r"
-- ARGV[5] link    trace link for the grantee, or ""
-- pub ("PUBLISH" or "SPUBLISH") and claim (the first lease of a handoff,
-- ms) are not arguments but locals of a first line that the client puts
-- before release_head.lua, one variant of the script per publish command
-- (see releaseScripts): they never change, and every argument costs.
-- returns {-1} when the lock is gone, {-2} when another grant holds it,
-- {holds left}, {0} when freed, or {0, fence} when handed over with that
-- fence; release_head.lua returns 0 (not {0}: an integer is cheaper to
-- encode and decode) when it frees the lock.
if ARGV[3] then -- release_head.lua did not run
  if ARGV[3] ~= '' then
    redis.call('LREM', KEYS[3], 0, ARGV[3])
  end
  v = redis.call('GET', KEYS[1])
end
if not v then
  return {-1}
end
local fence, since, holds, line, tail = parse(v)
if holds ~= ARGV[1] then
  local rest = holds and drop_hold(holds, ARGV[1])
  if not rest then
    return {-2}
  end
  redis.call('SET', KEYS[1], grant(fence, since, rest, line, tail), 'KEEPTTL')
  return {count_holds(rest)}
end
local f = free(line, pub, ARGV[2], claim, ARGV[5])
if ARGV[4] == '1' then
  redis.call(pub, KEYS[1] .. ':released', f and 'h' or 'r')
end
if f then
  return {0, f}
end
return {0}
