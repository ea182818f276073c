package redistest

import "github.com/redis/go-redis/v9"

// FloorAcquire and FloorRelease are the leanest lock that mints a fence
// inside its acquire script: the floor that the Lock+Release benchmarks and
// `make bench` compare distlock with (see docs/design.md, what an operation
// costs). FloorAcquire bumps the counter KEYS[2] and sets KEYS[1] to
// "<fence> <ARGV[1] token>" NX with a lease of ARGV[2] ms, answering the
// fence or 0; FloorRelease deletes KEYS[1] if token ARGV[1] holds it,
// answering 1 or 0. No reentrancy, metadata or waiting line.
var (
	FloorAcquire = redis.NewScript(`local f = redis.call('INCR', KEYS[2])
if redis.call('SET', KEYS[1], f .. ' ' .. ARGV[1], 'NX', 'PX', ARGV[2]) then return f end
return 0`)
	FloorRelease = redis.NewScript(`local v = redis.call('GET', KEYS[1])
if v and string.sub(v, -#ARGV[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`)
)
