package distlock_test

import (
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/faultproxy"
	"github.com/distlock/distlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// EventExtend is documented as "an Extend call returned". A Lock with
// WithoutRenewal and a TTL longer than the handoff's first lease (2 s) that
// is handed over is extended to its TTL inside the Lock call; that internal
// extend must not be reported as an Extend call (nor make a distlock.Extend
// span) that the program never made.
func TestHandoffWithoutRenewalReportsNoExtendCall(t *testing.T) {
	rec := &recorder{}
	_, rdb, _ := setup(t)
	holder := distlock.New(rdb)
	t.Cleanup(func() { holder.Close() })
	waiter := distlock.New(rdb, distlock.WithObserver(rec))
	t.Cleanup(func() { waiter.Close() })
	ctx := ctxT(t, 10*time.Second)

	first, err := holder.Lock(ctx, "norenew")
	if err != nil {
		t.Fatal(err)
	}
	got := acquireAsync(ctx, waiter, "norenew", distlock.WithoutRenewal(), distlock.WithTTL(5*time.Second))
	waitFor(t, 5*time.Second, "the waiter to be queued", func() bool {
		_, ok := rec.find(distlock.EventQueued, nil)
		return ok
	})
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	second := recv(t, got, 5*time.Second).l
	defer second.Release(ctx)
	if e, ok := rec.find(distlock.EventAcquire, nil); !ok || e.How != distlock.HowHandedOver {
		t.Fatalf("acquire event %+v, want HowHandedOver", e)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, e := range rec.events {
		if e.Kind == distlock.EventExtend {
			t.Errorf("an EventExtend (%+v) for a Lock call that no Extend call was made on", e)
		}
	}
}

// EventRenewal's Lag is "how late the batch went out after its first lock
// was due", a third into the lease. A lock handed over by a Release gets
// its first lease (2 s) from that Release; its renewal, sent right after the
// handoff, is early, not late. The Lock's conservative bound counts the
// lease from the waiter's last ask, up to lineRefresh (1 s) before the
// handoff, so a renewer that is perfectly on time reported lags of up to a
// sixth of that lease (~330 ms) on handoffs.
func TestRenewalLagOfHandedOverLockIsNotTheWait(t *testing.T) {
	rec := &recorder{}
	_, rdb, _ := setup(t)
	holder := distlock.New(rdb)
	t.Cleanup(func() { holder.Close() })
	waiter := distlock.New(rdb, distlock.WithObserver(rec))
	t.Cleanup(func() { waiter.Close() })
	ctx := ctxT(t, 15*time.Second)

	first, err := holder.Lock(ctx, "lagged") // 10 s TTL: the waiter asks again every 1 s
	if err != nil {
		t.Fatal(err)
	}
	got := acquireAsync(ctx, waiter, "lagged")
	waitFor(t, 5*time.Second, "the waiter to be queued", func() bool {
		_, ok := rec.find(distlock.EventQueued, nil)
		return ok
	})
	// Release well past a third of the handoff lease (2 s / 3) after the
	// waiter's ask, before its next ask (1 s after it): the old bound made
	// that renewal some 180 ms late.
	time.Sleep(850 * time.Millisecond)
	released := time.Now()
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	second := recv(t, got, 5*time.Second).l
	defer second.Release(ctx)
	if e, _ := rec.find(distlock.EventAcquire, nil); e.How != distlock.HowHandedOver {
		t.Fatalf("acquire %+v, want HowHandedOver", e)
	}
	var e distlock.Event
	waitFor(t, 3*time.Second, "the first renewal", func() bool {
		var ok bool
		e, ok = rec.find(distlock.EventRenewal, nil)
		return ok
	})
	t.Logf("first renewal %v after the release; lag %v", time.Since(released), e.Lag)
	if e.Lag >= 80*time.Millisecond {
		t.Errorf("renewal lag %v for a renewal sent right after the handoff that set a 2 s lease: want ~0", e.Lag)
	}
}

// Event.Failed is "how many got no answer", distlock.renewals.failed
// "Renewals that got no answer (timeout, connection error)", and WithLogger
// logs "renewals that got no answer". One renewal that times out is one
// renewal without an answer; the retry after it is answered by Redis (it
// is refused as late by design, see leaseUnknownLocked) and must not be
// counted as another one that got no answer.
func TestOneTimedOutRenewalCountsOneFailure(t *testing.T) {
	srv := redistest.Start(t)
	p := faultproxy.Start(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, ReadTimeout: 300 * time.Millisecond})
	t.Cleanup(func() { rdb.Close() })
	rec := &recorder{}
	c := distlock.New(rdb, distlock.WithObserver(rec))
	t.Cleanup(func() { c.Close() })
	ctx := ctxT(t, 20*time.Second)
	l, err := c.TryLock(ctx, "blip", distlock.WithTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(ctx, 3*time.Second); err != nil { // caches the renewal's script
		t.Fatal(err)
	}
	p.Blackhole()
	renewals := func() (all []distlock.Event) {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		for _, e := range rec.events {
			if e.Kind == distlock.EventRenewal {
				all = append(all, e)
			}
		}
		return all
	}
	waitFor(t, 5*time.Second, "a renewal that got no answer", func() bool {
		r := renewals()
		return len(r) > 0 && r[len(r)-1].Failed > 0
	})
	p.Heal()
	p.ResetAll()
	waitFor(t, 5*time.Second, "a renewal that succeeded", func() bool {
		r := renewals()
		return len(r) > 0 && r[len(r)-1].Failed == 0
	})
	if err := l.Err(); err != nil {
		t.Fatalf("lock lost: %v", err)
	}
	failed := 0
	for _, e := range renewals() {
		t.Logf("renewal batch %d failed %d err %v", e.Batch, e.Failed, e.Err)
		failed += e.Failed
	}
	if failed != 1 {
		t.Errorf("%d renewals counted as getting no answer after one renewal timed out, want 1", failed)
	}
}
