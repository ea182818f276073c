package distlock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/faultproxy"
	"github.com/distlock/distlock/internal/redistest"
	"github.com/redis/go-redis/v9"
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

// MultiLock.Err: "nil while every lock is held, after a loss the first
// loss's cause". A member's loss known synchronously (TTL finds the hold
// gone: "it is known lost now (Lost and Context say so at once)") is not
// yet the set's: the set hears of it only through context.AfterFunc, in
// another goroutine (found in review: 30 of 30 rounds).
func TestMultiLockErrOnceAMemberIsKnownLost(t *testing.T) {
	c, rdb, _ := setup(t)
	ctx := ctxT(t, 30*time.Second)
	misses := 0
	const rounds = 30
	for i := range rounds {
		a, b := fmt.Sprintf("a%d", i), fmt.Sprintf("b%d", i)
		m, err := c.LockAll(ctx, []string{a, b})
		must(t, err)
		rdb.Del(ctx, "distlock:{"+a+"}")
		l := m.Locks()[0]
		if _, err := l.TTL(ctx); !errors.Is(err, distlock.ErrNotHeld) {
			t.Fatalf("TTL after the delete: %v", err)
		}
		// l is known lost now: its Lost is closed, its Err says why.
		select {
		case <-l.Lost():
		default:
			t.Fatal("member's Lost not closed after TTL found it gone")
		}
		merr := m.Err()
		lostClosed := false
		select {
		case <-m.Lost():
			lostClosed = true
		default:
		}
		if merr == nil || !lostClosed {
			misses++
			if misses == 1 {
				t.Logf("round %d: member %q Err=%v, but MultiLock.Err()=%v, MultiLock.Lost closed=%v", i, a, l.Err(), merr, lostClosed)
			}
		}
		_ = m.Release(ctx)
	}
	if misses > 0 {
		t.Fatalf("%d of %d rounds: a member was known lost (its Err, its Lost) while MultiLock.Err() was nil / Lost open", misses, rounds)
	}
}

// Observe's channel "is closed at once after Close". An observer whose
// read of the leader (at its lease's end) is stuck on a hung Redis is not
// stopped by Close: it reads under the caller's ctx only, and Close gives
// up on it after its 4 s bound, leaving the channel open and the goroutine
// running until the caller's deadline (found in review: still open 6 s
// after Close began).
func TestObserveClosedAtCloseWhileRedisHangs(t *testing.T) {
	srv := redistest.Start(t)
	direct := srv.Client(t)
	p := faultproxy.Start(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true, ReadTimeout: -1, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	c := distlock.New(rdb)
	t.Cleanup(func() { c.Close() })
	other := distlock.New(direct)
	t.Cleanup(func() { other.Close() })
	ctx := ctxT(t, 40*time.Second)
	e, err := c.NewElection("hang")
	must(t, err)
	oe, _ := other.NewElection("hang")
	octx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	seen := e.Observe(octx)
	if l := nextLeader(t, seen, 5*time.Second); l.Elected() {
		t.Fatalf("first %+v", l)
	}
	if _, err := oe.Campaign(ctx, "a", distlock.WithoutRenewal(), distlock.WithTTL(time.Second)); err != nil {
		t.Fatal(err)
	}
	if l := nextLeader(t, seen, 5*time.Second); !l.Elected() {
		t.Fatalf("second %+v", l)
	}
	p.Blackhole()
	time.Sleep(1500 * time.Millisecond) // a clock wait: the 1 s lease ends, the observer reads, and hangs
	closed := make(chan time.Duration, 1)
	start := time.Now()
	go func() {
		for range seen {
		}
		closed <- time.Since(start)
	}()
	c.Close()
	took := time.Since(start)
	select {
	case d := <-closed:
		t.Logf("channel closed %v after Close began (Close took %v)", d.Round(time.Millisecond), took.Round(time.Millisecond))
		if d > 500*time.Millisecond {
			t.Fatalf("Observe's channel closed only %v after Close began (Close took %v)", d.Round(time.Millisecond), took.Round(time.Millisecond))
		}
	case <-time.After(2 * time.Second):
		t.Fatalf("Observe's channel still open %v after Close began (Close took %v)", time.Since(start).Round(time.Millisecond), took.Round(time.Millisecond))
	}
	p.Heal()
}
