package distlock_test

// Calls under a bad network (internal/faultproxy: blackhole, latency,
// connection resets), from the outage review of session 23; each failed
// before its fix.

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/faultproxy"
	"github.com/distlock/distlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// outageSlack is how late a call may return after the moment it should
// have on this loaded 2-core machine; generous on purpose.
const outageSlack = 2 * time.Second

// resetLatency is the one-way latency of the reset tests: a request reaches
// Redis resetLatency after it is sent and its answer comes back
// resetLatency later, so a reset at 1.5×resetLatency falls between the two
// with resetLatency/2 of margin either way.
const resetLatency = 500 * time.Millisecond

// outageClient returns a Client on srv through a fault proxy, with go-redis'
// defaults but for ContextTimeoutEnabled (so MaxRetries is 3, as in most
// deployments), and the proxy; both are closed when the test ends.
func outageClient(t *testing.T, srv *redistest.Server, opt redis.Options) (*distlock.Client, *faultproxy.Proxy) {
	t.Helper()
	p := faultproxy.Start(t, srv.Addr)
	opt.Addr = p.Addr()
	rdb := redis.NewClient(&opt)
	c := distlock.New(rdb)
	t.Cleanup(func() {
		c.Close()
		rdb.Close()
	})
	return c, p
}

// resetMidCall runs call with the proxy's latency at resetLatency and every
// connection reset once the request has reached Redis, before its answer is
// back: go-redis sees a broken connection and, with its default MaxRetries,
// sends the same command again on a new connection.
func resetMidCall(t *testing.T, p *faultproxy.Proxy, call func()) {
	t.Helper()
	p.SetLatency(resetLatency)
	timer := time.AfterFunc(resetLatency+resetLatency/2, p.ResetAll)
	defer timer.Stop()
	call()
	p.SetLatency(0)
}

// A TryLock (or a Lock of a free key) whose answer is lost to a connection
// reset after Redis granted it: go-redis retries the script, which finds the
// lock held by the call's own token and answers {1, fence, 1, 1}, the reply
// of a handoff. single.ask then takes it for a handoff to a waiter and calls
// q.n.expectGrant on a Client that never waited, whose notifier is nil: the
// caller's goroutine panics with a nil pointer dereference.
func TestRetriedAcquireAfterResetIsTheCallsOwnGrant(t *testing.T) {
	for _, method := range []string{"TryLock", "Lock"} {
		for _, timeouts := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/ContextTimeoutEnabled=%v", method, timeouts), func(t *testing.T) {
				srv := redistest.Start(t)
				direct := srv.Client(t)
				c, p := outageClient(t, srv, redis.Options{ContextTimeoutEnabled: timeouts})
				ctx := ctxT(t, 30*time.Second)
				warm(t, ctx, c) // a connection, and the scripts loaded
				var (
					l   *distlock.Lock
					err error
				)
				resetMidCall(t, p, func() {
					defer func() {
						if r := recover(); r != nil {
							err = fmt.Errorf("panic: %v\n%s", r, debug.Stack())
						}
					}()
					if method == "TryLock" {
						l, err = c.TryLock(ctx, "k", distlock.WithTTL(time.Minute))
					} else {
						l, err = c.Lock(ctx, "k", distlock.WithTTL(time.Minute))
					}
				})
				if err != nil {
					t.Fatalf("%s of a free lock whose first answer was lost to a connection reset: %v", method, err)
				}
				if got := direct.Exists(ctx, "distlock:{k}").Val(); got != 1 {
					t.Fatalf("%s returned a lock that is not in Redis", method)
				}
				if err := l.Release(ctx); err != nil {
					t.Fatalf("Release: %v", err)
				}
			})
		}
	}
}

// On a quorum Client whose nodes cannot be reached, Lock.TTL returns
// ErrNotHeld, which says the lock "is no longer held by this Lock" (and
// "nothing in Redis is changed"), while the lock is held: its Err is nil,
// Lost is open, and it is still renewed once the nodes answer. TTL should
// wrap the failure (ctx's error when ctx ended), as on a single node.
// quorum.pttl counts nodes that did not answer as nodes without the lock.
func TestQuorumTTLWithNodesUnreachableIsAnError(t *testing.T) {
	proxies, _, c, _ := proxiedQuorum(t, 3)
	ctx := ctxT(t, 20*time.Second)
	l, err := c.TryLock(ctx, "q", distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range proxies {
		p.Blackhole()
	}
	for _, d := range []time.Duration{300 * time.Millisecond, 3 * time.Second} {
		cctx, cancel := context.WithTimeout(ctx, d)
		_, err := l.TTL(cctx)
		cancel()
		if errors.Is(err, distlock.ErrNotHeld) && l.Err() == nil {
			t.Errorf("TTL under a %v deadline with every node blackholed: %v, while the lock is held (Err() = nil)", d, err)
		}
	}
}

// On a quorum Client, an Extend whose ctx ends before a majority answered
// returns "no majority answered", which matches neither ctx.Err() nor any
// sentinel. Extend's doc: "If ctx ends meanwhile, Extend returns its error";
// on a single node it does (DeadlineExceeded). quorum.extend never returns
// an error, and Lock.extend maps extendUndecided to a plain string.
func TestQuorumExtendPastDeadlineReturnsCtxError(t *testing.T) {
	proxies, _, c, _ := proxiedQuorum(t, 3)
	ctx := ctxT(t, 20*time.Second)
	l, err := c.TryLock(ctx, "q", distlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range proxies {
		p.Blackhole()
	}
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	start := time.Now()
	err = l.Extend(cctx, 10*time.Second)
	took := time.Since(start)
	cancel()
	if took > 300*time.Millisecond+outageSlack {
		t.Errorf("Extend took %v under a 300ms deadline", took)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Extend with every node blackholed, its 300ms deadline passed: %v, want an error matching context.DeadlineExceeded", err)
	}
}
