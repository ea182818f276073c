-- lib: the prelude of the scripts that read or write a lock. Every script
-- that includes it takes KEYS[1] lock, KEYS[2] fence counter, KEYS[3] line.
--
-- A lock is one string, with the lease as its TTL:
--   "<fence> <since> <holds> <line> <ownerlen>:<owner><meta>"
-- fence    fencing token of the grant
-- since    grant time, unix ms by the clock of the client that made it
-- holds    comma-separated tokens, one per hold (several only when reentrant)
-- line     "1" when waiters may be in line: a release then looks for one
-- owner    the WithOwner id ("" when not reentrant)
-- The part from <ownerlen> on is the grant's "tail" and is stored as given.
--
-- The line is a list of entries
--   "<token> <client id> <ttl ms> <mode> <deadline> <tail>"
-- mode "x" for an exclusive hold, "s" for a shared one (read-write locks
-- and semaphores, see shared.lua); deadline is when the waiter gives up,
-- unix ms by its own clock, "0" for never. A handoff skips a waiter whose
-- deadline is less than skew_ms after the releaser's clock (it would give
-- up before the grant reached it) and one that is gone. A handoff publishes "g <fence> <token>" on the lock's channel for that
-- client, "<lock>:to:<client id>" (followed by " <link>" when the
-- release carried a trace link); PUBLISH (SPUBLISH on a Cluster) returns
-- how many connections heard it, and an entry nobody hears belongs to a
-- client that is gone: it is skipped.

local function parse(v)
  return string.match(v, '^(%d+) (%d+) (%S+) ([01]) (.*)$')
end

local function grant(fence, since, holds, line, tail)
  return fence .. ' ' .. since .. ' ' .. holds .. ' ' .. line .. ' ' .. tail
end

local function owner_of(tail)
  local n, rest = string.match(tail, '^(%d+):(.*)$')
  return string.sub(rest, 1, tonumber(n))
end

local function holds_token(holds, token)
  return holds == token or
    string.find(',' .. holds .. ',', ',' .. token .. ',', 1, true) ~= nil
end

-- drop_hold returns holds without token, or nil if token is not a hold.
local function drop_hold(holds, token)
  local s = ',' .. holds .. ','
  local i = string.find(s, ',' .. token .. ',', 1, true)
  if not i then
    return nil
  end
  return string.sub(string.sub(s, 1, i) .. string.sub(s, i + #token + 2), 2, -2)
end

local function count_holds(holds)
  local _, commas = string.gsub(holds, ',', '')
  return commas + 1
end

-- held answers the attempt of token (owner: its WithOwner id, or "") on a
-- lock held now, whose value is v: the lock is taken again by its owner
-- ({1, fence, holds}), held by token already ({1, fence, 1, 1}), or not
-- obtained (nil, and the lock's line flag). ttl is the attempt's lease, ms.
local function held(v, token, owner, ttl)
  local fence, s, holds, line, t = parse(v)
  if holds == token then
    return {1, tonumber(fence), 1, 1}
  end
  if owner ~= '' and owner_of(t) == owner then
    holds = holds .. ',' .. token
    redis.call('SET', KEYS[1], grant(fence, s, holds, line, t), 'KEEPTTL')
    if redis.call('PTTL', KEYS[1]) < tonumber(ttl) then
      redis.call('PEXPIRE', KEYS[1], ttl)
    end
    return {1, tonumber(fence), count_holds(holds)}
  end
  return nil, line
end

-- handoff grants the free lock to the first waiter in line that is still
-- listening; since is the granting client's clock. The grant's first lease
-- is at most claim ms: a waiter that stopped listening without its
-- connection closing (a frozen process) blocks the lock only that long; a
-- live one extends it to its TTL if it holds the lock that long. Returns
-- fence, token, or nil when nobody is waiting.
local skew_ms = 5

-- parse_entry returns token, client, ttl, mode, tail of a line entry, or
-- nil when its waiter gave up by its deadline (now: the releaser's clock).
local function parse_entry(e, now)
  local token, client, ttl, mode, deadline, tail = string.match(e, '^(%S+) (%S+) (%d+) (%a) (%d+) (.*)$')
  if token and (deadline == '0' or tonumber(deadline) >= tonumber(now) + skew_ms) then
    return token, client, ttl, mode, tail
  end
  return nil
end

-- offer draws a fence for a grant to token and tells the waiter's client;
-- returns the fence if someone heard it, else nil (the waiter is gone).
local function offer(pub, client, token, link)
  local fence = redis.call('INCR', KEYS[2])
  local msg = 'g ' .. fence .. ' ' .. token
  if link and link ~= '' then
    msg = msg .. ' ' .. link
  end
  if redis.call(pub, KEYS[1] .. ':to:' .. client, msg) > 0 then
    return fence
  end
  return nil
end

local function handoff(pub, since, claim, link)
  while true do
    local e = redis.call('LPOP', KEYS[3])
    if not e then
      return nil
    end
    local token, client, ttl, _, tail = parse_entry(e, since)
    local fence = token and offer(pub, client, token, link)
    if fence then
      redis.call('SET', KEYS[1], grant(fence, since, token, '1', tail), 'PX',
        math.min(tonumber(ttl), tonumber(claim)))
      return fence, token
    end
  end
end

-- free frees the lock whose line flag is line: it goes to the next waiter,
-- or is deleted. Returns fence, token on a handoff.
local function free(line, pub, since, claim, link)
  if line == '1' then
    local fence, token = handoff(pub, since, claim, link)
    if fence then
      return fence, token
    end
  end
  redis.call('DEL', KEYS[1])
  return nil
end
