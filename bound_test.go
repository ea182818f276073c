package distlock

import (
	"context"
	"errors"
	"testing"
	"time"
)

// Redis-free tests of the shared bound of calls without a deadline.

func TestWithBoundEndsAboutCleanupTimeoutAway(t *testing.T) {
	type key struct{}
	valued := context.WithValue(context.Background(), key{}, "span")
	for name, parent := range map[string]context.Context{"background": context.Background(), "valued": valued} {
		t.Run(name, func(t *testing.T) {
			before := time.Now()
			ctx, cancel := withBound(parent)
			defer cancel()
			d, ok := ctx.Deadline()
			if !ok {
				t.Fatal("no deadline")
			}
			if d.Before(before.Add(cleanupTimeout-boundSlack)) || d.After(time.Now().Add(cleanupTimeout)) {
				t.Errorf("deadline %v from now, want within %v of %v", time.Until(d), boundSlack, cleanupTimeout)
			}
			if ctx.Done() == nil || ctx.Err() != nil {
				t.Errorf("Done %v, Err %v: want a channel, and no error before the deadline", ctx.Done(), ctx.Err())
			}
			if got := ctx.Value(key{}); got != parent.Value(key{}) {
				t.Errorf("Value = %v, want the parent's %v", got, parent.Value(key{}))
			}
		})
	}
}

// Calls that start close together share one bound (one timer), and a bound
// that is too old for a new call is replaced.
func TestBoundIsSharedWithinItsSlack(t *testing.T) {
	a, b := currentBound(), currentBound()
	if a != b && time.Until(b.deadline) > cleanupTimeout-boundSlack/2 {
		t.Errorf("two bounds made %v apart", b.deadline.Sub(a.deadline))
	}
	old := &bound{deadline: time.Now().Add(cleanupTimeout - 2*boundSlack), done: make(chan struct{})}
	sharedBound.Store(old)
	if c := currentBound(); c == old || time.Until(c.deadline) <= cleanupTimeout-boundSlack {
		t.Errorf("a bound %v away was used for a new call", time.Until(c.deadline))
	}
}

func TestBoundEndsWithDeadlineExceeded(t *testing.T) {
	b := &bound{deadline: time.Now(), done: make(chan struct{})}
	close(b.done)
	ctx := context.Context(boundedCtx{context.Background(), b})
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Errorf("Err = %v, want context.DeadlineExceeded", ctx.Err())
	}
	select {
	case <-ctx.Done():
	default:
		t.Error("Done is open after the bound ended")
	}
}

// A parent that can end keeps ending the call: it gets a timer of its own.
func TestWithBoundOfCancellableParentEndsWithIt(t *testing.T) {
	parent, cancelParent := context.WithCancel(context.Background())
	ctx, cancel := withBound(parent)
	defer cancel()
	if _, ok := ctx.Deadline(); !ok {
		t.Fatal("no deadline")
	}
	cancelParent()
	select {
	case <-ctx.Done():
	case <-time.After(time.Second):
		t.Fatal("the bounded ctx outlived its cancelled parent")
	}
}
