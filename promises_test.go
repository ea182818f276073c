package distlock_test

import (
	"testing"
	"time"

	"github.com/distlock/distlock"
)

// The tests in this file pin documented promises that had no test of their
// own: each names the sentence it checks.

// TestDefaultTTLIsTheLease: README "Every hold has a TTL (WithTTL, default
// 10 s …)", design.md "Every hold is a lease (WithTTL, default 10 s)". A
// lock taken without WithTTL has a lease of DefaultTTL in Redis: its PTTL,
// read right after Lock, is at most DefaultTTL and at least DefaultTTL less
// the time from before the Lock call to after the PTTL read.
func TestDefaultTTLIsTheLease(t *testing.T) {
	if distlock.DefaultTTL != 10*time.Second {
		t.Fatalf("DefaultTTL is %v; README and design.md say 10 s", distlock.DefaultTTL)
	}
	c, rdb, _ := setup(t)
	ctx := ctxT(t, 10*time.Second)
	for _, key := range []string{"default-ttl", "default-ttl-fair"} {
		var opts []distlock.Option
		if key == "default-ttl-fair" {
			opts = append(opts, distlock.WithFair()) // the other acquire script
		}
		start := time.Now()
		l, err := c.Lock(ctx, key, opts...)
		if err != nil {
			t.Fatal(err)
		}
		pttl, err := rdb.PTTL(ctx, "distlock:{"+key+"}").Result()
		elapsed := time.Since(start)
		if err != nil {
			t.Fatal(err)
		}
		// The key was set with the lease at some instant within elapsed;
		// PTTL counts in whole milliseconds, hence the one of slack.
		if pttl > distlock.DefaultTTL || pttl < distlock.DefaultTTL-elapsed-time.Millisecond {
			t.Errorf("%s: PTTL %v right after Lock without WithTTL (%v after the call began); want within (%v-%v, %v]",
				key, pttl, elapsed, distlock.DefaultTTL, elapsed, distlock.DefaultTTL)
		}
		if d, err := l.TTL(ctx); err != nil || d > distlock.DefaultTTL || d < distlock.DefaultTTL-time.Since(start)-time.Millisecond {
			t.Errorf("%s: Lock.TTL %v, %v", key, d, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
