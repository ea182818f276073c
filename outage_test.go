package distlock_test

// Calls under a bad network (internal/faultproxy: blackhole, latency,
// connection resets), from the outage review of session 23; each failed
// before its fix.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime/debug"
	"sync/atomic"
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

// After an outage a lock with a little lease left is renewed. A call that
// failed where it may have landed raises the next renewal's guard above
// any lease (leaseUnknownLocked; go-redis cannot tell a refused dial from
// a retry after a written attempt), so the first renewal once Redis is
// back is refused and tells the lease left, and a retry goes out at once
// if it can pass its own guard: with 350 ms of a 10 s lease left it was
// not sent (its check asked for two drift margins, 204 ms, more than the
// retry needs) and the lock was lost.
func TestRenewedAfterAnOutageWithLittleLeaseLeft(t *testing.T) {
	t.Run("no retries", func(t *testing.T) { outageWithLittleLeaseLeft(t, -1) })
	// go-redis' default: 3 retries.
	t.Run("default retries", func(t *testing.T) { outageWithLittleLeaseLeft(t, 0) })
}

func outageWithLittleLeaseLeft(t *testing.T, maxRetries int) {
	const ttl = 10 * time.Second
	srv := redistest.Start(t)
	ctx := ctxT(t, 30*time.Second)
	p := faultproxy.Start(t, srv.Addr)
	// A port that refuses connections: Redis is down, as far as the
	// Client can tell.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := ln.Addr().String()
	ln.Close()
	var down atomic.Bool
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true, MaxRetries: maxRetries,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var d net.Dialer
			if down.Load() {
				return d.DialContext(ctx, network, refused)
			}
			return d.DialContext(ctx, network, addr)
		}})
	c := distlock.New(rdb)
	t.Cleanup(func() {
		c.Close()
		rdb.Close()
	})
	admin := srv.Client(t)

	l, err := c.TryLock(ctx, "outage-ends", distlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(ctx, ttl); err != nil { // loads the extend script
		t.Fatal(err)
	}

	// The outage: every connection breaks, and no new one can be made.
	down.Store(true)
	p.ResetAll()
	time.Sleep(100 * time.Millisecond)
	if err := l.Extend(ctx, ttl); err == nil {
		t.Fatal("Extend succeeded while Redis refused connections")
	}
	failed := time.Now()
	// The failure schedules the next renewal ttl/10 later. The outage
	// lasts until then and has eaten the lease down to ~350 ms by the time
	// that renewal reaches Redis (what PEXPIRE stands in for here).
	left := ttl/10 + 350*time.Millisecond - time.Since(failed)
	if err := admin.PExpire(ctx, "distlock:{outage-ends}", left).Err(); err != nil {
		t.Fatal(err)
	}
	down.Store(false)

	time.Sleep(ttl/10 + 800*time.Millisecond - time.Since(failed))
	if err := l.Err(); err != nil {
		pttl, _ := admin.PTTL(ctx, "distlock:{outage-ends}").Result()
		t.Fatalf("the lock was lost once Redis was back, with its lease alive (lease now %v): %v", pttl, err)
	}
	pttl, err := admin.PTTL(ctx, "distlock:{outage-ends}").Result()
	if err != nil || pttl < ttl/2 {
		t.Fatalf("the lease was not renewed after the outage: PTTL %v, %v", pttl, err)
	}
}
