package distlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// An uncontended Lock+Release allocates at most this many times more than
// the floor pair (redistest.FloorAcquire and FloorRelease run with go-redis'
// Script.Run on the same client): the request with its token, names and
// grant, the WithTTL option, the Lock, and the boxing of the keys and
// arguments that the floor does not pass. Measured with go1.26 and go-redis
// v9.23: 5 (6 under -race), with or without a deadline on ctx, and for a
// Client that waited for another lock once (8 before its calls stopped
// building a line entry they do not send). A Release under a ctx without a
// deadline allocated 5 more for its own timer (context.WithTimeout) before
// it took a shared bound (bound.go). Before the scripts were called as
// EVALSHA commands built in one slice (script.command) the pair allocated
// 10 more, and 18 more before the acquire and release calls stopped
// allocating closures, the call its state, and the request its options and
// try arguments apart. The bound is the -race figure.
const maxExtraAllocs = 6

// TestLockReleaseAllocations keeps the allocations of an uncontended pair
// from creeping up: each is paid on every lock of the most common use (one
// lock per order or user, almost never contended). It counts against the
// floor measured in the same run, so that a go-redis upgrade that changes
// what a round trip allocates does not move the bound.
func TestLockReleaseAllocations(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	c := distlock.New(rdb)
	defer c.Close()
	// waited is a Client that waited for another lock once, so that it
	// keeps a subscription: its calls on free keys cost no more.
	waited := distlock.New(rdb)
	defer waited.Close()
	waitOnce(t, rdb, waited)
	withDeadline := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), time.Minute)
	}
	for _, tc := range []struct {
		name  string
		c     *distlock.Client
		ctx   func() (context.Context, context.CancelFunc)
		extra float64
	}{
		{"background", c, func() (context.Context, context.CancelFunc) { return context.Background(), func() {} }, maxExtraAllocs},
		{"deadline", c, withDeadline, maxExtraAllocs},
		{"deadline, after a wait on another key", waited, withDeadline, maxExtraAllocs},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.c
			ctx, cancel := tc.ctx()
			defer cancel()
			keys := []string{"alloc:floor", "alloc:fence"}
			var err error
			floor := testing.AllocsPerRun(200, func() {
				if err == nil {
					_, err = redistest.FloorAcquire.Run(ctx, rdb, keys, "tok", 10000).Int64()
				}
				if err == nil {
					_, err = redistest.FloorRelease.Run(ctx, rdb, keys[:1], "tok").Int64()
				}
			})
			pair := testing.AllocsPerRun(200, func() {
				var l *distlock.Lock
				if err == nil {
					l, err = c.Lock(ctx, "alloc:pair", distlock.WithTTL(10*time.Second))
				}
				if err == nil {
					err = l.Release(ctx)
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("allocations per pair: %.0f, floor %.0f", pair, floor)
			if pair-floor > tc.extra {
				t.Errorf("a Lock+Release allocates %.0f times, %.0f more than the floor pair's %.0f (at most %.0f more)",
					pair, pair-floor, floor, tc.extra)
			}
		})
	}
}

// waitOnce makes c wait for a lock another Client holds, until the
// release hands it over, and releases it.
func waitOnce(t *testing.T, rdb *redis.Client, c *distlock.Client) {
	t.Helper()
	ctx := ctxT(t, 10*time.Second)
	holder := distlock.New(rdb)
	defer holder.Close()
	held, err := holder.TryLock(ctx, "alloc:waited")
	must(t, err)
	got := acquireAsync(ctx, c, "alloc:waited")
	waitFor(t, 5*time.Second, "the waiter to line up", func() bool {
		return rdb.LLen(ctx, "distlock:{alloc:waited}:line").Val() == 1
	})
	must(t, held.Release(ctx))
	must(t, recv(t, got, 5*time.Second).l.Release(ctx))
}
