package distlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestFencesRiseAfterSnapshotForEveryPrefixAndDatabase: two applications share one
// Redis, each with its own fence counter: with their own key prefixes
// (WithKeyPrefix exists "to keep applications sharing one Redis apart"),
// or in their own database (redis.Options.DB). The server restarts from a
// snapshot taken before their latest grants. docs/deployments.md promises
// that fences strictly increase "across restarts with or without
// persistence (... one that a snapshot brought back behind is lifted to
// it)". The lift runs only when a Client finds a fence-drawing script gone
// (NOSCRIPT), and only on the counter of that call's key; the script cache
// is one per server. So the first application's call loads the scripts and
// lifts its own counter, and the second one's calls then find the scripts
// loaded and draw from a counter the snapshot brought back behind: they
// repeat fences given out before the restart.
func TestFencesRiseAfterSnapshotForEveryPrefixAndDatabase(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	for _, tc := range []struct {
		name string
		b    func(srv *redistest.Server) *distlock.Client
	}{
		{"prefix", func(srv *redistest.Server) *distlock.Client {
			return distlock.New(srv.Client(t), distlock.WithKeyPrefix("app-b:"))
		}},
		{"database", func(srv *redistest.Server) *distlock.Client {
			o := srv.Options()
			o.DB = 1
			rdb := redis.NewClient(o)
			t.Cleanup(func() { rdb.Close() })
			return distlock.New(rdb)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			draw := func(c *distlock.Client) int64 {
				t.Helper()
				l, err := c.TryLock(ctx, "order:1")
				must(t, err)
				must(t, l.Release(ctx))
				return l.Fence()
			}
			a, b := distlock.New(srv.Client(t)), tc.b(srv)
			draw(a)
			draw(b)
			must(t, srv.Client(t).Save(ctx).Err()) // a periodic snapshot
			var last int64
			for range 3 { // given out by b, not in the snapshot
				last = draw(b)
			}
			a.Close()
			b.Close()
			srv.Restart(t) // loads the snapshot

			a, b = distlock.New(srv.Client(t)), tc.b(srv)
			defer a.Close()
			defer b.Close()
			draw(a) // the first call after the restart loads the scripts
			if after := draw(b); after <= last {
				t.Fatalf("the second application's fence %d after a restart from a snapshot, %d given out before it: a resource would take the forgotten holder's writes",
					after, last)
			}
		})
	}
}

// TestHolderToldWhenSnapshotBringsBackShorterLease: a holder's lock is in a
// snapshot with less lease left than the holder's current lease (here a
// 3 s lease, extended to 10 min after the snapshot; in production a
// snapshot a few minutes old under a long TTL, or a handoff's 2 s first
// lease). Redis restarts from that snapshot. The holder's Client keeps a
// subscription, whether it ever waited or not, so it renews at once when
// it reconnects (design.md), and Redis refuses that renewal by its guard,
// answering how much lease is left: under 3 s. The lock then runs out
// in Redis and another client takes it. The README promises that Lost()
// fires "as soon as the lock is known lost — including when no renewal was
// confirmed before the lease could have run out in Redis, so before anyone
// else can take it". (Before the holders channel, a Client that never
// waited kept no subscription and heard nothing until its next renewal,
// 3 min away: another client took the lock when the snapshot's lease ran out.)
func TestHolderToldWhenSnapshotBringsBackShorterLease(t *testing.T) {
	for _, waited := range []bool{false, true} {
		t.Run(fmt.Sprintf("waited=%t", waited), func(t *testing.T) {
			testHolderToldWhenSnapshotBringsBackShorterLease(t, waited)
		})
	}
}

func testHolderToldWhenSnapshotBringsBackShorterLease(t *testing.T, waited bool) {
	renewals := &restartRevObserver{}
	c, rdb, srv := setup(t, distlock.WithObserver(renewals))
	ctx := ctxT(t, 60*time.Second)
	if waited {
		waitOnce(t, rdb, c) // an idle channel stays subscribed
	}

	l, err := c.TryLock(ctx, "snap", distlock.WithTTL(3*time.Second))
	must(t, err)
	waitHolders(t, rdb, 1) // (a restart before it is missed: deployments.md)
	lost := make(chan time.Time, 1)
	go func() { <-l.Lost(); lost <- time.Now() }()
	must(t, rdb.Save(ctx).Err()) // the snapshot has the 3 s lease
	must(t, l.Extend(ctx, 10*time.Minute))
	srv.Restart(t) // loads the snapshot: under 3 s of lease left
	restarted := time.Now()
	if left := srv.Client(t).PTTL(ctx, "distlock:{snap}").Val(); left <= 0 {
		t.Fatalf("the snapshot's lease ran out during the restart (%v): a restart took 3 s", left)
	}

	other := distlock.New(srv.Client(t))
	defer other.Close()
	// The holder renews at the reconnect: Redis refuses the renewal by its
	// guard and tells the lease left, and the retry, which passes its
	// guard, renews it. Either that lands before the snapshot's lease runs
	// out, and the holder keeps the lock, or the holder must be told before
	// another client takes it.
	octx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var next lockResult
	select {
	case next = <-acquireAsync(octx, other, "snap"):
	case <-time.After(10 * time.Second):
		t.Fatal("Lock did not return within 10s")
	}
	if next.err != nil {
		if !errors.Is(next.err, context.DeadlineExceeded) {
			t.Fatal(next.err)
		}
		if err := l.Err(); err != nil {
			t.Fatalf("nobody else took the lock in 5 s, yet the holder lost it: %v; its renewals after the restart: %v", err, renewals.failures())
		}
		if left := srv.Client(t).PTTL(ctx, "distlock:{snap}").Val(); left <= 3*time.Second {
			t.Fatalf("the holder keeps the lock, but the lease left in Redis is %v: not renewed", left)
		}
		t.Logf("the holder renewed the snapshot's lease and kept the lock")
		return
	}
	defer next.l.Release(ctx)
	t.Logf("another client took the lock %v after the restart", next.at.Sub(restarted))
	// Lost fires at the holder's deadline, the drift margin (32 ms) before
	// Redis's expiry, which the other grant follows: allow 100 ms on top
	// for a timer that a loaded machine fires late.
	select {
	case at := <-lost:
		t.Logf("holder told %v after the restart, %v before the other grant: %v", at.Sub(restarted), next.at.Sub(at), l.Err())
		if at.After(next.at.Add(100 * time.Millisecond)) {
			t.Fatalf("holder told %v after another client took the lock", at.Sub(next.at))
		}
	case <-time.After(time.Second):
		t.Fatalf("another client holds the lock since %v after the restart, and the holder is still not told (Err %v); its renewals after the restart: %v",
			next.at.Sub(restarted), l.Err(), renewals.failures())
	}
	if !errors.Is(l.Err(), distlock.ErrLost) {
		t.Fatalf("holder's cause %v, want a loss", l.Err())
	}
}

// restartRevObserver records the errors of failed renewal batches.
type restartRevObserver struct {
	mu   sync.Mutex
	errs []string
}

func (o *restartRevObserver) Start(ctx context.Context, _ distlock.EventKind, _ string) context.Context {
	return ctx
}
func (o *restartRevObserver) Link(context.Context) string { return "" }
func (o *restartRevObserver) Observe(_ context.Context, e distlock.Event) {
	if e.Kind == distlock.EventRenewal && e.Failed > 0 {
		o.mu.Lock()
		o.errs = append(o.errs, e.Err.Error())
		o.mu.Unlock()
	}
}
func (o *restartRevObserver) failures() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.errs...)
}
