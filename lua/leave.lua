-- leave: a waiter in line gives up. Drops its list entry; if the lock was
-- handed to it meanwhile, frees the lock again for the next waiter.
-- KEYS[1..5] as in handoff.lua
-- ARGV[1] token
-- ARGV[2] notice      "PUBLISH <channel>" or "SPUBLISH <channel>"
-- ARGV[3] claim       first lease of a handed-off grant, in milliseconds
-- returns 1 if a grant to the leaver was passed on, else 0.
drop_waiter(ARGV[1])
if redis.call('HGET', KEYS[1], 'grant') == ARGV[1] then
  redis.call('DEL', KEYS[1])
  handoff(ARGV[2], tonumber(ARGV[3]))
  return 1
end
return 0
