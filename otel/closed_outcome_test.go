package distlockotel_test

import (
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
)

// docs/observability.md, Spans: "Redis failures, invalid arguments and a
// closed Client are `error`: status Error with the error text, and the
// error recorded as an `exception` event"; and the acquire.duration row:
// "`not_obtained`: TryLock found the lock held, or Lock's context ended
// while it waited (`ErrNotObtained`); `error`: anything else". A Lock that
// is waiting when its Client is closed neither found the lock held in a
// TryLock nor had its context end: the Client was closed, which must show
// as an error (the core returns ErrClosed joined with ErrNotObtained, see
// ErrClosed's doc), as it does for a Lock called after Close
// (TestRefusedAcquiresAreCountedAsErrors).
func TestLockWaitingAtCloseIsAnError(t *testing.T) {
	f := newFixture(t)
	holder := distlock.New(f.rdb)
	t.Cleanup(func() { _ = holder.Close() })
	c := distlock.New(f.rdb, distlock.WithObserver(f.obs))
	t.Cleanup(func() { _ = c.Close() })
	ctx := ctxT(t, 20*time.Second)
	if _, err := holder.Lock(ctx, "closing:1"); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		_, err := c.Lock(ctx, "closing:1")
		got <- err
	}()
	waitFor(t, 5*time.Second, "the waiter's queued event", func() bool {
		return f.startedWithEvent("distlock.Lock", "queued")
	})
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	var lerr error
	select {
	case lerr = <-got:
	case <-ctx.Done():
		t.Fatal("the waiting Lock did not return after Close")
	}
	if !errors.Is(lerr, distlock.ErrClosed) {
		t.Fatalf("Lock waiting at Close: %v, want ErrClosed", lerr)
	}
	m := f.collect(t)
	errs, _ := m.hist("distlock.acquire.duration", attribute.String("outcome", "error"))
	notObt, _ := m.hist("distlock.acquire.duration", attribute.String("outcome", "not_obtained"))
	spans := f.ended("distlock.Lock")
	if len(spans) != 1 {
		t.Fatalf("%d ended distlock.Lock spans, want 1", len(spans))
	}
	out, _ := spanAttr(spans[0], "distlock.outcome")
	if errs != 1 || notObt != 0 || spans[0].Status().Code != codes.Error || out.AsString() != "error" {
		t.Errorf("a Lock waiting when its Client closed (%v): acquire.duration{outcome=error} count %d, {outcome=not_obtained} count %d; "+
			"span distlock.outcome=%q status %v; want 1, 0, \"error\" and status Error",
			lerr, errs, notObt, out.AsString(), spans[0].Status())
	}
}
