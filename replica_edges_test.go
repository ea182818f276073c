package distlock_test

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// A lock handed to a waiter under WithReplicaAck must be acknowledged by the
// replicas before Lock returns it (docs/deployments.md: "the waiter's Lock
// confirms it (an extend and WAIT, one more round trip) before it returns;
// unacknowledged, the grant is given back and Lock returns
// ErrNotReplicated"), also for a waiter that asked WithoutRenewal with a TTL
// of at most the first handoff lease (2 s).
func TestReplicaAckHandoffWithoutRenewal(t *testing.T) {
	master := redistest.Start(t)
	replica := master.StartReplica(t)
	rdb := master.Client(t)
	ack := distlock.WithReplicaAck(1, 200*time.Millisecond)
	a, b := distlock.New(rdb, ack), distlock.New(master.Client(t), ack)
	defer a.Close()
	defer b.Close()
	ctx := ctxT(t, 10*time.Second)
	held, err := a.TryLock(ctx, "payment")
	if err != nil {
		t.Fatal(err)
	}
	got := acquireAsync(ctx, b, "payment", distlock.WithoutRenewal(), distlock.WithTTL(time.Second))
	waitFor(t, 2*time.Second, "the waiter to line up", func() bool { return rdb.LLen(ctx, "distlock:{payment}:line").Val() == 1 })
	replica.Signal(syscall.SIGSTOP) // the replica stops acknowledging
	defer replica.Signal(syscall.SIGCONT)
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		if r.err == nil {
			t.Fatalf("handoff with a stalled replica returned a lock (fence %d), want ErrNotReplicated", r.l.Fence())
		}
		if !errors.Is(r.err, distlock.ErrNotReplicated) {
			t.Fatalf("handoff with a stalled replica: %v, want ErrNotReplicated", r.err)
		}
	case <-time.After(5 * time.Second): // 200ms WAIT (on Redis' 100ms cron) and two round trips
		t.Fatal("the waiter's Lock did not return")
	}
	waitFor(t, 3*time.Second, "the unacknowledged grant to be given back", func() bool {
		return rdb.Exists(ctx, "distlock:{payment}").Val() == 0
	})
}

// A waiter whose deadline comes while the replicas are asked to acknowledge
// its handoff (WAIT outlasts the deadline) must not get the lock: nothing
// acknowledged the grant. Lock returned a held Lock, with a nil error,
// after its context had ended.
func TestReplicaAckHandoffDeadlineDuringWait(t *testing.T) {
	master := redistest.Start(t)
	replica := master.StartReplica(t)
	rdb := master.Client(t)
	const ackTimeout = 4500 * time.Millisecond // 200 ms and more below go-redis' 5 s ReadTimeout
	ack := distlock.WithReplicaAck(1, ackTimeout)
	a, b := distlock.New(rdb, ack), distlock.New(master.Client(t), ack)
	defer a.Close()
	defer b.Close()
	ctx := ctxT(t, 20*time.Second)
	held, err := a.TryLock(ctx, "payment")
	if err != nil {
		t.Fatal(err)
	}
	const wait = 3 * time.Second
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	deadline, _ := wctx.Deadline()
	got := acquireAsync(wctx, b, "payment")
	waitFor(t, time.Second, "the waiter to line up", func() bool { return rdb.LLen(ctx, "distlock:{payment}:line").Val() == 1 })
	if left := time.Until(deadline); left < 600*time.Millisecond {
		t.Fatalf("the waiter lined up only %v before its deadline: machine too slow for this test", left)
	}
	replica.Signal(syscall.SIGSTOP) // the replica stops acknowledging
	defer replica.Signal(syscall.SIGCONT)
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		if r.err == nil {
			t.Fatalf("Lock returned a lock (fence %d) %v after its deadline, though no replica acknowledged the handoff (WAIT %v)",
				r.l.Fence(), r.at.Sub(deadline).Round(time.Millisecond), ackTimeout)
		}
		if !errors.Is(r.err, distlock.ErrNotReplicated) &&
			!(errors.Is(r.err, distlock.ErrNotObtained) && errors.Is(r.err, context.DeadlineExceeded)) {
			t.Fatalf("Lock: %v, want ErrNotReplicated or ErrNotObtained and the deadline", r.err)
		}
	case <-time.After(wait + 3*time.Second):
		t.Fatal("the waiter's Lock did not return")
	}
	waitFor(t, 4*time.Second, "the unacknowledged grant to be given back", func() bool {
		return rdb.Exists(ctx, "distlock:{payment}").Val() == 0
	})
}

