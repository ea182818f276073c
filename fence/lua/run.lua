-- guard_run: run a caller's script body only for a fence not below the highest
-- fence its first key has seen. NewGuardedScript puts the caller's body in
-- front of this file as `local function guarded_body(KEYS, ARGV)`, so the
-- body sees only the caller's own KEYS and ARGV.
-- KEYS[1]  fence marker of KEYS[2] (same Cluster slot, never expires)
-- KEYS[2…] the caller's keys; KEYS[2] is the guarded resource
-- ARGV[1]  fence      positive decimal integer, no leading zeros
-- ARGV[2…] the caller's arguments
-- returns what the body returns; an error reply "STALEFENCE <highest>" when
-- the fence is stale (the body does not run). The marker advances only after
-- the body succeeded: a body that raises or returns an error leaves it.
local high = redis.call('GET', KEYS[1])
if high and (#ARGV[1] < #high or (#ARGV[1] == #high and ARGV[1] < high)) then
  return redis.error_reply('STALEFENCE ' .. high)
end
local keys, args = {}, {}
for i = 2, #KEYS do keys[i - 1] = KEYS[i] end
for i = 2, #ARGV do args[i - 1] = ARGV[i] end
local result = guarded_body(keys, args)
if type(result) == 'table' and result.err then
  return result
end
if high ~= ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1])
end
return result
