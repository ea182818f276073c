package distlock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock"
)

// TestRedisRestartedEmpty: the server is killed and comes back without its
// data while one Client holds a lock and another waits for it. Exclusion
// cannot survive that (README, deployment table), so what must hold is the
// rest: the waiter's broken subscription does not strand it, it takes the
// lock with a larger fence than the old holder's, the old holder is told of
// the loss at its next renewal, and its Release frees nothing of the new
// holder's. Nothing is left behind but the fence counter.
func TestRedisRestartedEmpty(t *testing.T) {
	const ttl = 3 * time.Second // renewal every second
	c, rdb, srv := setup(t)
	ctx := ctxT(t, 30*time.Second)
	old, err := c.TryLock(ctx, "restarted", distlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	w := distlock.New(srv.Client(t))
	defer w.Close()
	got := acquireAsync(ctx, w, "restarted", distlock.WithTTL(ttl))
	waitSubscribed(t, rdb, "restarted")

	restarted := time.Now()
	srv.Restart(t)
	// The waiter re-asks when its subscription comes back, and at the
	// latest on its one-second safety-net retry; a loaded machine gets
	// a few seconds more.
	next := recv(t, got, ttl+3*time.Second)
	t.Logf("waiter took the lock %v after the restart", next.at.Sub(restarted))
	if next.l.Fence() <= old.Fence() {
		t.Fatalf("fence %d after the restart, %d before: a resource would refuse the new holder", next.l.Fence(), old.Fence())
	}
	// The old holder's next renewal finds another grant, or none if it
	// ran before the waiter's: lost either way, within one renewal
	// interval of the restart (plus margin), before its lease would have run out.
	select {
	case <-old.Lost():
		t.Logf("old holder told %v after the restart: %v", time.Since(restarted), old.Err())
	case <-time.After(ttl - 500*time.Millisecond):
		t.Fatalf("old holder not told of the loss %v after the restart", time.Since(restarted))
	}
	if err := old.Err(); !errors.Is(err, distlock.ErrTaken) && !errors.Is(err, distlock.ErrExpired) {
		t.Fatalf("old holder's cause %v, want ErrTaken or ErrExpired", err)
	}
	if err := old.Release(ctx); !errors.Is(err, distlock.ErrNotHeld) {
		t.Fatalf("old holder's Release: %v, want ErrNotHeld", err)
	}
	info, err := w.Inspect(ctx, "restarted")
	if err != nil || !info.Held() || info.Fence != next.l.Fence() {
		t.Fatalf("after the old holder's Release: %+v, %v; want held with fence %d", info, err, next.l.Fence())
	}
	if err := next.l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if keys, err := rdb.Keys(ctx, "*").Result(); err != nil || len(keys) != 1 {
		t.Fatalf("keys left: %v, %v; want the fence counter alone", keys, err)
	}
}
