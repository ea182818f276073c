package distlock

import (
	"context"
	"testing"

	"github.com/distlock/distlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// BenchmarkRawScriptPair runs the acquire and release scripts straight
// through go-redis: the floor of a Lock+Release without the Go side. Its
// server-µs/op is the time Redis spent running the two scripts.
func BenchmarkRawScriptPair(b *testing.B) {
	rdb := redistest.Start(b).Client(b)
	ctx := context.Background()
	defer redistest.ReportServerMicros(b, rdb, "evalsha")()
	keys := []string{"distlock:{bench}", "distlock:fence", "distlock:{bench}:line"}
	for b.Loop() {
		if err := tryScript.Run(ctx, rdb, keys[:2], tryGrant("tok", defaultTail), DefaultTTL.Milliseconds()).Err(); err != nil {
			b.Fatal(err)
		}
		if err := releaseScript.Run(ctx, rdb, keys, "tok", "PUBLISH", nowMillis(), 2000).Err(); err != nil {
			b.Fatal(err)
		}
	}
}

// Scripts of the leanest fenced lock: a fence from a shared counter and SET
// NX PX; a compare-and-delete. No reentrancy, metadata or waiting line.
var (
	leanAcquire = redis.NewScript(`local f = redis.call('INCR', KEYS[2])
if redis.call('SET', KEYS[1], f .. ' ' .. ARGV[1], 'NX', 'PX', ARGV[2]) then return f end
return 0`)
	leanRelease = redis.NewScript(`local v = redis.call('GET', KEYS[1])
if v and string.sub(v, -#ARGV[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`)
)

// BenchmarkLeanFencedPair is the floor of any fenced lock made of two
// scripts, for comparison with BenchmarkRawScriptPair and
// BenchmarkSetNXBaseline (see docs/design.md, what an operation costs).
func BenchmarkLeanFencedPair(b *testing.B) {
	rdb := redistest.Start(b).Client(b)
	ctx := context.Background()
	defer redistest.ReportServerMicros(b, rdb, "evalsha")()
	keys := []string{"distlock:{bench}", "distlock:fence"}
	for b.Loop() {
		if f, err := leanAcquire.Run(ctx, rdb, keys, "tok", DefaultTTL.Milliseconds()).Int64(); err != nil || f == 0 {
			b.Fatal("lean acquire failed", f, err)
		}
		if n, err := leanRelease.Run(ctx, rdb, keys[:1], "tok").Int64(); err != nil || n != 1 {
			b.Fatal("lean release failed", n, err)
		}
	}
}
