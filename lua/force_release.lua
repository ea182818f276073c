-- force_release: free a lock whoever holds it (administrative release), as
-- a release does: the next waiter in line gets it, else it is deleted and
-- "r" is published for waiters that listen for that (after lib.lua).
-- KEYS[1] lock, KEYS[2] fence counter, KEYS[3] line
-- ARGV[1] fence   "0": any grant; else only the grant with this fence, so
--                 that an operator never removes a grant they did not see
-- ARGV[2] pub     "PUBLISH" or "SPUBLISH"
-- ARGV[3] since   the operator's clock, unix ms
-- ARGV[4] claim   first lease of a handoff, ms
-- returns {} when there was no lock, else {grant, pttl, removed, handed}:
-- removed 1 when freed, 0 when the fence did not match or the value is no
-- grant; handed the fence
-- of the waiter it went to, else 0.
local v = redis.call('GET', KEYS[1])
if not v then
  return {}
end
local pttl = redis.call('PTTL', KEYS[1])
local fence, since, _, line, tail = parse(v)

-- int64 reports whether the digits n fit an int64, as the client reads them.
local function int64(n)
  return #n < 19 or #n == 19 and n <= '9223372036854775807'
end

-- grant_like reports whether the parsed value is one that the client reads
-- as a grant (decodeGrant in inspect.go): List skips any other.
local function grant_like()
  local n, owner = string.match(tail or '', '^(%d+):(.*)$')
  return n and int64(fence) and int64(since) and tonumber(n) <= #owner
end
-- A value that is no grant is not a lock (another application wrote it
-- under the prefix): left as it is, whatever ARGV[1] says.
if not fence or not grant_like() or (ARGV[1] ~= '0' and fence ~= ARGV[1]) then
  return {v, pttl, 0, 0}
end
local f = free(line, ARGV[2], ARGV[3], ARGV[4])
if not f then
  redis.call(ARGV[2], KEYS[1] .. ':released', 'r')
end
return {v, pttl, 1, f or 0}
