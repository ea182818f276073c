-- holds: the prelude (after lib.lua) of the scripts of an exclusive lock
-- (a mutex or an election): its holds, reentrancy, and how a freed lock
-- goes to the next waiter. KEYS as in lib.lua.

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
-- ({1, fence, holds}), held by token already ({1, fence, 1, lease left in
-- ms}: a handoff's short first lease, or, for an attempt that the Redis
-- client sent again after a lost answer, the caller's own grant), or not
-- obtained (nil, and the lock's line flag). ttl is the attempt's lease, ms.
local function held(v, token, owner, ttl)
  local fence, s, holds, line, t = parse(v)
  if holds == token then
    return {1, tonumber(fence), 1, redis.call('PTTL', KEYS[1])}
  end
  if owner ~= '' and owner_of(t) == owner then
    if holds_token(holds, token) then
      -- its own reentry, sent again by the Redis client after a lost answer
      return {1, tonumber(fence), count_holds(holds)}
    end
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
