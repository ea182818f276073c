-- handoff: shared prelude of the scripts that free a lock. It grants the
-- free lock KEYS[1] to the first live waiter in line, skipping entries whose
-- deadline passed (dead or gone waiters), and announces the result.
-- Expects KEYS[1] lock hash, KEYS[2] fence counter, KEYS[3] waiter list,
-- KEYS[4] waiter deadlines (zset), KEYS[5] waiter arguments (hash).
-- A waiter's arguments are "<ttl ms> <owner length> <inbox length> <owner>
-- <inbox><meta>", where inbox is the notice argument of the waiter's own
-- channel: a handoff is published there as "g <fence> <token>", so that only
-- the grantee's connection hears it. Else "r" (the lock is free) goes to the
-- lock's shared channel.
-- Returns {fence, token} on a handoff, else nil.
-- The scripts' notice argument is "PUBLISH <channel>", or on Redis Cluster
-- "SPUBLISH <channel>" (sharded pub/sub: the channel has the lock's hash
-- tag, so the message stays on the lock's shard).
local function now_ms()
  local t = redis.call('TIME')
  return t[1] * 1000 + math.floor(t[2] / 1000)
end

local function drop_waiter(token)
  redis.call('LREM', KEYS[3], 1, token)
  redis.call('ZREM', KEYS[4], token)
  redis.call('HDEL', KEYS[5], token)
end

local function notify(notice, msg)
  local cmd, channel = string.match(notice, '^(%u+) (.*)$')
  redis.call(cmd, channel, msg)
end

local function handoff(notice, claim_ms)
  local now
  while true do
    local head = redis.call('LINDEX', KEYS[3], 0)
    if not head then
      break
    end
    now = now or now_ms()
    local deadline = tonumber(redis.call('ZSCORE', KEYS[4], head))
    local args = redis.call('HGET', KEYS[5], head)
    drop_waiter(head)
    if deadline and deadline >= now and args then
      local ttl, olen, ilen, rest = string.match(args, '^(%d+) (%d+) (%d+) (.*)$')
      olen, ilen = tonumber(olen), tonumber(ilen)
      local owner = string.sub(rest, 1, olen)
      local inbox = string.sub(rest, olen + 1, olen + ilen)
      local meta = string.sub(rest, olen + ilen + 1)
      local fence = redis.call('INCR', KEYS[2])
      redis.call('HSET', KEYS[1], 'owner', owner, 'count', 1, 'fence', fence,
        'meta', meta, 'since', now, 'grant', head)
      -- A short first lease: a grantee that died while waiting frees the
      -- lock soon; a live one extends it to its TTL at once.
      redis.call('PEXPIRE', KEYS[1], math.min(tonumber(ttl), claim_ms))
      notify(inbox, 'g ' .. fence .. ' ' .. head)
      return {fence, head}
    end
  end
  notify(notice, 'r')
  return nil
end