// WithReplicaAck(n, timeout) waits for the replicas "for at most timeout",
// and an acquire they do not acknowledge returns ErrNotReplicated. go-redis
// reads a pipeline's replies under its ReadTimeout, so a WAIT longer than
// that was cut off, the pipeline resent (running the acquire script again),
// and the acquire failed with an i/o timeout after MaxRetries+1
// ReadTimeouts. Such a Client now refuses every call with ErrInvalidOption;
// one whose timeout fits answers ErrNotReplicated within it.
func TestReplicaAckTimeoutAboveReadTimeout(t *testing.T) {
	master := redistest.Start(t)
	replica := master.StartReplica(t)
	opts := master.Options()
	opts.ReadTimeout = 400 * time.Millisecond
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	ctx := ctxT(t, 15*time.Second)
	tooLong := distlock.New(rdb, distlock.WithReplicaAck(1, 800*time.Millisecond))
	defer tooLong.Close()
	if _, err := tooLong.TryLock(ctx, "stalled"); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Fatalf("TryLock with a WAIT of 800ms over a ReadTimeout of 400ms: %v, want ErrInvalidOption", err)
	}
	const ackTimeout = 150 * time.Millisecond
	c := distlock.New(rdb, distlock.WithReplicaAck(1, ackTimeout))
	defer c.Close()
	replica.Signal(syscall.SIGSTOP) // the replica stops acknowledging
	defer replica.Signal(syscall.SIGCONT)
	start := time.Now()
	_, err := c.TryLock(ctx, "stalled")
	took := time.Since(start)
	if !errors.Is(err, distlock.ErrNotReplicated) {
		t.Errorf("TryLock with a stalled replica after %v: %v, want ErrNotReplicated", took.Round(time.Millisecond), err)
	}
	if limit := ackTimeout + time.Second; took > limit { // WAIT ends on Redis' 100 ms cron
		t.Errorf("TryLock took %v, WithReplicaAck's timeout is %v", took.Round(time.Millisecond), ackTimeout)
	}
	mc := master.Client(t)
	waitFor(t, 3*time.Second, "the unacknowledged grant to be given back", func() bool {
		return mc.Exists(ctx, "distlock:{stalled}").Val() == 0
	})
}

// A waiter WithoutRenewal under WithReplicaAck, handed the lock when its
// last ask is older than its TTL, gets the lock at once: its confirmation
// (an extend and WAIT) runs before the Lock is shown to the renewal
// scheduler, which would take it for lost (an Extend event failing with
// "not held", the grant dropped and asked for again).
func TestReplicaAckShortTTLHandoffNoSpuriousLoss(t *testing.T) {
	master := redistest.Start(t)
	master.StartReplica(t)
	rdb := master.Client(t)
	ack := distlock.WithReplicaAck(1, 200*time.Millisecond)
	obs := &queuedCounter{}
	a := distlock.New(rdb, ack)
	b := distlock.New(master.Client(t), ack, distlock.WithObserver(obs))
	defer a.Close()
	defer b.Close()
	ctx := ctxT(t, 30*time.Second)
	const ttl = 500 * time.Millisecond
	bad := 0
	for round := range 5 {
		held, err := a.TryLock(ctx, "short", distlock.WithTTL(5*time.Second))
		must(t, err)
		got := acquireAsync(ctx, b, "short", distlock.WithoutRenewal(), distlock.WithTTL(ttl))
		waitFor(t, 2*time.Second, "the waiter to line up", func() bool { return rdb.LLen(ctx, "distlock:{short}:line").Val() == 1 })
		lined := time.Now()
		time.Sleep(time.Until(lined.Add(ttl + 200*time.Millisecond))) // its last ask is older than its TTL (before its 1 s re-ask)
		released := time.Now()
		must(t, held.Release(ctx))
		r := recv(t, got, 5*time.Second)
		took := r.at.Sub(released)
		obs.mu.Lock()
		var extends []string
		for _, e := range obs.events {
			if e.Kind == distlock.EventExtend {
				s := "ok"
				if e.Err != nil {
					s = e.Err.Error()
				}
				extends = append(extends, s)
			}
		}
		obs.events = nil
		obs.mu.Unlock()
		t.Logf("round %d: handoff took %v; extend events %q", round, took.Round(time.Millisecond), extends)
		for _, x := range extends {
			if x != "ok" {
				bad++
				break
			}
		}
		if r.l.Err() != nil {
			t.Fatalf("round %d: returned lock's Err %v", round, r.l.Err())
		}
		must(t, r.l.Release(ctx))
	}
	if bad > 0 {
		t.Errorf("%d of 5 handoffs had a failed internal Extend (the Lock was shown to the scheduler with a past deadline)", bad)
	}
}

