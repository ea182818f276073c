-- shared: the prelude (after lib.lua) of the scripts of read-write locks and
-- semaphores, whose holds may be shared: readers, permits.
-- KEYS[1] exclusive grant (a writer; never set for a semaphore)
-- KEYS[2] fence counter
-- KEYS[3] line (entries with mode "x" for writers, "s" for shared holds,
--         "s<N>" for a semaphore's waiter of limit N: see lib.lua)
-- KEYS[4] shared holds: zset token -> lease end, server ms
-- KEYS[5] their grants: hash token -> grant as in lib.lua; on a semaphore
--         field "!n" is its limit
-- The acquire scripts (rw_acquire.lua, sem_acquire.lua) take
-- ARGV[1] token   this call
-- ARGV[2] ttl     lease in ms
-- ARGV[3] tail    "<#owner>:<owner><meta>" (no owner: shared holds are not
--                 reentrant)
-- ARGV[4] since   the caller's clock, unix ms
-- ARGV[5] pub     "PUBLISH" or "SPUBLISH", for handoffs to waiters ahead
-- ARGV[6] claim   first lease of such a handoff, ms
-- ARGV[7]         the script's own: a read-write lock's want, a
--                 semaphore's limit
-- and, passed together or not at all (a try, the common case, passes none:
-- Redis and the client pay for every argument):
-- ARGV[8] mode    "j" (or "f"): join the line if not granted; "t" if absent
-- ARGV[9] entry   the caller's line entry
-- ARGV[10] again  "1" when the caller may be in line already (a re-ask)
-- ARGV[11] linettl how long the line lives without a re-ask, ms
--
-- A shared hold has its own lease, the score in KEYS[4]: a holder that dies
-- frees its share when that runs out. Expired holds are dropped by every
-- script before it counts.

-- shared_args returns token, ttl, tail, since, ARGV[7], mode, entry, again.
local function shared_args()
  return ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4], ARGV[7], ARGV[8] or 't', ARGV[9] or '', ARGV[10] or '0'
end

local function now_ms()
  local t = redis.call('TIME')
  return t[1] * 1000 + math.floor(t[2] / 1000)
end

