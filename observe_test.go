package distlock_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/faultproxy"
	"github.com/distlock/distlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// recorder is an Observer that keeps every event; its Link is the key of
// the call that asked, so that a handoff's link can be checked.
type recorder struct {
	mu     sync.Mutex
	events []distlock.Event
}

type spanKey struct{}

func (r *recorder) Start(ctx context.Context, kind distlock.EventKind, key string) context.Context {
	return context.WithValue(ctx, spanKey{}, kind.String()+":"+key)
}

func (r *recorder) Observe(ctx context.Context, e distlock.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recorder) Link(ctx context.Context) string {
	s, _ := ctx.Value(spanKey{}).(string)
	return s
}

func (r *recorder) find(kind distlock.EventKind, match func(distlock.Event) bool) (distlock.Event, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.events {
		if e.Kind == kind && (match == nil || match(e)) {
			return e, true
		}
	}
	return distlock.Event{}, false
}

// A nil *recorder given as an Observer, as a failed constructor's result
// ignored by the caller would be (obs, _ := distlockotel.NewObserver()), is
// ignored like a nil interface: every lock call used to panic on it.
func TestNilObserverIsIgnored(t *testing.T) {
	var rec *recorder
	c, _, _ := setup(t, distlock.WithObserver(rec))
	ctx := ctxT(t, 5*time.Second)
	err := unpanicked(func() error {
		l, err := c.Lock(ctx, "k")
		if err != nil {
			return err
		}
		if err := l.Extend(ctx, time.Second); err != nil {
			return err
		}
		return l.Release(ctx)
	})
	if err != nil {
		t.Fatalf("Lock, Extend and Release with a nil *recorder observer: %v", err)
	}
}

