-- release: drop one hold (after release_head.lua and lib.lua); the last one frees the lock,
-- handing it to the first waiter still listening. Also how a caller that
-- gave up leaves: it drops its line entry and any grant made to it.
-- KEYS[1] lock, KEYS[2] fence counter, KEYS[3] line
-- ARGV[1] token   the hold to drop
-- ARGV[2] pub     "PUBLISH" or "SPUBLISH"
-- ARGV[3] since   the caller's clock, unix ms: the time of a handoff
-- ARGV[4] entry   line entry to drop first, "" for none
-- ARGV[5] notify  "1": publish on "<lock>:released" when freed: "h" when
--                 handed over, else "r"
-- ARGV[6] claim   first lease of a handoff, ms
-- ARGV[7] link    trace link for the grantee, or ""
-- returns {-1} when the lock is gone, {-2} when another grant holds it,
-- {holds left}, {0} when freed, or {0, fence} when handed over with that
-- fence.
if ARGV[4] ~= '' then
  redis.call('LREM', KEYS[3], 1, ARGV[4])
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
local f = free(line, ARGV[2], ARGV[3], ARGV[6], ARGV[7])
if ARGV[5] == '1' then
  redis.call(ARGV[2], KEYS[1] .. ':released', f and 'h' or 'r')
end
if f then
  return {0, f}
end
return {0}
