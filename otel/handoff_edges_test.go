package distlockotel_test

import (
	"testing"
	"time"

	"github.com/distlock/distlock"
)

// docs/observability.md, Spans: distlock.Extend is "Started by Extend". A
// Lock with WithoutRenewal and a TTL above the handoff's first lease (2 s)
// that is handed over must not show a distlock.Extend span the program
// never asked for.
func TestHandedOverWithoutRenewalHasNoExtendSpan(t *testing.T) {
	f := newFixture(t)
	holder := distlock.New(f.rdb)
	t.Cleanup(func() { _ = holder.Close() })
	c := f.client(t)
	ctx := ctxT(t, 10*time.Second)
	first, err := holder.Lock(ctx, "nr:1")
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		l   *distlock.Lock
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := c.Lock(ctx, "nr:1", distlock.WithoutRenewal(), distlock.WithTTL(5*time.Second))
		got <- result{l, err}
	}()
	waitFor(t, 5*time.Second, "the waiter's queued event", func() bool {
		return f.startedWithEvent("distlock.Lock", "queued")
	})
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var r result
	select {
	case r = <-got:
	case <-ctx.Done():
		t.Fatal("the waiter never got the lock")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.l.Release(ctx)
	if n := len(f.ended("distlock.Extend")); n != 0 {
		t.Errorf("%d distlock.Extend spans for a handed-over Lock call and no Extend call, want 0", n)
	}
}