// The events of a contended lock, a handoff and a loss, as an Observer
// sees them.
func TestObserverSeesTheLocksLife(t *testing.T) {
	rec := &recorder{}
	c, rdb, _ := setup(t, distlock.WithObserver(rec))
	other := distlock.New(rdb, distlock.WithObserver(rec))
	defer other.Close()
	ctx := ctxT(t, 10*time.Second)

	first, err := c.Lock(ctx, "obs", distlock.WithTTL(600*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	got := acquireAsync(ctx, other, "obs")
	waitFor(t, 2*time.Second, "the waiter to be queued", func() bool {
		_, ok := rec.find(distlock.EventQueued, nil)
		return ok
	})
	time.Sleep(300 * time.Millisecond) // held past a renewal
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	second := recv(t, got, 2*time.Second).l

	if e, ok := rec.find(distlock.EventAcquire, func(e distlock.Event) bool { return e.Fence == first.Fence() }); !ok || e.How != distlock.HowFree || e.Err != nil {
		t.Errorf("first acquire: %+v", e)
	}
	e, ok := rec.find(distlock.EventAcquire, func(e distlock.Event) bool { return e.Fence == second.Fence() })
	if !ok || e.How != distlock.HowHandedOver || e.Wait <= 0 || e.Link != "release:obs" {
		t.Errorf("handed-over acquire: %+v, want HowHandedOver, a wait and the release's link", e)
	}
	if _, ok := rec.find(distlock.EventHandoff, nil); !ok {
		t.Error("no handoff event")
	}
	if e, ok := rec.find(distlock.EventHoldEnded, func(e distlock.Event) bool { return e.Fence == first.Fence() }); !ok || !errors.Is(e.Err, distlock.ErrReleased) || e.Duration < 300*time.Millisecond {
		t.Errorf("first hold ended: %+v", e)
	}
	if e, ok := rec.find(distlock.EventRenewal, nil); !ok || e.Batch < 1 {
		t.Errorf("renewal: %+v", e)
	}

	rdb.FlushAll(ctx) // the lease vanishes: the next renewal finds it gone
	select {
	case <-second.Lost():
	case <-time.After(3 * time.Second):
		t.Fatal("loss not seen")
	}
	if e, ok := rec.find(distlock.EventHoldEnded, func(e distlock.Event) bool { return e.Fence == second.Fence() }); !ok || !errors.Is(e.Err, distlock.ErrExpired) {
		t.Errorf("lost hold: %+v, want ErrExpired", e)
	}
}

// WithLogger logs a loss with its key, fence and cause.
func TestLoggerLogsLoss(t *testing.T) {
	var buf safeBuffer
	logger := slog.New(slog.NewJSONHandler(&buf, nil))
	c, rdb, _ := setup(t, distlock.WithLogger(logger))
	ctx := ctxT(t, 10*time.Second)
	l, err := c.Lock(ctx, "logged", distlock.WithTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	rdb.FlushAll(ctx)
	waitLost(t, l, 5*time.Second)
	out := buf.String()
	for _, want := range []string{`"msg":"distlock: lock lost"`, `"key":"logged"`, `"cause":"distlock: lock lost: lease expired"`} {
		if !strings.Contains(out, want) {
			t.Errorf("log %q lacks %s", out, want)
		}
	}
}

type safeBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *safeBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *safeBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A Release that finds the lease already gone reports a loss, not a
// release: the hold ended before it.
func TestObserverReleaseFindsLoss(t *testing.T) {
	rec := &recorder{}
	c, rdb, _ := setup(t, distlock.WithObserver(rec))
	ctx := ctxT(t, 5*time.Second)
	l, err := c.Lock(ctx, "gone", distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	rdb.FlushAll(ctx)
	if err := l.Release(ctx); !errors.Is(err, distlock.ErrNotHeld) {
		t.Fatalf("Release: %v", err)
	}
	n := 0
	for _, e := range rec.events {
		if e.Kind == distlock.EventHoldEnded {
			n++
			if !errors.Is(e.Err, distlock.ErrExpired) {
				t.Errorf("hold ended with %v, want ErrExpired", e.Err)
			}
		}
	}
	if n != 1 {
		t.Fatalf("%d hold-ended events, want 1", n)
	}
}

// A healthy quorum reports no node errors: a node still answering when
// the others' answers decided a call is only slower, not failed.
func TestHealthyQuorumReportsNoNodeErrors(t *testing.T) {
	rec := &recorder{}
	_, c, _ := quorumSetup(t, 3, distlock.WithObserver(rec))
	ctx := ctxT(t, 30*time.Second)
	for range 300 {
		l, err := c.Lock(ctx, "calm")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.TTL(ctx); err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if e, found := rec.find(distlock.EventNodeError, nil); found {
		t.Fatalf("a healthy quorum reported node %d failed: %v", e.Node, e.Err)
	}
}

// EventRenewal's Lag (distlock.renewal.lag) is how late a batch went out,
// not when its answer came back: with a 300 ms round trip, batches sent
// on time reported lags of 300 ms and more, which operators read as a
// renewer that cannot keep up.
func TestRenewalLagExcludesTheRoundTrip(t *testing.T) {
	srv := redistest.Start(t)
	p := faultproxy.Start(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	rec := &recorder{}
	c := distlock.New(rdb, distlock.WithObserver(rec))
	t.Cleanup(func() { c.Close() })
	ctx := ctxT(t, 20*time.Second)
	l, err := c.TryLock(ctx, "lag", distlock.WithTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(ctx, 3*time.Second); err != nil { // caches the renewal's script
		t.Fatal(err)
	}
	p.SetLatency(150 * time.Millisecond)
	var lags []time.Duration
	waitFor(t, 8*time.Second, "two renewals", func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		lags = lags[:0]
		for _, e := range rec.events {
			if e.Kind == distlock.EventRenewal {
				lags = append(lags, e.Lag)
			}
		}
		return len(lags) >= 2
	})
	p.SetLatency(0)
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("lags %v", lags)
	for _, lag := range lags {
		if lag >= 150*time.Millisecond {
			t.Fatalf("renewal lags %v with a 300 ms round trip: batches sent on time reported late by it", lags)
		}
	}
}
