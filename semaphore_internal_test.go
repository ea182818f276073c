package distlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock/internal/redistest"
)

// A caller refused for asking a semaphore with another limit leaves
// through the release script (abandon), in the background. It must not
// hand out permits by its own limit: with 2 of 2 permits held and a waiter
// in line, a leaving caller of limit 3 gave the waiter a third permit (a
// make test run caught it as the waiter never lining up). Nor may it when
// the semaphore's limit is forgotten (its keys expired under a line whose
// holders died): permits then go by the limit the waiters carry in their
// line entries, which the first grant records.
func TestSemaphoreReleaseHandsByTheLimitInUse(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	c := New(rdb)
	defer c.Close()
	ctx := ctxFor(t, 20*time.Second)
	two, err := c.NewSemaphore("pool", 2)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := two.Acquire(ctx); err != nil {
			t.Fatal(err)
		}
	}
	names := c.names(permitKind, "pool")
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	got := make(chan error, 3)
	for i := range 3 {
		wc := New(srv.Client(t))
		defer wc.Close()
		s, _ := wc.NewSemaphore("pool", 2)
		go func() {
			_, err := s.Acquire(wctx)
			got <- err
		}()
		poll(t, 5*time.Second, "a waiter to line up", func() bool { return rdb.LLen(ctx, names.line).Val() == int64(i+1) })
	}

	leave := func(limit string) []int64 {
		t.Helper()
		h := hold{kind: permitKind, names: names, token: "refused", releaseArg: limit}
		res, err := int64s(runRelease(ctx, rdb, h, publishArg, "", false), nil)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := leave("3"); len(res) != 1 || res[0] != -1 {
		t.Fatalf("release by a caller of limit 3, holding nothing: %v, want [-1] (nothing handed)", res)
	}
	if n := rdb.ZCard(ctx, names.lock+":h").Val(); n != 2 {
		t.Fatalf("%d permits held of 2 after a limit-3 caller left", n)
	}

	// The limit forgotten under the line: permits are handed by the
	// waiters' limit, which the first grant records (2, 2 permits), not by
	// the leaving caller's (3 here, for waiters of 2).
	if err := rdb.Del(ctx, names.lock+":h", names.lock+":d").Err(); err != nil {
		t.Fatal(err)
	}
	leave("3")
	if n := rdb.ZCard(ctx, names.lock+":h").Val(); n != 2 {
		t.Fatalf("%d permits handed while the limit was unknown, want 2 (the waiters' limit)", n)
	}
	if n := rdb.HGet(ctx, names.lock+":d", "!n").Val(); n != "2" {
		t.Fatalf("limit %q recorded by the handoff, want the waiters' 2", n)
	}
	for range 2 {
		select {
		case err := <-got:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the first two waiters did not get the permits handed to them within 5s")
		}
	}
	cancel()
}

// A caller of another limit that asks while the semaphore's limit is
// forgotten under a line is refused, and leaves no entry in the line: it
// lined up and waited on for a permit, which a release would then have
// handed it, with ErrLimitMismatch never said. Its ask hands the waiters
// ahead their permits by their own limit, which it is then held to.
func TestSemaphoreLimitLearnedWhileWaiting(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	c := New(rdb)
	defer c.Close()
	ctx := ctxFor(t, 20*time.Second)
	two, _ := c.NewSemaphore("pool", 2)
	for range 2 {
		if _, err := two.Acquire(ctx, WithTTL(30*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	names := c.names(permitKind, "pool")
	got := make(chan error, 2)
	for i := range 2 {
		wc := New(srv.Client(t))
		defer wc.Close()
		s, _ := wc.NewSemaphore("pool", 2)
		go func() { _, err := s.Acquire(ctx); got <- err }()
		poll(t, 5*time.Second, "a waiter to line up", func() bool { return rdb.LLen(ctx, names.line).Val() == int64(i+1) })
	}
	// Every holder died and their keys ran out; the waiters' line lives on.
	rdb.Del(ctx, names.lock+":h", names.lock+":d")
	xc := New(srv.Client(t))
	defer xc.Close()
	five, _ := xc.NewSemaphore("pool", 5)
	refused := make(chan error, 1)
	go func() { _, err := five.Acquire(ctx); refused <- err }()
	// The waiters take a permit each, by and recording their limit 2.
	for range 2 {
		if err := <-got; err != nil {
			t.Fatal(err)
		}
	}
	if n := rdb.HGet(ctx, names.lock+":d", "!n").Val(); n != "2" {
		t.Fatalf("limit %q recorded, want 2", n)
	}
	select { // it asks again at least every second
	case err := <-refused:
		if !errors.Is(err, ErrLimitMismatch) {
			t.Fatalf("Acquire with limit 5 of a semaphore of 2: %v, want ErrLimitMismatch", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("Acquire with limit 5 of a semaphore of 2 waits on")
	}
	poll(t, 2*time.Second, "the refused caller to leave the line", func() bool { return rdb.LLen(ctx, names.line).Val() == 0 })
}

// A semaphore's limit is its holders': once every permit's lease has run
// out, another limit is taken although the keys live on (a holder with a
// longer lease released; the last one died). sem_acquire.lua read the
// recorded limit before it dropped the expired holds, and refused with
// ErrLimitMismatch for as long as the keys lived (up to MaxTTL).
func TestSemaphoreLimitForgottenWhenTheLastLeaseEnds(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	c := New(rdb)
	defer c.Close()
	ctx := ctxFor(t, 20*time.Second)
	two, _ := c.NewSemaphore("pool", 2)
	long, err := two.Acquire(ctx, WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	short, err := two.Acquire(ctx, WithTTL(200*time.Millisecond), WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	if err := long.Release(ctx); err != nil {
		t.Fatal(err)
	}
	poll(t, 5*time.Second, "the short permit's lease to run out", func() bool {
		// Redis's lease, not TTL's answer: TTL says ErrNotHeld as soon as
		// the permit is known lost, a drift before Redis drops it.
		ttl, err := c.b.pttl(ctx, short)
		return err != nil || ttl <= 0
	})
	five, _ := c.NewSemaphore("pool", 5)
	p, err := five.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("no permit of pool is held, yet TryAcquire with another limit: %v (keys %v)", err, rdb.Keys(ctx, "distlock:sem*").Val())
	}
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if keys := rdb.Keys(ctx, "distlock:sem*").Val(); len(keys) != 0 {
		t.Fatalf("keys left after the last release: %v", keys)
	}
}
