package distlockotel_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redistest"
	distlockotel "github.com/distlock/distlock/otel"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

var (
	acquired    = attribute.String("outcome", "acquired")
	notObtained = attribute.String("outcome", "not_obtained")
	free        = attribute.String("how", "free")
	handedOver  = attribute.String("how", "handed_over")
	released    = attribute.String("cause", "released")
)

// A contended lock, with lock names mapped to a label: the first Lock finds
// it free, a TryLock finds it busy, a second Client's Lock queues and is
// handed the lock by the Release. Every acquire, the wait, the handoff, the
// holds and the held gauge are counted, and the handed-over Lock span links
// to the Release span.
func TestContendedLock(t *testing.T) {
	label := attribute.String("lock", "orders:*")
	f := newFixture(t, distlockotel.WithKeyLabel(func(key string) string {
		prefix, _, _ := strings.Cut(key, ":")
		return prefix + ":*"
	}))
	a, b := f.client(t), f.client(t)
	ctx := ctxT(t, 10*time.Second)

	first, err := a.Lock(ctx, "orders:1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.TryLock(ctx, "orders:1"); !errors.Is(err, distlock.ErrNotObtained) {
		t.Fatalf("TryLock on a held lock: %v", err)
	}
	type result struct {
		l   *distlock.Lock
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := b.Lock(ctx, "orders:1")
		got <- result{l, err}
	}()
	waitFor(t, 5*time.Second, "the waiter's queued event", func() bool {
		return f.startedWithEvent("distlock.Lock", "queued")
	})
	if n := f.collect(t).sum("distlock.locks.held", label); n != 1 {
		t.Errorf("locks held while one is held: %d, want 1", n)
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var second result
	select {
	case second = <-got:
	case <-ctx.Done():
		t.Fatal("the waiter never got the lock")
	}
	if second.err != nil {
		t.Fatal(second.err)
	}
	if err := second.l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	m := f.collect(t)
	for _, c := range []struct {
		attrs []attribute.KeyValue
		want  uint64
	}{
		{[]attribute.KeyValue{acquired, free, label}, 1},
		{[]attribute.KeyValue{acquired, handedOver, label}, 1},
		{[]attribute.KeyValue{notObtained, label}, 1},
	} {
		if n, _ := m.hist("distlock.acquire.duration", c.attrs...); n != c.want {
			t.Errorf("acquire.duration%v count %d, want %d", c.attrs, n, c.want)
		}
	}
	if n, s := m.hist("distlock.wait.duration", handedOver, label); n != 1 || s <= 0 {
		t.Errorf("wait.duration{handed_over}: count %d sum %v, want one wait > 0", n, s)
	}
	if n, _ := m.hist("distlock.hold.duration", released, label); n != 2 {
		t.Errorf("hold.duration{released} count %d, want 2", n)
	}
	if n := m.sum("distlock.handoffs", label); n != 1 {
		t.Errorf("handoffs %d, want 1", n)
	}
	if n := m.sum("distlock.locks.held", label); n != 0 {
		t.Errorf("locks held after both releases: %d, want 0", n)
	}
	if vals := m.attrValues(); slices.Contains(vals, "orders:1") {
		t.Errorf("a metric carries the lock name: %v", vals)
	}

	var release, handed, busy = f.ended("distlock.Release"), f.ended("distlock.Lock"), f.ended("distlock.Lock")
	if len(release) != 2 || len(handed) != 3 {
		t.Fatalf("%d Release and %d Lock spans, want 2 and 3", len(release), len(handed))
	}
	handed = slices.DeleteFunc(handed, func(s sdktrace.ReadOnlySpan) bool {
		how, _ := spanAttr(s, "distlock.how")
		return how.AsString() != "handed_over"
	})
	busy = slices.DeleteFunc(busy, func(s sdktrace.ReadOnlySpan) bool {
		out, _ := spanAttr(s, "distlock.outcome")
		return out.AsString() != "not_obtained"
	})
	if len(handed) != 1 || len(busy) != 1 {
		t.Fatalf("%d handed-over and %d not-obtained Lock spans, want 1 each", len(handed), len(busy))
	}
	h := handed[0]
	if !hasEvent(h, "queued") || !hasEvent(h, "handed_over") {
		t.Errorf("handed-over Lock span events %v, want queued and handed_over", h.Events())
	}
	if key, _ := spanAttr(h, "distlock.key"); key.AsString() != "orders:1" {
		t.Errorf("Lock span distlock.key = %q", key.AsString())
	}
	if len(h.Links()) != 1 {
		t.Fatalf("handed-over Lock span has %d links, want 1", len(h.Links()))
	}
	releaser := release[0] // the first Release ended first
	if !hasEvent(releaser, "handoff") {
		t.Errorf("the handing Release span has no handoff event: %v", releaser.Events())
	}
	if link, rel := h.Links()[0].SpanContext, releaser.SpanContext(); link.TraceID() != rel.TraceID() || link.SpanID() != rel.SpanID() {
		t.Errorf("link to %v, want the Release span %v", link, releaser.SpanContext())
	}
	if st := busy[0].Status(); st.Code != codes.Unset {
		t.Errorf("not-obtained TryLock span status %v, want Unset", st)
	}
}

// A lock whose lease vanishes (FLUSHALL) is lost with cause expired; a
// Release after that fails and its span says so. No metric carries the
// lock's name by default.
func TestLossByFlushAll(t *testing.T) {
	f := newFixture(t)
	c := f.client(t)
	ctx := ctxT(t, 10*time.Second)
	l, err := c.Lock(ctx, "flushed:1", distlock.WithTTL(600*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Lost():
	case <-time.After(3 * time.Second):
		t.Fatal("loss not seen within 3s")
	}
	if err := l.Release(ctx); !errors.Is(err, distlock.ErrNotHeld) {
		t.Fatalf("Release after the loss: %v, want ErrNotHeld", err)
	}

	m := f.collect(t)
	if n := m.sum("distlock.losses", attribute.String("cause", "expired")); n != 1 {
		t.Errorf("losses{cause=expired} = %d, want 1", n)
	}
	if n, _ := m.hist("distlock.hold.duration", attribute.String("cause", "expired")); n != 1 {
		t.Errorf("hold.duration{cause=expired} count %d, want 1", n)
	}
	if n := m.sum("distlock.locks.held"); n != 0 {
		t.Errorf("locks held after the loss: %d", n)
	}
	if n := m.sum("distlock.renewals.sent"); n < 1 {
		t.Errorf("renewals sent %d, want the one that found the lease gone", n)
	}
	if vals := m.attrValues(); slices.ContainsFunc(vals, func(v string) bool { return strings.Contains(v, "flushed") }) {
		t.Errorf("a metric carries the lock name without WithKeyLabel: %v", vals)
	}
	rel := f.ended("distlock.Release")
	if len(rel) != 1 || rel[0].Status().Code != codes.Error {
		t.Errorf("Release spans %v, want one with status Error", rel)
	}
}

// A frozen Redis (SIGSTOP) answers no renewal: they fail, and the lock is
// lost as unreachable when its lease runs out.
func TestFrozenRedis(t *testing.T) {
	f := newFixture(t)
	c := f.client(t)
	ctx := ctxT(t, 10*time.Second)
	l, err := c.Lock(ctx, "frozen:1", distlock.WithTTL(600*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	f.srv.Signal(syscall.SIGSTOP)
	t.Cleanup(func() { f.srv.Signal(syscall.SIGCONT) }) // before the kill
	select {
	case <-l.Lost():
	case <-time.After(3 * time.Second):
		t.Fatal("loss not seen within 3s")
	}
	if !errors.Is(l.Err(), distlock.ErrUnreachable) {
		t.Fatalf("lost with %v, want ErrUnreachable", l.Err())
	}
	// One renewal event records the failure, the lag and the batch, one
	// after the other: wait for all three.
	waitFor(t, 3*time.Second, "a failed renewal batch", func() bool {
		m := f.collect(t)
		n, _ := m.hist("distlock.renewal.lag")
		b, _ := m.intHist("distlock.renewal.batch.size")
		return m.sum("distlock.renewals.failed") > 0 && n > 0 && b > 0
	})
	// An acquire whose deadline passes before the frozen server answers
	// is an error, not contention (ErrNoAnswer).
	tctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = c.TryLock(tctx, "frozen:2")
	cancel()
	if !errors.Is(err, distlock.ErrNoAnswer) {
		t.Errorf("TryLock with Redis frozen: %v, want ErrNoAnswer", err)
	}
	f.srv.Signal(syscall.SIGCONT)

	m := f.collect(t)
	failed, _ := m.hist("distlock.acquire.duration", attribute.String("outcome", "error"))
	busy, _ := m.hist("distlock.acquire.duration", attribute.String("outcome", "not_obtained"))
	if failed != 1 || busy != 0 {
		t.Errorf("acquire.duration with Redis frozen: {outcome=error} count %d, {outcome=not_obtained} count %d; want 1 and 0", failed, busy)
	}
	if n := m.sum("distlock.losses", attribute.String("cause", "unreachable")); n != 1 {
		t.Errorf("losses{cause=unreachable} = %d, want 1", n)
	}
	if n := m.sum("distlock.locks.held"); n != 0 {
		t.Errorf("locks held after the loss: %d", n)
	}
	if n, s := m.intHist("distlock.renewal.batch.size"); n < 1 || s < 1 {
		t.Errorf("renewal batch size: count %d sum %d", n, s)
	}
	if n, _ := m.hist("distlock.renewal.lag"); n < 1 {
		t.Errorf("renewal lag count %d", n)
	}
}

// A quorum Client with one of three nodes down counts that node's errors
// under its index, and still gets the lock.
func TestQuorumNodeErrors(t *testing.T) {
	f := newFixture(t)
	down := redistest.Start(t)
	third := redistest.Start(t)
	down.Kill()
	opts := down.Options()
	opts.MaxRetries = -1 // no retry backoff against a refused connection
	gone := redis.NewClient(opts)
	t.Cleanup(func() { _ = gone.Close() })
	c := distlock.NewQuorum([]redis.UniversalClient{f.rdb, third.Client(t), gone}, distlock.WithObserver(f.obs))
	t.Cleanup(func() { _ = c.Close() })
	ctx := ctxT(t, 10*time.Second)
	l, err := c.Lock(ctx, "q:1")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 3*time.Second, "node 2's error to be counted", func() bool {
		return f.collect(t).sum("distlock.node.errors", attribute.Int("node", 2)) == 1
	})
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	m := f.collect(t)
	for _, node := range []int{0, 1} {
		if n := m.sum("distlock.node.errors", attribute.Int("node", node)); n != 0 {
			t.Errorf("node.errors{node=%d} = %d, want 0", node, n)
		}
	}
	if n := m.sum("distlock.node.errors", attribute.Int("node", 2)); n != 1 {
		t.Errorf("node.errors{node=2} = %d after the release, want still 1 (a suspect node is counted once)", n)
	}
}
