package distlock

import (
	"context"
	"sync/atomic"
	"time"
)

// boundSlack is how much sooner than cleanupTimeout a shared bound may end.
const boundSlack = 50 * time.Millisecond

// bound is a deadline about cleanupTimeout away, shared by the calls that
// start within boundSlack of each other: one timer per window serves them
// all, where a context.WithTimeout per call would cost each Release a timer
// and three allocations on its fast path. As a Context it carries no
// values: it stands for context.Background bounded.
type bound struct {
	deadline time.Time
	done     chan struct{}
}

var sharedBound atomic.Pointer[bound]

// currentBound returns a bound that ends between cleanupTimeout-boundSlack
// and cleanupTimeout from now.
func currentBound() *bound {
	b := sharedBound.Load()
	if b != nil && time.Until(b.deadline) > cleanupTimeout-boundSlack {
		return b
	}
	nb := &bound{deadline: time.Now().Add(cleanupTimeout), done: make(chan struct{})}
	time.AfterFunc(cleanupTimeout, func() { close(nb.done) })
	sharedBound.CompareAndSwap(b, nb) // a lost race leaves a bound as good
	return nb
}

func (b *bound) Deadline() (time.Time, bool) { return b.deadline, true }
func (b *bound) Done() <-chan struct{}       { return b.done }
func (b *bound) Value(any) any               { return nil }

func (b *bound) Err() error {
	select {
	case <-b.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

// boundedCtx is a bound on a parent that never ends but carries values
// (a trace span, say).
type boundedCtx struct {
	parent context.Context
	*bound
}

func (c boundedCtx) Value(key any) any { return c.parent.Value(key) }

// withBound gives ctx, which has no deadline, one about cleanupTimeout away,
// as context.WithTimeout(ctx, cleanupTimeout) does, but without a timer of
// its own when ctx can never end.
func withBound(ctx context.Context) (context.Context, context.CancelFunc) {
	switch {
	case ctx.Done() != nil:
		return context.WithTimeout(ctx, cleanupTimeout)
	case ctx == context.Background():
		return currentBound(), func() {}
	}
	return boundedCtx{ctx, currentBound()}, func() {}
}
