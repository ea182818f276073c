package distlock

import (
	"context"
	"testing"

	"github.com/distlock/distlock/internal/redistest"
)

// BenchmarkRawScriptPair runs the acquire and release scripts straight
// through go-redis: the floor of a Lock+Release without the Go side.
func BenchmarkRawScriptPair(b *testing.B) {
	rdb := redistest.Start(b).Client(b)
	ctx := context.Background()
	keys := []string{"distlock:{bench}", "distlock:fence", "distlock:{bench}:line"}
	for b.Loop() {
		if err := acquireScript.Run(ctx, rdb, keys, "tok", DefaultTTL.Milliseconds(), "", defaultTail, nowMillis(), modeTry).Err(); err != nil {
			b.Fatal(err)
		}
		if err := releaseScript.Run(ctx, rdb, keys, "tok", "PUBLISH", nowMillis(), "", "0", 2000).Err(); err != nil {
			b.Fatal(err)
		}
	}
}
