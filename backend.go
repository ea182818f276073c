package distlock

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// backend is what differs between a Client on one Redis deployment
// (single: standalone, Sentinel or Cluster) and one on independent servers
// that grant by majority (quorum). Client, Lock, the renewer and the
// notifier talk to it only.
type backend interface {
	// lock takes the lock for r: one attempt, or with r.wait until it is
	// granted or ctx ends.
	lock(ctx context.Context, r *request) (*Lock, error)
	// release drops l's hold in Redis; l has already ended locally. A
	// waiter the lock is handed to gets link (see Observer.Link).
	release(ctx context.Context, l *Lock, link string) (releaseOutcome, error)
	// extend resets l's lease to ttl.
	extend(ctx context.Context, l *Lock, ttl time.Duration) (extendOutcome, error)
	// pttl is l's lease left, or -1 when not held.
	pttl(ctx context.Context, l *Lock) (time.Duration, error)
	// renew extends a batch of leases to their TTLs.
	renew(batch []*Lock) []renewResult
	// serves reports whether the backend can give holds of kind k with
	// options cfg (nil: the kind alone), ErrInvalidOption if not.
	serves(k *kind, cfg *lockConfig) error
	// subscriptions are the servers the notifier listens on.
	subscriptions() []redis.UniversalClient
	// admin is the server that Inspect, List and ForceRelease read.
	admin() redis.UniversalClient
	// publish is the command the scripts publish with: PUBLISH, or SPUBLISH
	// (sharded pub/sub) on a Cluster.
	publish() string
	// passOn frees a grant that was handed to a Lock call that gave up
	// (the notifier found nobody waiting for it).
	passOn(h hold)
}

// releaseOutcome is what a release found in Redis.
type releaseOutcome int8

const (
	releaseGone       releaseOutcome = iota // the lock was gone: it expired
	releaseTaken                            // another grant holds the lock
	releaseHoldsLeft                        // other reentrant holds remain
	releaseFreed                            // the lock is free
	releaseHandedOver                       // the lock went to the next waiter
)

// extendOutcome is what an extend or renewal found in Redis.
type extendOutcome int8

const (
	extendGone      extendOutcome = iota // the lock is gone
	extendDone                           // the lease was reset
	extendTaken                          // another grant holds the lock
	extendUnacked                        // reset, but too few replicas acknowledged
	extendUndecided                      // quorum: neither a majority nor its loss yet
	extendLate                           // a renewal refused by its guard: too little lease left
	// extendUnknown: the call failed (the network's error, or its ctx
	// ended) after it may have reached Redis and set the lease all the
	// same; a backend whose renewals report a refusal's lease left
	// (extendLate) says so, and the Lock has that lease bounded again
	// (Lock.leaseUnknownLocked).
	extendUnknown
)

// cleanupTimeout bounds the work that goes on after its caller returned: a
// release, or the leaving of a line, finished in the background; and the
// time a Redis call whose caller gave up may still take to learn whether
// Redis granted it something that must be given back.
const cleanupTimeout = 2 * time.Second

// inlineMargin is how far a caller's deadline must be for a call to run
// inline (see detached): far beyond a healthy round trip.
const inlineMargin = 250 * time.Millisecond

// detached runs op(ctx, a), a Redis call made for a caller whose ctx may
// end first, so that the caller's answer never waits for Redis past ctx: op
// runs in a goroutine under a context that ignores ctx's cancellation and
// ends cleanupTimeout after ctx's deadline, and when ctx ends first the
// caller gets ctx.Err() while late, if not nil, gets a and op's result once
// it comes (to undo what op did). The goroutine counts in c.bg, which Close
// waits for.
//
// Two cases need no goroutine, whose hand-offs cost more than the call on
// the fast path: a ctx that can never end, and a ctx whose deadline is at
// least inlineMargin away when the Redis client honours deadlines (go-redis'
// ContextTimeoutEnabled sets the socket deadlines from it). Then op runs
// inline under ctx, and if it fails once ctx has ended, late gets that
// failure, since what op did in Redis is unknown. A nearer deadline is not
// run inline: go-redis drops the connection of a call cut off at its
// deadline, and callers with short deadlines under load would make every
// cut-off call cost a new connection.
//
// The hot callers (Release, and each acquire attempt) pass op and late as
// plain functions and their state as a, not as closures: a closure handed
// to a goroutine is allocated on every call, even when the call runs inline
// and the goroutine never starts (two allocations per Lock and two per
// Release). The goroutine below copies a only when it starts.
func detached[A, T any](c *Client, ctx context.Context, a A, op func(context.Context, A) (T, error), late func(A, T, error)) (T, error) {
	return detachedOn(c, c.deadlines, ctx, a, op, late)
}

