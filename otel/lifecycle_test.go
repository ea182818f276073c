package distlockotel_test

import (
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
)

// docs/observability.md, distlock.acquire.duration: "`error`: anything else
// (Redis unreachable, invalid key)"; and under Spans: "Redis failures,
// invalid arguments and a closed Client are `error`: status Error with the
// error text". A Lock or TryLock refused for an invalid key, an invalid
// option or a closed Client must therefore be counted under outcome=error
// and have a distlock.Lock span with status Error.
func TestRefusedAcquiresAreCountedAsErrors(t *testing.T) {
	f := newFixture(t)
	ctx := ctxT(t, 10*time.Second)
	c := f.client(t)
	calls := []struct {
		name string
		call func() error
		want error
	}{
		{"Lock with an empty key", func() error { _, err := c.Lock(ctx, ""); return err }, distlock.ErrInvalidKey},
		{"TryLock with an invalid TTL", func() error {
			_, err := c.TryLock(ctx, "k", distlock.WithTTL(-time.Second))
			return err
		}, distlock.ErrInvalidTTL},
	}
	closed := f.client(t)
	if err := closed.Close(); err != nil {
		t.Fatal(err)
	}
	calls = append(calls, struct {
		name string
		call func() error
		want error
	}{"Lock on a closed Client", func() error { _, err := closed.Lock(ctx, "k"); return err }, distlock.ErrClosed})

	for _, c := range calls {
		if err := c.call(); !errors.Is(err, c.want) {
			t.Fatalf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	m := f.collect(t)
	n, _ := m.hist("distlock.acquire.duration", attribute.String("outcome", "error"))
	spans := f.ended("distlock.Lock")
	errored := 0
	for _, s := range spans {
		if s.Status().Code == codes.Error {
			errored++
		}
	}
	if n != uint64(len(calls)) || errored != len(calls) {
		t.Errorf("%d refused Lock/TryLock calls (invalid key, invalid TTL, closed Client): acquire.duration{outcome=error} count %d, "+
			"distlock.Lock spans with status Error %d (of %d spans); want %d and %d",
			len(calls), n, errored, len(spans), len(calls), len(calls))
	}
}

// docs/observability.md, Limits: a Release that finds the lock already
// gone (deleted here, as by a force-release or an expiry that no renewal
// noticed) reports the hold as lost with the cause it found: it counts in
// distlock.losses and in distlock.hold.duration under that cause.
func TestReleaseOfVanishedLockCountsALoss(t *testing.T) {
	f := newFixture(t)
	c := f.client(t)
	ctx := ctxT(t, 10*time.Second)
	// A long lease: no renewal happens before the Release (the first is due
	// at a third of the TTL, 20 s away).
	l, err := c.Lock(ctx, "vanish:1", distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.rdb.Del(ctx, "distlock:{vanish:1}").Err(); err != nil {
		t.Fatal(err)
	}
	if n := f.rdb.Exists(ctx, "distlock:{vanish:1}").Val(); n != 0 {
		t.Fatalf("lock key still there")
	}
	if err := l.Release(ctx); !errors.Is(err, distlock.ErrNotHeld) {
		t.Fatalf("Release of a vanished lock: %v, want ErrNotHeld", err)
	}
	m := f.collect(t)
	losses := m.sum("distlock.losses", attribute.String("cause", "expired"))
	rel, _ := m.hist("distlock.hold.duration", attribute.String("cause", "released"))
	exp, _ := m.hist("distlock.hold.duration", attribute.String("cause", "expired"))
	if losses != 1 || rel != 0 || exp != 1 {
		t.Errorf("Release that found the lock gone: losses{expired}=%d, hold.duration{released} count %d, {expired} count %d; "+
			"want 1, 0, 1", losses, rel, exp)
	}
}