-- prune drops the shared holds whose lease ran out; returns how many are
-- left. With none (the uncontended case) it costs one command.
local function prune(now)
  local n = redis.call('ZCARD', KEYS[4])
  if n == 0 then
    return 0
  end
  local gone = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now)
  if #gone > 0 then
    redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
    -- in slices: Lua's unpack fails past about 8,000 values, and thousands
    -- of holds can run out together
    for i = 1, #gone, 1000 do
      redis.call('HDEL', KEYS[5], unpack(gone, i, math.min(i + 999, #gone)))
    end
  end
  return n - #gone
end

-- keep makes key live for at least ms more.
local function keep(key, ms)
  if redis.call('PTTL', key) < tonumber(ms) then
    redis.call('PEXPIRE', key, ms)
  end
end

-- fit makes the keys of the shared holds live until the last lease in
-- them ends, no longer: a hold released or cut short must not keep them
-- (and a semaphore's limit) in Redis after every lease still held has run
-- out. keep only ever lengthens them.
local function fit()
  local last = redis.call('ZRANGE', KEYS[4], -1, -1, 'WITHSCORES')
  if last[2] then
    redis.call('PEXPIREAT', KEYS[4], last[2])
    redis.call('PEXPIREAT', KEYS[5], last[2])
  end
end

-- hold_shared records a shared hold; held is how many live ones there were
-- (0: no other lease to keep, so the keys take this one's). Any further
-- arguments are more field-value pairs for the holds' hash, set by the
-- same command.
local function hold_shared(token, lease, value, now, held, ...)
  redis.call('ZADD', KEYS[4], now + lease, token)
  redis.call('HSET', KEYS[5], token, value, ...)
  if held == 0 then
    redis.call('PEXPIRE', KEYS[4], lease)
    redis.call('PEXPIRE', KEYS[5], lease)
    return
  end
  keep(KEYS[4], lease)
  keep(KEYS[5], lease)
end

-- shared_fence returns the fence of token's shared hold, or nil.
local function shared_fence(token)
  local v = redis.call('HGET', KEYS[5], token)
  return v and tonumber(string.match(v, '^(%d+)'))
end

-- handoff_shared grants, in line order, what is free: shared holds while
-- room lasts, and an exclusive hold only when nothing at all is held (held
-- == 0, and nothing granted in this call). It stops at the first waiter it
-- cannot serve, so nobody is overtaken. Returns the number of grants.
-- room may be a function that returns it, called only when a waiter is in
-- line: a release with nobody waiting then skips what room costs. A
-- semaphore with no limit recorded ("!n": its keys expired under a line
-- whose holders died, or every lease ran out) has room false: the first
-- waiter served brings its own limit, from its entry (see lib.lua), and its
-- grant records it; the waiters after it are served by that limit.
local function handoff_shared(pub, since, claim, link, room, held)
  local now, granted = nil, 0
  while true do
    local e = redis.call('LINDEX', KEYS[3], 0)
    if not e then
      break
    end
    if type(room) == 'function' then
      room = room()
    end
    local token, client, ttl, mode, tail, limit = parse_entry(e, since)
    local free, record = room, nil
    if not room then
      -- (an entry without a limit, of an older client: one permit at most,
      -- recording none)
      record = limit ~= '' and limit or nil
      free = tonumber(record or 1) - held
    end
    if mode == 'x' and (held > 0 or granted > 0) then
      -- A writer that cannot be served yet stops the line, unless nobody
      -- hears its client (a ping "p"): gone, it would stop the line until
      -- the line expired, for readers and tries alike. It is dropped, as a
      -- handoff drops a waiter nobody hears.
      if redis.call(pub, KEYS[1] .. ':to:' .. client, 'p') > 0 then
        break
      end
      token = nil
    elseif mode ~= 'x' and free <= 0 then
      break
    end
    redis.call('LPOP', KEYS[3])
    if token and (redis.call('HEXISTS', KEYS[5], token) == 1 or (mode == 'x' and
        string.find(redis.call('GET', KEYS[1]) or '', ' ' .. token .. ' ', 1, true))) then
      token = nil -- a copy of a holder's entry (a retried join's): it holds
    end
    local fence = token and offer(pub, client, token, link)
    if fence then
      local lease = math.min(tonumber(ttl), tonumber(claim))
      local value = grant(fence, since, token, '1', tail)
      if mode == 'x' then
        redis.call('SET', KEYS[1], value, 'PX', lease)
        return granted + 1
      end
      now = now or now_ms()
      if record then
        hold_shared(token, lease, value, now, held, '!n', record)
      else
        hold_shared(token, lease, value, now, held)
      end
      granted, room, held = granted + 1, free - 1, held + 1
    end
  end
  return granted
end

-- blocker_ttl is how long the caller may have to wait at most before
-- something changes: the exclusive holder's lease, or the first shared
-- lease to end; -1 when unknown.
local function blocker_ttl(now)
  local pttl = redis.call('PTTL', KEYS[1])
  if pttl >= 0 then
    return pttl
  end
  local first = redis.call('ZRANGE', KEYS[4], 0, 0, 'WITHSCORES')
  if first[2] then
    return math.max(tonumber(first[2]) - now, 0)
  end
  return -1
end

-- own returns the fence of the hold token has, exclusive or shared, or nil.
local function own(token)
  local ex = redis.call('GET', KEYS[1])
  if ex then
    local fence, _, holds = parse(ex)
    return holds == token and tonumber(fence) or nil
  end
  return shared_fence(token)
end

-- serve_ahead hands what is free to the waiters ahead of entry (their last
-- holder may have died, so no release will), skipping waiters that are
-- gone. room is what a semaphore has free (huge for a read-write lock).
-- Returns the head of the line after that, and the shared holds.
local function serve_ahead(entry, since, pub, claim, room, held)
  local head = redis.call('LINDEX', KEYS[3], 0)
  if head and head ~= entry and redis.call('EXISTS', KEYS[1]) == 0 then
    -- The handoff may pop waiters that are gone without granting anything.
    if handoff_shared(pub, since, claim, '', room, held) > 0 then
      held = redis.call('ZCARD', KEYS[4])
    end
    return redis.call('LINDEX', KEYS[3], 0), held
  end
  return head, held
end
