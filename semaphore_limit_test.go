package distlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock"
)

// TestSemaphoreLimitFixedAfterItWasForgottenUnderALine: primitives.md "N is
// fixed per name while the semaphore is in use: asking with another N
// returns ErrLimitMismatch"; semaphore.go "The limit is fixed per name while
// the semaphore is in use". A semaphore of 1 whose holder cut its lease
// short (Extend) forgets its limit while a waiter is in line (as when its
// holders die under a line). The next attempt hands the waiter a permit; it
// recorded no limit, so while that waiter held its permit of a semaphore of
// 1, a caller asking with 5 was granted a second permit, and recorded 5:
// callers with the right limit were then refused. (Found in review, h1
// Finding 1.)
func TestSemaphoreLimitFixedAfterItWasForgottenUnderALine(t *testing.T) {
	c, rdb, _ := setup(t)
	ctx := ctxT(t, 20*time.Second)
	wc := distlock.New(rdb)
	defer wc.Close()
	xc := distlock.New(rdb)
	defer xc.Close()
	one, _ := c.NewSemaphore("pool", 1)
	h, err := one.Acquire(ctx, distlock.WithTTL(10*time.Second), distlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	wone, _ := wc.NewSemaphore("pool", 1)
	got := make(chan lockResult, 1)
	go func() {
		l, err := wone.Acquire(ctx)
		got <- lockResult{l, err, time.Now()}
	}()
	waitFor(t, 10*time.Second, "the waiter to line up", func() bool {
		return rdb.LLen(ctx, "distlock:sem{pool}:line").Val() == 1
	})
	// Right after the waiter's own ask (it refreshes the line's TTL), so
	// that its next one, up to a second away, does not come in between.
	waitFor(t, 5*time.Second, "the waiter to ask again", func() bool {
		return rdb.PTTL(ctx, "distlock:sem{pool}:line").Val() > 29950*time.Millisecond
	})
	if err := h.Extend(ctx, 20*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	<-h.Lost()                       // its lease runs out
	time.Sleep(5 * time.Millisecond) // a clock wait: Lost fires the drift margin (2.2 ms) before Redis ends the lease
	five, _ := xc.NewSemaphore("pool", 5)
	p, perr := five.TryAcquire(ctx)
	if perr == nil {
		defer p.Release(context.Background())
	}
	// The waiter was first in line: it gets the permit, of a semaphore of 1.
	w := recv(t, got, 5*time.Second)
	defer w.l.Release(context.Background())
	if _, err := w.l.TTL(ctx); err != nil {
		t.Fatalf("the waiter's permit: %v", err)
	}
	if n := rdb.HGet(ctx, "distlock:sem{pool}:d", "!n").Val(); n != "1" {
		t.Errorf("limit recorded %q while the waiter holds its permit of the semaphore of 1, want \"1\"", n)
	}
	if perr == nil {
		t.Errorf("a caller with limit 5 holds a permit next to the waiter's permit of the semaphore of 1: %d permits held, limit recorded %q",
			rdb.ZCard(ctx, "distlock:sem{pool}:h").Val(), rdb.HGet(ctx, "distlock:sem{pool}:d", "!n").Val())
	} else if !errors.Is(perr, distlock.ErrNotObtained) && !errors.Is(perr, distlock.ErrLimitMismatch) {
		t.Fatalf("TryAcquire with limit 5: %v", perr)
	}
	// While the waiter holds its permit, the limit in use is 1.
	if p2, err := five.TryAcquire(ctx); err == nil {
		defer p2.Release(context.Background())
		t.Errorf("TryAcquire with limit 5 while a permit of the semaphore of 1 is held: granted; want ErrLimitMismatch")
	} else if !errors.Is(err, distlock.ErrLimitMismatch) {
		t.Errorf("TryAcquire with limit 5 while in use with 1: %v; want ErrLimitMismatch", err)
	}
	if _, err := wone.TryAcquire(ctx); errors.Is(err, distlock.ErrLimitMismatch) {
		t.Errorf("TryAcquire with the holder's own limit 1: %v; want ErrNotObtained", err)
	}
}
