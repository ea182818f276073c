package distlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock"
)

// Observe: "a leader whose lease ran out is noticed when the lease ends".
// The observer sets its timer from the lease it read. A leader that then
// cuts its lease short with Extend (Extend "resets the lease to ttl from
// now") and dies has a lease that ends long before that timer: nothing is
// published when a lease is shortened, so "nobody leads" comes at the end
// of the old lease, not the new one.
func TestObserveNoticesLeaseEndAfterShorteningExtend(t *testing.T) {
	const long, short = 10 * time.Second, time.Second
	c, _, srv := setup(t)
	ctx := ctxT(t, 30*time.Second)
	e, err := c.NewElection("observe-shortened")
	must(t, err)
	seen := e.Observe(ctx)
	if l := nextLeader(t, seen, 5*time.Second); l.Elected() {
		t.Fatalf("first report %+v, want no leader", l)
	}
	leader := distlock.New(srv.Client(t))
	t.Cleanup(func() { leader.Close() })
	le, err := leader.NewElection("observe-shortened")
	must(t, err)
	lead, err := le.Campaign(ctx, "a", distlock.WithTTL(long))
	must(t, err)
	if l := nextLeader(t, seen, 5*time.Second); l.Fence != lead.Fence() {
		t.Fatalf("report %+v, want the leader of term %d", l, lead.Fence())
	}
	must(t, lead.Extend(ctx, short))
	leader.Close() // the leader dies: its lease of `short` runs out
	waitFor(t, 2*short, "the leader's lease to run out", func() bool {
		_, err := e.Leader(ctx)
		return errors.Is(err, distlock.ErrNoLeader)
	})
	ended := time.Now()
	select {
	case l := <-seen:
		if l.Elected() {
			t.Fatalf("report %+v, want no leader", l)
		}
		if d := time.Since(ended); d > short/2 {
			t.Fatalf("\"nobody leads\" reported %v after the lease ran out", d.Round(time.Millisecond))
		}
	case <-time.After(short):
		t.Fatalf("no \"nobody leads\" within %v of the end of the leader's lease (cut to %v by Extend; %v before)",
			short, short, long)
	}
}

// MultiLock.Context: "cancelled when any lock is lost"; Lock.Context's
// contexts are done by the time Lost is closed (TestContextsDoneByTheTime
// LostCloses), so that a goroutine woken by Lost finds its work's context
// done. The set's Lost is closed by one context.AfterFunc goroutine and
// its Context cancelled by another: a goroutine woken by the set's Lost
// finds the set's contexts still live.
func TestMultiContextsDoneByTheTimeLostCloses(t *testing.T) {
	c, rdb, _ := setup(t)
	ctx := ctxT(t, 30*time.Second)
	const rounds, perRound = 20, 50
	live := 0
	for i := range rounds {
		m, err := c.LockAll(ctx, []string{"a", "b"}, distlock.WithTTL(5*time.Second))
		must(t, err)
		var works []context.Context
		for range perRound {
			w, stop := m.Context(ctx)
			defer stop()
			works = append(works, w)
		}
		rdb.Del(ctx, "distlock:{b}")
		if err := m.Locks()[1].Extend(ctx, 5*time.Second); !errors.Is(err, distlock.ErrNotHeld) { // finds the loss now
			t.Fatalf("round %d: Extend of a deleted member: %v", i, err)
		}
		select {
		case <-m.Lost():
		case <-time.After(5 * time.Second):
			t.Fatal("the loss of b was not signalled")
		}
		for _, w := range works {
			if w.Err() == nil {
				live++
			}
		}
		m.Release(ctx)
	}
	if live > 0 {
		t.Errorf("MultiLock.Lost closed while %d of %d contexts from MultiLock.Context were not done", live, rounds*perRound)
	}
}

// MultiLock.Err: "nil while every lock is held". After Release no lock is
// held, yet Err is nil, as it is for a set that holds every lock (a Lock's
// Err is ErrReleased then; a zero MultiLock's ErrNotHeld, so that no work
// starts unprotected under it).
func TestMultiErrAfterReleaseIsNotNil(t *testing.T) {
	c, _, _ := setup(t)
	ctx := ctxT(t, 10*time.Second)
	m, err := c.LockAll(ctx, []string{"a", "b"})
	must(t, err)
	must(t, m.Release(ctx))
	for _, l := range m.Locks() {
		if !errors.Is(l.Err(), distlock.ErrReleased) {
			t.Fatalf("member %q: Err %v after Release", l.Key(), l.Err())
		}
	}
	if err := m.Err(); err == nil {
		t.Errorf("MultiLock.Err after Release: nil (its locks' Err: ErrReleased); it says every lock is held")
	}
}

// A Leadership whose Lock is a zero Lock (one not made by this package)
// holds nothing: its Lock's methods return ErrNotHeld, but Proclaim
// dereferences the Lock's nil Client and panics.
func TestProclaimOnZeroLockDoesNotPanic(t *testing.T) {
	ctx := ctxT(t, 5*time.Second)
	ld := &distlock.Leadership{Lock: &distlock.Lock{}}
	if err := apiEdgeCall(func() error { return ld.Resign(ctx) }); !errors.Is(err, distlock.ErrNotHeld) {
		t.Fatalf("Resign: %v", err)
	}
	if err := apiEdgeCall(func() error { return ld.Proclaim(ctx, "v") }); !errors.Is(err, distlock.ErrNotHeld) {
		t.Errorf("Proclaim on a Leadership of a zero Lock: %v; want ErrNotHeld", err)
	}
}