// detachedOn is detached for a call on a Redis client that honours
// deadlines or not, as deadlines says.
func detachedOn[A, T any](c *Client, deadlines bool, ctx context.Context, a A, op func(context.Context, A) (T, error), late func(A, T, error)) (T, error) {
	if ctx.Done() == nil {
		return op(ctx, a)
	}
	if d, ok := ctx.Deadline(); ok && deadlines && time.Until(d) >= inlineMargin {
		v, err := op(ctx, a)
		// The socket deadline is ctx's: a timeout may come a hair before
		// ctx itself reports it.
		if err != nil && (ctx.Err() != nil || time.Until(d) < time.Millisecond) {
			if late != nil {
				late(a, v, err)
			}
			<-ctx.Done() // at most a millisecond: callers expect ctx ended too
			return v, ctx.Err()
		}
		return v, err
	}
	return inBackground(c, ctx, a, op, late)
}

// inBackground is detached's goroutine for a ctx that may end before op.
func inBackground[A, T any](c *Client, ctx context.Context, a A, op func(context.Context, A) (T, error), late func(A, T, error)) (T, error) {
	opCtx, cancel := context.WithoutCancel(ctx), context.CancelFunc(func() {})
	if d, ok := ctx.Deadline(); ok {
		opCtx, cancel = context.WithDeadline(opCtx, d.Add(cleanupTimeout))
	}
	type result struct {
		v   T
		err error
	}
	var claimed atomic.Bool // set by whoever takes the result: caller or late
	done := make(chan result, 1)
	c.bg.add()
	go func() {
		defer c.bg.done()
		defer cancel()
		v, err := op(opCtx, a)
		if claimed.CompareAndSwap(false, true) {
			done <- result{v, err}
		} else if late != nil {
			late(a, v, err)
		}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		if claimed.CompareAndSwap(false, true) {
			var zero T
			return zero, ctx.Err()
		}
		r := <-done // the result came at the same moment: use it
		return r.v, r.err
	}
}

// detachedFunc is detached for a call that needs no undoing, given as a
// closure (off the hot path, where its allocation does not matter).
func detachedFunc[T any](c *Client, ctx context.Context, op func(context.Context) (T, error)) (T, error) {
	return detached(c, ctx, op, callFunc[T], nil)
}

// adminFunc is detachedFunc for a call on the server that Inspect, List,
// ForceRelease and Election.Leader read (backend.admin, or a master of its
// Cluster, which shares its options), so that they too return by ctx's
// deadline whatever Redis does. That server's own timeout setting decides
// whether op may run inline: on a quorum Client it is the first node, whose
// calls no quorum wait bounds.
func adminFunc[T any](c *Client, ctx context.Context, op func(context.Context) (T, error)) (T, error) {
	s, _ := c.b.(*single)
	if s == nil || !s.c.cluster {
		return detachedOn(c, c.adminDeadlines, ctx, op, callFunc[T], nil)
	}
	// A Cluster's slot may have failed over: as after a failed renewal, the
	// map is reloaded, or the caller's retries would all go to a dead master.
	return detachedOn(c, c.adminDeadlines, ctx, func(ctx context.Context) (T, error) {
		v, err := op(ctx)
		s.reloadMap(err)
		return v, err
	}, callFunc[T], nil)
}

func callFunc[T any](ctx context.Context, op func(context.Context) (T, error)) (T, error) {
	return op(ctx)
}

// background runs f in a goroutine that Close waits for, under a context
// bounded by cleanupTimeout.
func (c *Client) background(f func(ctx context.Context)) {
	c.backgroundUntil(time.Now().Add(cleanupTimeout), f)
}

// backgroundUntil is background under a context that ends at d.
func (c *Client) backgroundUntil(d time.Time, f func(ctx context.Context)) {
	c.bg.add()
	go func() {
		defer c.bg.done()
		ctx, cancel := context.WithDeadline(context.Background(), d)
		defer cancel()
		f(ctx)
	}()
}

// jobs counts background goroutines so that Close can wait for them. (A
// sync.WaitGroup may not see Add race with Wait, and a Lock call that began
// before Close may start one while Close waits.)
type jobs struct {
	mu   sync.Mutex
	n    int
	zero chan struct{} // closed when n drops to 0 while Close waits
}

func (j *jobs) add() {
	j.mu.Lock()
	j.n++
	j.mu.Unlock()
}

func (j *jobs) done() {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.n--; j.n == 0 && j.zero != nil {
		close(j.zero)
		j.zero = nil
	}
}

// wait waits up to limit for the count to drop to zero.
func (j *jobs) wait(limit time.Duration) {
	j.mu.Lock()
	if j.n == 0 {
		j.mu.Unlock()
		return
	}
	if j.zero == nil {
		j.zero = make(chan struct{})
	}
	zero := j.zero
	j.mu.Unlock()
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-zero:
	case <-t.C:
	}
}
