package distlock_test

import (
	"context"
	"testing"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// BenchmarkLockRelease measures an uncontended Lock+Release against the
// harness's redis-server; BenchmarkSetNXBaseline the plain SET NX PX plus
// Lua compare-and-delete recipe on the same kind of server, for the ratio.
// Each reports server-µs/op, the time Redis spent executing the pair's
// commands (INFO commandstats; a script's time includes its commands).
func BenchmarkLockRelease(b *testing.B) {
	rdb := redistest.Start(b).Client(b)
	c := distlock.New(rdb)
	defer c.Close()
	defer redistest.ReportServerMicros(b, rdb, "evalsha")()
	lockReleasePairs(b, c)
}

// BenchmarkLockReleaseObserved is BenchmarkLockRelease with an Observer
// that does nothing: the cost of the observation seam itself. Without an
// Observer (BenchmarkLockRelease) the seam allocates nothing.
func BenchmarkLockReleaseObserved(b *testing.B) {
	c := distlock.New(redistest.Start(b).Client(b), distlock.WithObserver(nopObserver{}))
	defer c.Close()
	lockReleasePairs(b, c)
}

// lockReleasePairs runs b's Lock+Release pairs of one free key on c.
func lockReleasePairs(b *testing.B, c *distlock.Client) {
	ctx := context.Background()
	for b.Loop() {
		l, err := c.Lock(ctx, "bench")
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

type nopObserver struct{}

func (nopObserver) Start(ctx context.Context, _ distlock.EventKind, _ string) context.Context {
	return ctx
}
func (nopObserver) Observe(context.Context, distlock.Event) {}
func (nopObserver) Link(context.Context) string             { return "" }

var casDelete = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

func BenchmarkSetNXBaseline(b *testing.B) {
	rdb := redistest.Start(b).Client(b)
	ctx := context.Background()
	defer redistest.ReportServerMicros(b, rdb, "set", "evalsha")()
	for b.Loop() {
		if ok, err := rdb.SetNX(ctx, "bench", "token", distlock.DefaultTTL).Result(); err != nil || !ok {
			b.Fatal("SET NX failed", err)
		}
		if err := casDelete.Run(ctx, rdb, []string{"bench"}, "token").Err(); err != nil {
			b.Fatal(err)
		}
	}
}
