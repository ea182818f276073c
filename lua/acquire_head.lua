-- acquire, first part: a try on a free lock, the common case, runs before
-- lib.lua, whose function definitions cost every call that reaches them.
-- KEYS and ARGV as in acquire.lua; tried is the value a try found.
local tried
if ARGV[6] == 't' then
  -- A fence drawn for an attempt that fails is skipped: fences only need
  -- to increase.
  local fence = redis.call('INCR', KEYS[2])
  tried = redis.call('SET', KEYS[1], fence .. ' ' .. ARGV[5] .. ' ' .. ARGV[1] .. ' 0 ' .. ARGV[4], 'NX', 'GET', 'PX', ARGV[2])
  if not tried then
    if ARGV[12] == '1' then
      redis.call(ARGV[9], KEYS[1] .. ':released', 'a')
    end
    return {1, fence, 1}
  end
end
