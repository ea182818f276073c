package distlock

import (
	"context"
	"testing"

	"github.com/distlock/distlock/internal/redistest"
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
		if err := releaseScript.plain.Run(ctx, rdb, keys, "tok", nowMillis()).Err(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLeanFencedPair is the floor of any fenced lock made of two
// scripts, for comparison with BenchmarkRawScriptPair and
// BenchmarkSetNXBaseline (see docs/design.md, what an operation costs).
func BenchmarkLeanFencedPair(b *testing.B) {
	rdb := redistest.Start(b).Client(b)
	ctx := context.Background()
	defer redistest.ReportServerMicros(b, rdb, "evalsha")()
	keys := []string{"distlock:{bench}", "distlock:fence"}
	for b.Loop() {
		if f, err := redistest.FloorAcquire.Run(ctx, rdb, keys, "tok", DefaultTTL.Milliseconds()).Int64(); err != nil || f == 0 {
			b.Fatal("lean acquire failed", f, err)
		}
		if n, err := redistest.FloorRelease.Run(ctx, rdb, keys[:1], "tok").Int64(); err != nil || n != 1 {
			b.Fatal("lean release failed", n, err)
		}
	}
}
