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
-- and semaphores, see shared.lua); a semaphore's waiter follows the "s"
-- with its limit ("s3"), which a handoff records when none is; deadline
-- is when the waiter gives up,
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

-- grant formats a lock's value. A fence is formatted with %d: Lua's own
-- number format (%.14g) would print a clock-seeded fence (draw) as 1.7e+15.
local function grant(fence, since, holds, line, tail)
  return string.format('%d', fence) .. ' ' .. since .. ' ' .. holds .. ' ' .. line .. ' ' .. tail
end

-- draw takes the next fence from the counter KEYS[2]. A missing counter (a
-- restart without persistence, FLUSHALL, an eviction) starts again from the
-- server's clock in microseconds, not from 1: above every fence it gave
-- before, unless it gave more than one a microsecond or the clock went back,
-- so that resources keep refusing stale holders and accept new ones.
-- try_head.lua, which runs without this prelude, does the same inline.
local function draw()
  local fence = redis.call('INCR', KEYS[2])
  if fence == 1 then
    local t = redis.call('TIME')
    fence = t[1] * 1000000 + t[2]
    redis.call('SET', KEYS[2], string.format('%d', fence))
  end
  return fence
end

local skew_ms = 5

-- parse_entry returns token, client, ttl, mode, tail of a line entry, and
-- a semaphore waiter's limit ("" for other entries), or nil when its
-- waiter gave up by its deadline (now: the releaser's clock).
local function parse_entry(e, now)
  local token, client, ttl, mode, limit, deadline, tail = string.match(e, '^(%S+) (%S+) (%d+) (%a)(%d*) (%d+) (.*)$')
  if token and (deadline == '0' or tonumber(deadline) >= tonumber(now) + skew_ms) then
    return token, client, ttl, mode, tail, limit
  end
  return nil
end

-- clear_gone removes one line entry whose waiter is gone: the one before
-- pos, the caller's place, or for the line's head the last one. A waiter
-- killed outright leaves its entry, which handoffs skip but nothing else
-- removes while the lock stays held and live waiters keep the line. A
-- re-ask calls it, so each live waiter clears the dead entries ahead of
-- it, one a re-ask, and the head those behind the last live one. Gone:
-- its deadline passed (now: the caller's clock), or nobody hears its
-- Client's channel (a ping "p", which Clients ignore).
local function clear_gone(pos, entry, pub, now)
  local e = redis.call('LINDEX', KEYS[3], pos > 0 and pos - 1 or -1)
  if not e or e == entry then
    return
  end
  local client = string.match(e, '^%S+ (%S+) ')
  if not parse_entry(e, now) or redis.call(pub, KEYS[1] .. ':to:' .. client, 'p') == 0 then
    redis.call('LREM', KEYS[3], 1, e)
  end
end

-- line_up puts entry at the end of the line, unless a re-ask finds it
-- there already (and then drops any second copy of it, and clears a gone
-- waiter's entry near it: see clear_gone; pub and now as there). Either
-- way the line lives linettl
-- more: every waiter asks again at least every second, so a line lives
-- while any waiter does, however long the lock stays held. It returns true
-- when a re-ask did not find its entry: a handoff passed it over, as
-- nobody heard its client (see missed).
local function line_up(entry, again, linettl, pub, now)
  local at = again == '1' and redis.call('LPOS', KEYS[3], entry, 'COUNT', 0)
  if at and at[1] then
    if at[2] then
      -- A first join that the Redis client sent again after a lost answer
      -- pushed the entry twice: the copies after the first go.
      redis.call('LREM', KEYS[3], 1 - #at, entry)
    end
    clear_gone(at[1], entry, pub, now)
  else
    redis.call('RPUSH', KEYS[3], entry)
  end
  redis.call('PEXPIRE', KEYS[3], linettl)
  return again == '1' and not at[1]
end

-- offer draws a fence for a grant to token and tells the waiter's client;
-- returns the fence if someone heard it, else nil (the waiter is gone).
local function offer(pub, client, token, link)
  local fence = draw()
  local msg = 'g ' .. string.format('%d', fence) .. ' ' .. token
  if link and link ~= '' then
    msg = msg .. ' ' .. link
  end
  -- Not replicated: a replica would pass the notice on to a subscription
  -- left on it by a failover (a demoted master keeps its pub/sub clients),
  -- which this count does not see, and its waiter would take a grant that
  -- was never made.
  redis.set_repl(redis.REPL_NONE)
  local heard = redis.call(pub, KEYS[1] .. ':to:' .. client, msg)
  redis.set_repl(redis.REPL_ALL)
  if heard > 0 then
    return fence
  end
  return nil
end
