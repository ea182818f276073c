package distlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/distlock/distlock"
)

// The keys of shared holds (a read-write lock's readers, a semaphore's
// permits) live as long as the longest lease still held, not the longest
// ever given: once every lease has run out nothing is left in Redis, also
// when a hold with a longer lease was released before (or cut its lease
// short with Extend) and the last holder died. They lived on until the
// longest lease ever given would have ended, up to 24 h, a semaphore's
// limit with them.
func TestSharedKeysEndWithTheLastLease(t *testing.T) {
	c, rdb, _ := setup(t)
	ctx := ctxT(t, 30*time.Second)
	const long, short = time.Minute, 300 * time.Millisecond
	keysLeft := func(name string) func() []string {
		return func() []string { return rdb.Keys(ctx, "distlock:*{"+name+"}*").Val() }
	}
	// gone waits until the keys of name are gone, allowing a loaded machine
	// well over the short lease; long is far beyond that.
	gone := func(name string, died *distlock.Lock) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for ttl, err := died.TTL(ctx); err == nil && ttl > 0; ttl, err = died.TTL(ctx) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the short lease never ran out", name)
			}
			time.Sleep(ttl) // its lease, not a synchronisation: Redis ends it
		}
		for keys := keysLeft(name)(); len(keys) > 0; keys = keysLeft(name)() {
			if time.Now().After(deadline) {
				ttls := map[string]time.Duration{}
				for _, k := range keys {
					ttls[k] = rdb.PTTL(ctx, k).Val()
				}
				t.Fatalf("%s: every lease ran out, yet left in Redis: %v", name, ttls)
			}
			time.Sleep(10 * time.Millisecond) // Redis expires keys on its own clock
		}
	}
	type acquire func(context.Context, ...distlock.Option) (*distlock.Lock, error)
	sem, err := c.NewSemaphore("pool", 2)
	must(t, err)
	rw, err := c.NewRWMutex("catalog")
	must(t, err)
	for _, x := range []struct {
		name string
		take acquire
	}{{"pool", sem.Acquire}, {"catalog", rw.RLock}} {
		// A long hold released, then a short one whose holder died.
		l, err := x.take(ctx, distlock.WithTTL(long))
		must(t, err)
		s, err := x.take(ctx, distlock.WithTTL(short), distlock.WithoutRenewal())
		must(t, err)
		must(t, l.Release(ctx))
		gone(x.name, s)

		// A long hold cut short by Extend, whose holder died.
		l, err = x.take(ctx, distlock.WithTTL(long), distlock.WithoutRenewal())
		must(t, err)
		must(t, l.Extend(ctx, short))
		gone(x.name, l)
	}
}