// WithReplicaAck refuses only a timeout that the Redis client's ReadTimeout
// would cut off: none (-1, -2), the 5 s default and ContextTimeoutEnabled
// clients are accepted up to 200 ms below it.
func TestReplicaAckFitsTheReadTimeout(t *testing.T) {
	master := redistest.Start(t)
	master.StartReplica(t)
	ctx := ctxT(t, 20*time.Second)
	cases := []struct {
		name string
		rt   time.Duration
		ack  time.Duration
		cte  bool
		ok   bool
	}{
		{"rt -1 (none)", -1, 10 * time.Second, false, true},
		{"rt -2 (no deadlines)", -2, 10 * time.Second, false, true},
		{"rt 0 default 5s, ack 4.8s", 0, 4800 * time.Millisecond, false, true},
		{"rt 0 default 5s, ack 4.81s", 0, 4810 * time.Millisecond, false, false},
		{"rt 1.5s cte, ack 1s", 1500 * time.Millisecond, time.Second, true, true},
		{"rt 1s, ack 1s", time.Second, time.Second, false, false},
	}
	for i, tc := range cases {
		opts := master.Options()
		opts.ReadTimeout = tc.rt
		opts.ContextTimeoutEnabled = tc.cte
		rdb := redis.NewClient(opts)
		c := distlock.New(rdb, distlock.WithReplicaAck(1, tc.ack))
		l, err := c.TryLock(ctx, "fits"+string(rune('a'+i)))
		if tc.ok && err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
		if !tc.ok && !errors.Is(err, distlock.ErrInvalidOption) {
			t.Errorf("%s: %v, want ErrInvalidOption", tc.name, err)
		}
		if l != nil {
			_ = l.Release(ctx)
		}
		c.Close()
		rdb.Close()
	}
}

// A waiter that takes the lock itself when its holder's lease ran out (a
// re-ask, not a handoff) under WithReplicaAck, with the replica stalled,
// gets ErrNotReplicated, as a first attempt and a handoff do
// (docs/deployments.md: "An acquire that fewer than n replicas acknowledge
// in time is undone and returns ErrNotReplicated"). It waited out its whole
// deadline instead, taking and undoing the lock every second, and failed
// with ErrNotObtained and the context's error.
func TestReplicaAckReaskGrantNotReplicated(t *testing.T) {
	master := redistest.Start(t)
	replica := master.StartReplica(t)
	rdb := master.Client(t)
	ack := distlock.WithReplicaAck(1, 200*time.Millisecond)
	a, b := distlock.New(rdb, ack), distlock.New(master.Client(t), ack)
	defer a.Close()
	defer b.Close()
	ctx := ctxT(t, 30*time.Second)
	// A crashed holder: its lease runs out, nobody releases it.
	if _, err := a.TryLock(ctx, "payment", distlock.WithTTL(time.Second), distlock.WithoutRenewal()); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	got := acquireAsync(wctx, b, "payment")
	waitFor(t, 2*time.Second, "the waiter to line up", func() bool { return rdb.LLen(ctx, "distlock:{payment}:line").Val() == 1 })
	replica.Signal(syscall.SIGSTOP) // the replica stops acknowledging
	defer replica.Signal(syscall.SIGCONT)
	r := <-got
	if r.err == nil {
		t.Fatalf("a re-ask with a stalled replica returned a lock (fence %d), want ErrNotReplicated", r.l.Fence())
	}
	if !errors.Is(r.err, distlock.ErrNotReplicated) || wctx.Err() != nil {
		t.Fatalf("a re-ask with a stalled replica: %v, want ErrNotReplicated before the deadline", r.err)
	}
	waitFor(t, 3*time.Second, "the unacknowledged grant to be given back", func() bool {
		return rdb.Exists(ctx, "distlock:{payment}").Val() == 0 && rdb.Exists(ctx, "distlock:{payment}:line").Val() == 0
	})
}
