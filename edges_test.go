package distlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/faultproxy"
	"github.com/distlock/distlock/internal/redistest"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// The tests in this file pin the edges real deployments hit: a request
// context cancelled before Release, Redis that hangs or answers late, callers
// that give up while Redis is granting them the lock.

// proxied returns a Client whose connections to srv go through a fault
// proxy, and the proxy. timeouts sets go-redis' ContextTimeoutEnabled.
func proxied(t *testing.T, srv *redistest.Server, timeouts bool) (*distlock.Client, *faultproxy.Proxy) {
	t.Helper()
	c, p, _ := proxiedRedis(t, srv, timeouts)
	return c, p
}

// proxiedRedis is proxied that also returns the Client's Redis client.
func proxiedRedis(t *testing.T, srv *redistest.Server, timeouts bool) (*distlock.Client, *faultproxy.Proxy, *redis.Client) {
	t.Helper()
	p := faultproxy.Start(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: timeouts, MaxRetries: -1})
	c := distlock.New(rdb)
	t.Cleanup(func() {
		c.Close()
		rdb.Close()
	})
	return c, p, rdb
}

// The handler pattern: `defer lock.Release(r.Context())` after the client
// went away. The lock must end at once and be freed in Redis, not stay held
// and renewed until Client.Close.
func TestReleaseWithCancelledContextFreesLock(t *testing.T) {
	c, rdb, _ := setup(t)
	ctx := ctxT(t, 10*time.Second)
	reqCtx, cancelReq := context.WithCancel(ctx)
	l, err := c.Lock(reqCtx, "handler", distlock.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	work, stop := l.Context(ctx) // work that outlives the request
	defer stop()
	cancelReq() // the client went away
	err = l.Release(reqCtx)
	if err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("Release with a cancelled context: %v", err)
	}
	if !errors.Is(l.Err(), distlock.ErrReleased) || !errors.Is(context.Cause(work), distlock.ErrReleased) {
		t.Fatalf("after Release: Err %v, work context cause %v; want ErrReleased", l.Err(), context.Cause(work))
	}
	waitFor(t, time.Second, "the lock to be freed in Redis", func() bool {
		return rdb.Exists(ctx, "distlock:{handler}").Val() == 0
	})
	if _, err := c.TryLock(ctx, "handler"); err != nil {
		t.Fatalf("TryLock after the cancelled Release: %v", err)
	}
}

// With Redis unreachable, Release still ends the lock at once and returns
// by its deadline; nothing renews the lease, so Redis frees it within a TTL.
func TestReleaseWhileRedisUnreachable(t *testing.T) {
	srv := redistest.Start(t)
	direct := srv.Client(t)
	c, p := proxied(t, srv, false)
	ctx := ctxT(t, 10*time.Second)
	const ttl = time.Second
	l, err := c.Lock(ctx, "cut", distlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	p.Blackhole()
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = l.Release(short)
	took := time.Since(start)
	if err == nil || took > 200*time.Millisecond+deadlineSlack {
		t.Fatalf("Release with Redis blackholed: %v after %v", err, took)
	}
	if !errors.Is(l.Err(), distlock.ErrReleased) {
		t.Fatalf("Err after Release: %v", l.Err())
	}
	released := time.Now()
	waitFor(t, 2*ttl, "the unrenewed lease to run out", func() bool {
		return direct.Exists(ctx, "distlock:{cut}").Val() == 0
	})
	t.Logf("Release returned after %v (%v); the lease ran out %v later", took.Round(time.Millisecond), err, time.Since(released).Round(time.Millisecond))
	p.Heal()
	p.ResetAll()
}

// deadlineSlack is what the promise "every call returns within its
// deadline" allows on top of the deadline: a loaded 2-core machine under
// -race has delayed a timer's goroutine by 86 ms (promises_test.go), while
// a call that missed its deadline would wait for go-redis' 3 s read timeout
// or longer.
const deadlineSlack = 200 * time.Millisecond

// Every call returns within its context's deadline (plus deadlineSlack)
// whatever Redis does, with either go-redis timeout setting; the work that
// must still happen runs in the background, and Close leaves no goroutine.
func TestCallsReturnByDeadlineWhenRedisHangs(t *testing.T) {
	for _, timeouts := range []bool{false, true} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", timeouts), func(t *testing.T) {
			srv := redistest.Start(t)
			ignore := goleak.IgnoreCurrent()
			p := faultproxy.Start(t, srv.Addr)
			rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: timeouts, MaxRetries: -1})
			c := distlock.New(rdb)
			ctx := ctxT(t, 20*time.Second)
			held, err := c.Lock(ctx, "held", distlock.WithTTL(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			extended, err := c.Lock(ctx, "extended", distlock.WithTTL(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			far, err := c.Lock(ctx, "far", distlock.WithTTL(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			waiting := make(chan error, 1)
			go func() {
				wctx, cancel := context.WithTimeout(ctx, 600*time.Millisecond)
				defer cancel()
				start := time.Now()
				_, err := c.Lock(wctx, "held")
				if took := time.Since(start); took > 600*time.Millisecond+deadlineSlack {
					err = fmt.Errorf("waiting Lock returned %v after its 600ms deadline: %w", took-600*time.Millisecond, err)
				} else if !errors.Is(err, distlock.ErrNotObtained) && !errors.Is(err, distlock.ErrNoAnswer) || !errors.Is(err, context.DeadlineExceeded) {
					// (ErrNoAnswer when its first ask was out as Redis went silent)
					err = fmt.Errorf("waiting Lock: %w, want ErrNotObtained or ErrNoAnswer, and DeadlineExceeded", err)
				} else {
					err = nil
				}
				waiting <- err
			}()
			p.Blackhole()
			calls := map[string]func(context.Context) error{
				"TryLock": func(ctx context.Context) error { _, err := c.TryLock(ctx, "new"); return err },
				"Lock":    func(ctx context.Context) error { _, err := c.Lock(ctx, "new2"); return err },
				"Extend":  func(ctx context.Context) error { return extended.Extend(ctx, 5*time.Second) },
				"TTL":     func(ctx context.Context) error { _, err := extended.TTL(ctx); return err },
				"Release": func(ctx context.Context) error { return held.Release(ctx) },
			}
			for name, call := range calls {
				cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
				start := time.Now()
				err := call(cctx)
				took := time.Since(start)
				cancel()
				if err == nil || took > 200*time.Millisecond+deadlineSlack {
					t.Errorf("%s with Redis blackholed: %v after %v, want an error within 200ms+%v", name, err, took, deadlineSlack)
				}
				// Redis never answered: whether the lock is free is unknown.
				if (name == "TryLock" || name == "Lock") && (!errors.Is(err, distlock.ErrNoAnswer) || errors.Is(err, distlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded)) {
					t.Errorf("%s: %v, want ErrNoAnswer (not ErrNotObtained) and DeadlineExceeded", name, err)
				}
			}
			// A deadline far enough away for the call to run inline (with
			// ContextTimeoutEnabled), and Release's own bound of 2 s beyond
			// it: Release still returns at the deadline.
			fctx, cancel := context.WithTimeout(ctx, 600*time.Millisecond)
			start := time.Now()
			err = far.Release(fctx)
			if took := time.Since(start); err == nil || took > 600*time.Millisecond+deadlineSlack {
				t.Errorf("Release under a 600ms deadline with Redis blackholed: %v after %v, want an error within 600ms+%v", err, took, deadlineSlack)
			}
			cancel()
			if err := <-waiting; err != nil {
				t.Error(err)
			}
			p.Heal()
			p.ResetAll()
			c.Close()
			rdb.Close()
			p.Close()
			goleak.VerifyNone(t, ignore)
		})
	}
}

// Inspect, List, ForceRelease and Election.Leader return by their context's
// deadline whatever Redis does, like the lock calls above, with either
// go-redis timeout setting, on a single-node Client and on a quorum Client,
// which reads its first node. Under 200ms they run in a goroutine; 400ms is
// far enough for them to run inline with ContextTimeoutEnabled.
func TestAdminCallsReturnByDeadlineWhenRedisHangs(t *testing.T) {
	for _, timeouts := range []bool{false, true} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", timeouts), func(t *testing.T) {
			servers := redistest.StartN(t, 3)
			nodes := make([]redis.UniversalClient, len(servers))
			for i, s := range servers {
				rdb := redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: timeouts})
				t.Cleanup(func() { rdb.Close() })
				nodes[i] = rdb
			}
			single, quorum := distlock.New(nodes[0]), distlock.NewQuorum(nodes)
			t.Cleanup(func() {
				single.Close()
				quorum.Close()
			})
			e, err := single.NewElection("e")
			if err != nil {
				t.Fatal(err)
			}
			servers[0].Signal(syscall.SIGSTOP)
			t.Cleanup(func() { servers[0].Signal(syscall.SIGCONT) })
			type call struct {
				name string
				f    func(context.Context) error
			}
			var calls []call
			for cname, c := range map[string]*distlock.Client{"single": single, "quorum": quorum} {
				calls = append(calls,
					call{cname + " Inspect", func(ctx context.Context) error { _, err := c.Inspect(ctx, "k"); return err }},
					call{cname + " List", func(ctx context.Context) error { _, err := c.List(ctx, "*"); return err }},
					call{cname + " ForceRelease", func(ctx context.Context) error { _, err := c.ForceRelease(ctx, "k", 0); return err }})
			}
			calls = append(calls, call{"Leader", func(ctx context.Context) error { _, err := e.Leader(ctx); return err }})
			for _, deadline := range []time.Duration{200 * time.Millisecond, 400 * time.Millisecond} {
				for _, call := range calls {
					ctx, cancel := context.WithTimeout(context.Background(), deadline)
					took, err := timedCall(deadline+time.Second, func() error { return call.f(ctx) })
					cancel()
					if !errors.Is(err, context.DeadlineExceeded) || took > deadline+deadlineSlack {
						t.Errorf("%s under a %v deadline with Redis frozen: %v after %v, want DeadlineExceeded within %v+%v",
							call.name, deadline, err, took.Round(time.Millisecond), deadline, deadlineSlack)
					}
				}
			}
		})
	}
}

// LockAll that took some of its locks and then fails (the next one is not
// had by the deadline) returns by its deadline even when Redis hangs: the
// locks it gives back are deleted in the background, and, with nothing
// renewing them, their leases run out. It used to give them back under a
// context without the caller's deadline and wait up to 2 s for each.
func TestLockAllGivesBackByDeadlineWhenRedisHangs(t *testing.T) {
	const (
		deadline = time.Second
		ttl      = 2 * time.Second
	)
	for _, timeouts := range []bool{false, true} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", timeouts), func(t *testing.T) {
			srv := redistest.Start(t)
			direct := srv.Client(t)
			c, p := proxied(t, srv, timeouts)
			other := distlock.New(direct)
			t.Cleanup(func() { other.Close() })
			ctx := ctxT(t, 20*time.Second)
			if _, err := other.Lock(ctx, "b"); err != nil {
				t.Fatal(err)
			}
			lctx, cancel := context.WithTimeout(ctx, deadline)
			defer cancel()
			start := time.Now()
			res := make(chan error, 1)
			go func() {
				_, err := c.LockAll(lctx, []string{"b", "a"}, distlock.WithTTL(ttl))
				res <- err
			}()
			waitFor(t, deadline, "LockAll to take a", func() bool { return direct.Exists(ctx, "distlock:{a}").Val() == 1 })
			p.Blackhole() // b is still held: LockAll fails at its deadline and gives a back
			select {
			case err := <-res:
				took := time.Since(start)
				// (ErrNoAnswer when b's first ask was out as Redis went silent)
				if !errors.Is(err, distlock.ErrNotObtained) && !errors.Is(err, distlock.ErrNoAnswer) || !errors.Is(err, context.DeadlineExceeded) || took > deadline+deadlineSlack {
					t.Errorf("LockAll with Redis blackholed after its first lock: %v after %v, want ErrNotObtained or ErrNoAnswer, and DeadlineExceeded within %v+%v",
						err, took.Round(time.Millisecond), deadline, deadlineSlack)
				}
			case <-time.After(deadline + 5*time.Second):
				t.Fatal("LockAll did not return")
			}
			p.Heal()
			waitFor(t, 2*ttl, "the lock given back to be gone from Redis", func() bool { return direct.Exists(ctx, "distlock:{a}").Val() == 0 })
			p.ResetAll()
		})
	}
}

// Release (of a Lock, and of a MultiLock) under a context without a
// deadline gives up after 2s, as its doc says, with either go-redis
// timeout setting. A 30s ReadTimeout keeps
// go-redis itself waiting far longer.
func TestReleaseWithoutDeadlineGivesUpWhenRedisHangs(t *testing.T) {
	const bound = 2 * time.Second // "after 2 s if it has none"
	for _, timeouts := range []bool{false, true} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", timeouts), func(t *testing.T) {
			ignore := goleak.IgnoreCurrent()
			srv, c := frozenLater(t, timeouts)
			l, err := c.TryLock(ctxT(t, 5*time.Second), "k")
			if err != nil {
				t.Fatal(err)
			}
			m, err := c.TryLockAll(ctxT(t, 5*time.Second), []string{"m1", "m2", "m3"})
			if err != nil {
				t.Fatal(err)
			}
			srv.Signal(syscall.SIGSTOP)
			took, err := timedCall(bound+time.Second, func() error { return l.Release(context.Background()) })
			if err == nil || took > bound+deadlineSlack {
				t.Errorf("Release(context.Background()) with Redis frozen: %v after %v, want an error within %v+%v",
					err, took.Round(time.Millisecond), bound, deadlineSlack)
			}
			// The bound is the call's, not each lock's.
			took, err = timedCall(3*bound, func() error { return m.Release(context.Background()) })
			if err == nil || took > bound+deadlineSlack {
				t.Errorf("MultiLock.Release(context.Background()) of 3 locks with Redis frozen: %v after %v, want an error within %v+%v",
					err, took.Round(time.Millisecond), bound, deadlineSlack)
			}
			// The calls given up on end once Redis answers, and Close
			// leaves nothing running.
			srv.Signal(syscall.SIGCONT)
			if err := c.Close(); err != nil {
				t.Error(err)
			}
			if err := goleak.Find(ignore, goleak.IgnoreAnyFunction("os/exec.(*Cmd).Wait")); err != nil {
				t.Errorf("after Close and Redis thawed: %v", err)
			}
		})
	}
}

// Close returns within the 2×2s it gives background work while a renewal
// goes unanswered, with either go-redis timeout setting (its doc: "waits,
// for at most a few seconds"). A 30s ReadTimeout keeps go-redis itself
// waiting far longer.
func TestCloseReturnsWhileRenewalHangs(t *testing.T) {
	const (
		bound = 4 * time.Second
		ttl   = 1500 * time.Millisecond
	)
	for _, timeouts := range []bool{false, true} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", timeouts), func(t *testing.T) {
			ignore := goleak.IgnoreCurrent()
			srv, c := frozenLater(t, timeouts)
			l, err := c.TryLock(ctxT(t, 5*time.Second), "k", distlock.WithTTL(ttl))
			if err != nil {
				t.Fatal(err)
			}
			srv.Signal(syscall.SIGSTOP)
			// Lost fires at the validity deadline, when the renewal sent at
			// ttl/3 has gone unanswered: it is still in flight.
			select {
			case <-l.Lost():
			case <-time.After(2 * ttl):
				t.Fatalf("Lost did not fire within %v of Redis freezing", 2*ttl)
			}
			// Close ends at its 4s timer when the renewal hangs: the slack
			// is for a loaded machine waking it, beyond deadlineSlack.
			const slack = 500 * time.Millisecond
			took, err := timedCall(bound+2*time.Second, c.Close)
			if err != nil || took > bound+slack {
				t.Errorf("Close with a renewal in flight and Redis frozen: %v after %v, want nil within %v+%v",
					err, took.Round(time.Millisecond), bound, slack)
			}
			// What Close left running (the renewal's read) ends once Redis
			// answers: nothing stays behind.
			srv.Signal(syscall.SIGCONT)
			// (the test server's own process waiter is not the Client's)
			if err := goleak.Find(ignore, goleak.IgnoreAnyFunction("os/exec.(*Cmd).Wait")); err != nil {
				t.Errorf("after Close and Redis thawed: %v", err)
			}
		})
	}
}

// frozenLater returns a redis-server, to be frozen by the test, and a Client
// on it with go-redis' ContextTimeoutEnabled set to timeouts and a 30s
// ReadTimeout. The server is thawed first when the test ends.
func frozenLater(t *testing.T, timeouts bool) (*redistest.Server, *distlock.Client) {
	t.Helper()
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: timeouts, ReadTimeout: 30 * time.Second})
	t.Cleanup(func() { rdb.Close() })
	c := distlock.New(rdb)
	t.Cleanup(func() {
		srv.Signal(syscall.SIGCONT)
		c.Close()
	})
	return srv, c
}

var errStillRunning = errors.New("still running")

// timedCall runs call and returns how long it took and its error, waiting
// at most limit: a call still running then gives errStillRunning (and goes
// on in its goroutine).
func timedCall(limit time.Duration, call func() error) (time.Duration, error) {
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- call() }()
	timer := time.NewTimer(limit)
	defer timer.Stop()
	select {
	case err := <-done:
		return time.Since(start), err
	case <-timer.C:
		return time.Since(start), errStillRunning
	}
}

// A TryLock whose deadline ends while its acquire is on the wire: Redis
// grants it after the caller gave up. The grant must be given back as soon
// as its answer arrives, not block the key for the lease.
func TestGrantAfterCallerGaveUpIsGivenBack(t *testing.T) {
	srv := redistest.Start(t)
	direct := srv.Client(t)
	c, p := proxied(t, srv, true)
	ctx := ctxT(t, 10*time.Second)
	warm(t, ctx, c) // a connection, before the latency
	p.SetLatency(200 * time.Millisecond)
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := c.TryLock(short, "late"); !errors.Is(err, distlock.ErrNoAnswer) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("TryLock: %v, want ErrNoAnswer and DeadlineExceeded", err)
	}
	gaveUp := time.Now()
	waitFor(t, 600*time.Millisecond, "the grant to reach Redis", func() bool {
		return direct.Exists(ctx, "distlock:{late}").Val() == 1
	})
	waitFor(t, 2*time.Second, "the late grant to be given back", func() bool {
		return direct.Exists(ctx, "distlock:{late}").Val() == 0
	})
	t.Logf("the late grant was given back %v after the caller gave up (lease %v)", time.Since(gaveUp).Round(time.Millisecond), distlock.DefaultTTL)
}

// A waiter that gives up just before the holder's release hands it the
// lock: the handoff goes to a caller that is gone, and must be passed on at
// once, not held for the handoff's first lease.
func TestHandoffToWaiterThatGaveUpIsPassedOn(t *testing.T) {
	srv := redistest.Start(t)
	holderC, direct, ctx := distlock.New(srv.Client(t)), srv.Client(t), ctxT(t, 10*time.Second)
	defer holderC.Close()
	c, p := proxied(t, srv, true)
	holder, err := holderC.TryLock(ctx, "gone")
	if err != nil {
		t.Fatal(err)
	}
	warm(t, ctx, c)
	p.SetLatency(100 * time.Millisecond)
	wctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	defer cancel()
	got := acquireAsync(wctx, c, "gone")
	waitFor(t, 1500*time.Millisecond, "the waiter to line up", func() bool {
		return direct.LLen(ctx, "distlock:{gone}:line").Val() == 1
	})
	<-wctx.Done() // the waiter gives up; its leave is 100ms on the wire
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	if r := <-got; !errors.Is(r.err, context.DeadlineExceeded) {
		t.Fatalf("waiter: %v, %v", r.l, r.err)
	}
	waitFor(t, time.Second, "the key to be free again", func() bool {
		return direct.Exists(ctx, "distlock:{gone}").Val() == 0
	})
	t.Logf("free again %v after the release handed it to a waiter that had given up", time.Since(released).Round(time.Millisecond))
}

// warm opens c's connection by a lock and release on a key of its own.
func warm(t *testing.T, ctx context.Context, c *distlock.Client) {
	t.Helper()
	l, err := c.TryLock(ctx, "warm-up")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// Deadline churn: many goroutines with 1–200 ms deadlines on a few keys,
// with jitter on the wire. Mutual exclusion holds, every failure honours the
// error contract, and once everyone is done nothing is left in Redis: no
// grant made to a caller that gave up, no line.
func TestDeadlineChurn(t *testing.T) {
	srv := redistest.Start(t)
	direct := srv.Client(t)
	ctx := ctxT(t, 60*time.Second)
	const clients, goroutines, keys = 4, 25, 8
	const run = 2 * time.Second
	var (
		inside     [keys]atomic.Int32
		overlaps   atomic.Int32
		grants     atomic.Int64
		giveUps    atomic.Int64
		violations atomic.Int64
		example    atomic.Value
		wg         sync.WaitGroup
	)
	stopAt := time.Now().Add(run)
	for i := range clients {
		c, p := proxied(t, srv, i%2 == 0)
		p.SetJitter(time.Millisecond)
		for range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(stopAt) {
					k := rand.IntN(keys)
					lctx, cancel := context.WithTimeout(ctx, time.Duration(1+rand.IntN(200))*time.Millisecond)
					l, err := c.Lock(lctx, fmt.Sprintf("churn:%d", k))
					if err != nil {
						giveUps.Add(1)
						// ErrNoAnswer: the deadline (from 1 ms) passed before
						// the call's first answer came
						if lctx.Err() == nil || !errors.Is(err, distlock.ErrNotObtained) && !errors.Is(err, distlock.ErrNoAnswer) || !errors.Is(err, lctx.Err()) {
							violations.Add(1)
							example.Store(fmt.Sprintf("ctx err %v: %v", lctx.Err(), err))
						}
						cancel()
						continue
					}
					cancel()
					if inside[k].Add(1) != 1 {
						overlaps.Add(1)
					}
					grants.Add(1)
					time.Sleep(100 * time.Microsecond) // the critical section
					inside[k].Add(-1)
					if err := l.Release(ctx); err != nil {
						violations.Add(1)
						example.Store(fmt.Sprintf("release: %v", err))
					}
				}
			}()
		}
	}
	wg.Wait()
	t.Logf("%d grants (%.0f/s), %d give-ups", grants.Load(), float64(grants.Load())/run.Seconds(), giveUps.Load())
	if overlaps.Load() != 0 {
		t.Fatalf("%d overlapping holds", overlaps.Load())
	}
	if n := violations.Load(); n != 0 {
		t.Fatalf("%d calls broke the error contract, e.g. %v", n, example.Load())
	}
	if grants.Load() == 0 {
		t.Fatal("no grants at all")
	}
	waitFor(t, time.Second, "nothing but the fence counter left in Redis", func() bool {
		keys := direct.Keys(ctx, "*").Val()
		return len(keys) == 1 && keys[0] == "distlock:fence"
	})
}

// A quorum Client over links with 100ms round trips, go-redis cutting calls
// off at their context deadline (ContextTimeoutEnabled, as the README
// advises): it acquires at once, also on cold connections, and a node whose
// answer comes after the decision leaves nothing behind.
func TestQuorumOverSlowLinks(t *testing.T) {
	servers := redistest.StartN(t, 3)
	ctx := ctxT(t, 30*time.Second)
	nodes := make([]redis.UniversalClient, len(servers))
	proxies := make([]*faultproxy.Proxy, len(servers))
	for i, s := range servers {
		proxies[i] = faultproxy.Start(t, s.Addr)
		proxies[i].SetLatency(50 * time.Millisecond)
		rdb := redis.NewClient(&redis.Options{Addr: proxies[i].Addr(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { rdb.Close() })
		nodes[i] = rdb
	}
	c := distlock.NewQuorum(nodes)
	defer c.Close()
	start := time.Now()
	l, err := c.TryLock(ctx, "far")
	if err != nil {
		t.Fatalf("TryLock over 100ms links, cold connections: %v", err)
	}
	t.Logf("acquired in %v over 100ms round trips (cold connections)", time.Since(start).Round(time.Millisecond))
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// One node far slower than the decision wait: its grant comes late.
	proxies[2].SetLatency(600 * time.Millisecond)
	start = time.Now()
	l, err = c.Lock(ctx, "far")
	if err != nil {
		t.Fatalf("Lock with a slow node: %v", err)
	}
	t.Logf("acquired in %v with one node at 1.2s round trips", time.Since(start).Round(time.Millisecond))
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for i, s := range servers {
		rdb := s.Client(t)
		waitFor(t, 5*time.Second, fmt.Sprintf("node %d to hold no lock", i), func() bool {
			return rdb.Exists(ctx, "distlock:{far}").Val() == 0
		})
	}
}

// Lock.Context is cheap to call in a loop for a long-held lock: a context
// whose cancel was called is forgotten, so memory does not grow.
func TestContextCallsDoNotAccumulate(t *testing.T) {
	c, _, _ := setup(t)
	ctx := ctxT(t, 30*time.Second)
	l, err := c.Lock(ctx, "long", distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	for range 100_000 {
		_, stop := l.Context(ctx)
		stop()
	}
	// The registrations are dropped by context.AfterFunc goroutines: let
	// them run.
	var grew uint64
	waitFor(t, 5*time.Second, "the registrations to be dropped", func() bool {
		after := heap()
		grew = after - min(after, before)
		return grew < 2<<20
	})
	t.Logf("heap grew %d KiB over 100,000 Context calls", grew>>10)
}

// Extend's error names the call once, also when too few replicas
// acknowledged it.
func TestExtendErrorIsWrappedOnce(t *testing.T) {
	rs := redistest.StartReplicaSet(t)
	c := newLocks(t, rs.Master, distlock.WithReplicaAck(1, 100*time.Millisecond))
	ctx := ctxT(t, 10*time.Second)
	l, err := c.Lock(ctx, "k", distlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	rs.Replica.Signal(syscall.SIGSTOP)
	defer rs.Replica.Signal(syscall.SIGCONT)
	err = l.Extend(ctx, time.Minute)
	if !errors.Is(err, distlock.ErrNotReplicated) || strings.Count(err.Error(), `extend "k"`) != 1 {
		t.Fatalf("Extend error %q: want ErrNotReplicated, the call named once", err)
	}
}

// A lock handed over to a waiter that does not renew it keeps its whole
// TTL (the handoff's short first lease covers a TTL this short).
func TestHandedOverFixedLeaseLastsItsTTL(t *testing.T) {
	c, rdb, _ := setup(t)
	other := distlock.New(rdb)
	defer other.Close()
	ctx := ctxT(t, 10*time.Second)
	holder, err := c.TryLock(ctx, "fixed")
	if err != nil {
		t.Fatal(err)
	}
	const ttl = 1500 * time.Millisecond
	got := acquireAsync(ctx, other, "fixed", distlock.WithTTL(ttl), distlock.WithoutRenewal())
	waitFor(t, 2*time.Second, "the waiter to line up", func() bool {
		return rdb.LLen(ctx, "distlock:{fixed}:line").Val() == 1
	})
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := recv(t, got, 2*time.Second)
	select {
	case <-r.l.Lost():
		lostAfter := time.Since(r.at)
		t.Logf("handed-over fixed lease of %v lost %v after the grant", ttl, lostAfter.Round(time.Millisecond))
		if lostAfter < ttl*8/10 {
			t.Fatalf("lost %v after the grant, with a TTL of %v", lostAfter, ttl)
		}
	case <-time.After(2 * ttl):
		t.Fatal("a fixed lease was never declared lost")
	}
}

// A fair waiter whose re-ask finds the lock free behind a killed waiter's
// entry hands it to itself inside that attempt (the handoff skips the dead
// entry). The handoff set the lease, a short first one, so the Lock counts
// its validity from that lease, not from its TTL: it is renewed, or
// declared lost, before Redis lets the lock go.
func TestHandoffInsideTheAttemptKeepsItsShortLease(t *testing.T) {
	c, rdb, _ := setup(t)
	other := distlock.New(rdb)
	defer other.Close()
	ctx := ctxT(t, 15*time.Second)
	if _, err := other.TryLock(ctx, "self"); err != nil {
		t.Fatal(err)
	}
	got := acquireAsync(ctx, c, "self", distlock.WithFair()) // a TTL of 10 s
	waitFor(t, 2*time.Second, "the waiter to line up", func() bool {
		return rdb.LLen(ctx, "distlock:{self}:line").Val() == 1
	})
	// The holder dies (its lease ends, nobody is told) while a killed
	// waiter's entry is first in line.
	tx := rdb.TxPipeline()
	tx.LPush(ctx, "distlock:{self}:line", "dead deadclient 10000 x 0 0:")
	tx.Del(ctx, "distlock:{self}")
	if _, err := tx.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	r := recv(t, got, 3*time.Second) // the waiter asks again within a second
	if n := rdb.LLen(ctx, "distlock:{self}:line").Val(); n != 0 {
		t.Fatalf("%d entries left in line: the grant was no handoff", n)
	}
	select { // a handoff's first lease is 2 s at most
	case <-r.l.Lost():
		t.Fatalf("lost: %v", r.l.Err())
	case <-time.After(2*time.Second + 500*time.Millisecond):
	}
	if l, err := other.TryLock(ctx, "self"); err == nil {
		t.Fatalf("another Client took the lock (fence %d) while its holder (fence %d) was told nothing", l.Fence(), r.l.Fence())
	} else if !errors.Is(err, distlock.ErrNotObtained) {
		t.Fatal(err)
	}
	if err := r.l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// Concurrent Release calls on one Lock drop exactly one hold: the others
// get ErrNotHeld and the other reentrant hold stays.
func TestConcurrentReleaseDropsOneHold(t *testing.T) {
	c, rdb, _ := setup(t)
	ctx := ctxT(t, 10*time.Second)
	for range 20 {
		a, err := c.Lock(ctx, "twice", distlock.WithOwner("job"))
		if err != nil {
			t.Fatal(err)
		}
		b, err := c.Lock(ctx, "twice", distlock.WithOwner("job"))
		if err != nil {
			t.Fatal(err)
		}
		var ok, notHeld atomic.Int32
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				switch err := a.Release(ctx); {
				case err == nil:
					ok.Add(1)
				case errors.Is(err, distlock.ErrNotHeld):
					notHeld.Add(1)
				default:
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		if ok.Load() != 1 || notHeld.Load() != 7 {
			t.Fatalf("%d Release calls succeeded, %d got ErrNotHeld; want 1 and 7", ok.Load(), notHeld.Load())
		}
		if n := holdCount(t, rdb, "twice"); n != 1 || b.Err() != nil {
			t.Fatalf("%d holds left (other hold: %v), want 1 held", n, b.Err())
		}
		if err := b.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// A TryLock on a held lock is one script call, with no line work.
func TestTryLockIsOneCall(t *testing.T) {
	c, rdb, _ := setup(t)
	ctx := ctxT(t, 5*time.Second)
	if _, err := c.TryLock(ctx, "busy"); err != nil {
		t.Fatal(err)
	}
	waitHolders(t, rdb, 1)
	before := commandStats(t, rdb)
	if _, err := c.TryLock(ctx, "busy"); !errors.Is(err, distlock.ErrNotObtained) {
		t.Fatal(err)
	}
	after := commandStats(t, rdb)
	for _, cmd := range []string{"evalsha", "rpush", "lrem", "lpop", "subscribe"} {
		want := int64(0)
		if cmd == "evalsha" {
			want = 1
		}
		if d := after[cmd] - before[cmd]; d != want {
			t.Errorf("%d %s calls for a TryLock on a held lock, want %d", d, cmd, want)
		}
	}
}

// Lock calls racing Close leave no goroutine or subscription behind.
func TestLockRacingCloseLeavesNothing(t *testing.T) {
	srv := redistest.Start(t)
	holder := distlock.New(srv.Client(t))
	defer holder.Close()
	ctx := ctxT(t, 30*time.Second)
	if _, err := holder.TryLock(ctx, "busy", distlock.WithTTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	waitHolders(t, srv.Client(t), 1) // the holder's listener runs on
	ignore := goleak.IgnoreCurrent()
	for range 30 {
		rdb := redis.NewClient(srv.Options())
		c := distlock.New(rdb)
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// The lock is held for a minute: only Close ends the call.
				if _, err := c.Lock(ctx, "busy"); !errors.Is(err, distlock.ErrClosed) {
					t.Errorf("Lock racing Close: %v, want ErrClosed", err)
				}
			}()
		}
		runtime.Gosched()
		c.Close()
		waitGroupWithin(t, &wg, 5*time.Second, "Lock calls ended by Close")
		rdb.Close()
	}
	goleak.VerifyNone(t, ignore)
}

// A lock handed over to a waiter that does not renew it, with a TTL above
// the handoff's 2s first lease, is extended to its TTL before Lock
// returns: nothing would extend it later.
func TestHandedOverLongFixedLeaseIsExtendedToItsTTL(t *testing.T) {
	c, rdb, _ := setup(t)
	other := distlock.New(rdb)
	defer other.Close()
	ctx := ctxT(t, 10*time.Second)
	holder, err := c.TryLock(ctx, "fixed-long")
	if err != nil {
		t.Fatal(err)
	}
	const ttl = 5 * time.Second
	got := acquireAsync(ctx, other, "fixed-long", distlock.WithTTL(ttl), distlock.WithoutRenewal())
	waitFor(t, 2*time.Second, "the waiter to line up", func() bool {
		return rdb.LLen(ctx, "distlock:{fixed-long}:line").Val() == 1
	})
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := recv(t, got, 2*time.Second)
	// Read at once: the handoff alone would leave at most 2s.
	if left := rdb.PTTL(ctx, "distlock:{fixed-long}").Val(); left <= 2*time.Second+500*time.Millisecond {
		t.Fatalf("lease left in Redis just after the handoff: %v, want close to the %v TTL", left, ttl)
	}
	if r.l.Err() != nil {
		t.Fatalf("lost at once: %v", r.l.Err())
	}
	if err := r.l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A renewed hold with a TTL of minutes, handed over to a waiter, stays
// held: its first lease is the handoff's 2 s, and its first renewal's
// guard took the drift of its TTL (3 s for 5 min) as its margin, more
// than the lease had left. Redis refused every renewal as late, and the
// hold was lost (ErrUnreachable) within the 2 s, Redis up and the waiter's
// lease there; every handoff of a hold whose TTL is above about 100 s
// was, for each primitive (a lock, a write lock, a semaphore's permit).
func TestHandedOverLongLeaseIsRenewed(t *testing.T) {
	const ttl = 5 * time.Minute
	c, rdb, _ := setup(t)
	other := distlock.New(rdb)
	defer other.Close()
	ctx := ctxT(t, 30*time.Second)
	for _, k := range handoffKinds("long-handoff", ttl) {
		t.Run(k.name, func(t *testing.T) {
			r := handOver(t, ctx, rdb, k, c, other)
			defer r.l.Release(ctx)
			// The handoff's first lease is 2 s: a hold whose renewals are
			// refused is lost by then.
			select {
			case <-r.l.Lost():
				t.Fatalf("handed-over hold of TTL %v lost: %v", ttl, r.l.Err())
			case <-time.After(3 * time.Second):
			}
			if left, err := r.l.TTL(ctx); err != nil || left <= 2*time.Second {
				t.Fatalf("lease left %v (%v): renewal did not raise the handoff's lease to the TTL", left, err)
			}
		})
	}
}

// TestCloseReturnsWhileSubscriptionReconnectHangs: a waiting Client's
// subscription is cut (RST) while the network to Redis is a blackhole, so
// go-redis' reconnect hangs in its handshake for the ReadTimeout, holding
// the subscription's lock. Close must still return within its bound, as
// with a renewal in flight (it waited for the ReadTimeout before), and what
// it leaves running must end when go-redis gives up.
func TestCloseReturnsWhileSubscriptionReconnectHangs(t *testing.T) {
	const (
		bound, slack = 4 * time.Second, 500 * time.Millisecond
		readTimeout  = 2 * bound
	)
	ignore := goleak.IgnoreCurrent()
	srv := redistest.Start(t)
	p := faultproxy.Start(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ReadTimeout: readTimeout, MaxRetries: -1})
	defer rdb.Close()
	c := distlock.New(rdb)
	defer c.Close()
	direct := srv.Client(t)
	holder := distlock.New(direct)
	defer holder.Close()
	ctx := ctxT(t, 20*time.Second)
	l, err := holder.TryLock(ctx, "k", distlock.WithTTL(time.Minute), distlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	waitCtx, stopWaiting := context.WithCancel(ctx)
	got := acquireAsync(waitCtx, c, "k")
	waitSubscribed(t, direct, "k")

	p.Blackhole()
	p.ResetAll()
	// The listener reconnects at once, into the blackhole.
	waitFor(t, 2*time.Second, "a new connection through the proxy", func() bool { return p.Conns() > 0 })
	stopWaiting()
	select {
	case r := <-got:
		if r.err == nil {
			t.Fatal("the waiter took the lock through a blackhole")
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the waiter did not return 2s after its context ended")
	}
	start := time.Now()
	took, err := timedCall(bound+2*time.Second, c.Close)
	if err != nil || took > bound+slack {
		t.Errorf("Close with the subscription's reconnect hanging: %v after %v, want nil within %v+%v",
			err, took.Round(time.Millisecond), bound, slack)
	}
	t.Logf("Close returned after %v", took.Round(time.Millisecond))
	// What Close left running (the handshake's read, the waiter's clean-up)
	// ends at go-redis' ReadTimeout: the blackhole dropped their requests.
	p.Heal()
	must(t, l.Release(ctx))
	holder.Close()
	for until := time.Now().Add(readTimeout + 5*time.Second); ; {
		err := goleak.Find(ignore, goleak.IgnoreAnyFunction("os/exec.(*Cmd).Wait"),
			goleak.IgnoreAnyFunction("github.com/distlock/distlock/internal/faultproxy.(*link).read"),
			goleak.IgnoreAnyFunction("github.com/distlock/distlock/internal/faultproxy.(*link).write"),
			goleak.IgnoreAnyFunction("github.com/distlock/distlock/internal/faultproxy.(*Proxy).accept"))
		if err == nil {
			break
		}
		if time.Now().After(until) {
			t.Fatalf("%v after Close, past go-redis' ReadTimeout: %v", time.Since(start), err)
		}
	}
	t.Logf("all ended %v after Close began", time.Since(start))
}

// TestHandedOverLongLeaseSurvivesAFailedFirstRenewal: a hold of TTL 1 h
// handed over to a waiter runs on the handoff's 2 s first lease until its
// first renewal. That renewal meets an error (Redis busy with a slow script
// for a moment, BUSY, which go-redis does not retry); Redis answers again
// well within the lease. The retry must go out while the lease lasts: the
// lock is not lost, and renewal raises its lease to the TTL.
func TestHandedOverLongLeaseSurvivesAFailedFirstRenewal(t *testing.T) {
	const ttl, busy = time.Hour, 900 * time.Millisecond
	c, rdb, _ := setup(t)
	other := distlock.New(rdb)
	defer other.Close()
	ctx := ctxT(t, 30*time.Second)
	if err := rdb.ConfigSet(ctx, "busy-reply-threshold", "50").Err(); err != nil {
		t.Fatal(err)
	}
	for _, k := range handoffKinds("busy-handoff", ttl) {
		t.Run(k.name, func(t *testing.T) {
			// Released right after the waiter's ask: its first lease runs
			// 2 s from about now, and its first renewal is due 0.67 s on.
			r := handOver(t, ctx, rdb, k, c, other)
			defer r.l.Release(ctx)
			// Redis runs a slow script past the first renewal's time: every
			// command meanwhile gets BUSY. It ends 1 s before the lease.
			script := fmt.Sprintf(`local t = redis.call('TIME')
local t0 = t[1] * 1000 + t[2] / 1000
repeat t = redis.call('TIME') until t[1] * 1000 + t[2] / 1000 - t0 >= %d
return 1`, busy.Milliseconds())
			if err := rdb.Eval(ctx, script, nil).Err(); err != nil {
				t.Fatal(err)
			}
			select {
			case <-r.l.Lost():
				t.Fatalf("handed-over hold of TTL %v lost after a renewal failed with Redis busy for %v of its 2 s lease: %v", ttl, busy, r.l.Err())
			case <-time.After(3 * time.Second):
			}
			if left, err := r.l.TTL(ctx); err != nil || left <= 2*time.Second {
				t.Fatalf("lease left %v (%v): renewal did not raise the handoff's lease to the TTL", left, err)
			}
		})
	}
}

// TestWaitForAnAcquireSlotIsNotCountedAsRoundTrip: a Client lets a quarter
// of its pool's connections carry acquire calls; a call waits in the
// process for one of those slots before it is sent. A grant is refused as
// possibly run out when its answer comes later than its TTL (less drift)
// after the call was sent: that wait must not count, or every call of a
// short TTL queued behind a slow one fails though Redis answered it at
// once. Here the one slot is held 300 ms by a call that Redis holds up
// (CLIENT PAUSE); the call after it, on a free key with a 50 ms TTL, must
// get its lock, by TryLock and by Lock.
func TestWaitForAnAcquireSlotIsNotCountedAsRoundTrip(t *testing.T) {
	const pause = 300 * time.Millisecond
	srv := redistest.Start(t)
	admin := srv.Client(t)
	opts := srv.Options()
	opts.PoolSize = 4 // one acquire slot
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	c := distlock.New(rdb)
	defer c.Close()
	ctx := ctxT(t, 20*time.Second)
	for i, take := range []func(key string) (*distlock.Lock, error){
		func(key string) (*distlock.Lock, error) {
			return c.TryLock(ctx, key, distlock.WithTTL(distlock.MinRenewedTTL))
		},
		func(key string) (*distlock.Lock, error) {
			return c.Lock(ctx, key, distlock.WithTTL(distlock.MinRenewedTTL))
		},
	} {
		if err := admin.Do(ctx, "CLIENT", "PAUSE", pause.Milliseconds(), "WRITE").Err(); err != nil {
			t.Fatal(err)
		}
		idle := rdb.PoolStats().IdleConns
		slow := make(chan error, 1)
		go func() {
			l, err := c.TryLock(ctx, fmt.Sprint("slow", i), distlock.WithTTL(time.Minute))
			if err == nil {
				err = l.Release(ctx)
			}
			slow <- err
		}()
		waitFor(t, 2*time.Second, "the slow call to be sent", func() bool {
			s := rdb.PoolStats()
			return s.TotalConns > s.IdleConns && s.IdleConns < max(idle, 1)
		})
		l, err := take(fmt.Sprint("next", i))
		if err != nil {
			t.Fatalf("call %d, sent after waiting for the slow call's slot: %v", i, err)
		}
		_ = l.Release(ctx)
		if err := <-slow; err != nil {
			t.Fatal(err)
		}
	}
}

// renewalFailures is an Observer that sends the time of every renewal
// batch that failed.
type renewalFailures chan time.Time

func (renewalFailures) Start(ctx context.Context, _ distlock.EventKind, _ string) context.Context {
	return ctx
}

func (f renewalFailures) Observe(_ context.Context, e distlock.Event) {
	if e.Kind == distlock.EventRenewal && e.Failed > 0 {
		select {
		case f <- time.Now():
		default:
		}
	}
}

func (renewalFailures) Link(context.Context) string { return "" }

// TestLongLeaseRenewedWhenRedisIsBackBeforeItEnds: renewals of a lock of
// TTL 30 s fail (Redis busy with a slow script: BUSY) from its first one
// on. Redis answers again when less than a tenth of the TTL is left, right
// after a retry failed: that lease still has seconds to run, and renewal
// must keep the lock. Retries a tenth of the TTL apart (3 s here, 6 min
// for an hour) let it run out with Redis back.
func TestLongLeaseRenewedWhenRedisIsBackBeforeItEnds(t *testing.T) {
	const ttl = 30 * time.Second
	srv := redistest.Start(t)
	admin := srv.Client(t)
	failed := make(renewalFailures, 64)
	c := distlock.New(srv.Client(t), distlock.WithObserver(failed))
	defer c.Close()
	ctx := ctxT(t, ttl+20*time.Second)
	if err := admin.ConfigSet(ctx, "busy-reply-threshold", "50").Err(); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	l, err := c.TryLock(ctx, "k", distlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	// Lost no later than this, whatever the lock's own bound.
	valid := t0.Add(ttl - ttl/100)
	opts := srv.Options()
	opts.ReadTimeout = 2 * ttl
	slow := redis.NewClient(opts)
	defer slow.Close()
	busy := make(chan error, 1)
	go func() {
		// Busy until the test kills it, or just before the lease ends.
		busy <- slow.Eval(ctx, `repeat local t = redis.call('TIME') until t[1] * 1000 + t[2] / 1000 >= tonumber(ARGV[1]) return 1`,
			nil, valid.Add(-200*time.Millisecond).UnixMilli()).Err()
	}()
	for back := false; !back; {
		select {
		case at := <-failed:
			back = valid.Sub(at) < ttl/10
		case <-time.After(time.Until(valid)):
			t.Fatal("no renewal failed within the lease")
		}
	}
	if err := admin.Do(ctx, "SCRIPT", "KILL").Err(); err != nil {
		t.Fatal(err)
	}
	<-busy
	backAt := time.Now()
	select {
	case <-l.Lost():
		t.Fatalf("lost %v after Redis answered again, %v before the lease's end: %v", time.Since(backAt), valid.Sub(backAt), l.Err())
	case <-time.After(time.Until(valid) + 2*time.Second):
	}
	if left, err := l.TTL(ctx); err != nil || left < ttl/2 {
		t.Fatalf("lease left %v (%v): not renewed", left, err)
	}
}

// TestHandedOverFixedLeaseKeepsItsTTLWhenItsExtendFails: a waiter's lock
// WithoutRenewal, TTL 1 h, handed over on the handoff's 2 s first lease,
// is extended to its TTL before Lock returns. When Redis fails that extend
// (busy with a slow script: BUSY), nothing extends it later: Lock must not
// return it as it is, lost 2 s on, but get the lock with its TTL.
func TestHandedOverFixedLeaseKeepsItsTTLWhenItsExtendFails(t *testing.T) {
	const ttl, busy, latency = time.Hour, 600 * time.Millisecond, 300 * time.Millisecond
	srv := redistest.Start(t)
	admin := srv.Client(t)
	waiter, p := proxied(t, srv, false)
	holder := distlock.New(admin)
	defer holder.Close()
	ctx := ctxT(t, 30*time.Second)
	if err := admin.ConfigSet(ctx, "busy-reply-threshold", "20").Err(); err != nil {
		t.Fatal(err)
	}
	h, err := holder.Lock(ctx, "fixed", distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan lockResult, 1)
	go func() {
		l, err := waiter.Lock(ctx, "fixed", distlock.WithTTL(ttl), distlock.WithoutRenewal())
		got <- lockResult{l, err, time.Now()}
	}()
	waitFor(t, 3*time.Second, "the waiter to line up", func() bool {
		return admin.LLen(ctx, "distlock:{fixed}:line").Val() == 1
	})
	// The handoff's notice reaches the waiter at once; its extend reaches
	// Redis latency later, while the script runs.
	p.SetUpstreamLatency(latency)
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf(`local t = redis.call('TIME')
local t0 = t[1] * 1000 + t[2] / 1000
repeat t = redis.call('TIME') until t[1] * 1000 + t[2] / 1000 - t0 >= %d
return 1`, busy.Milliseconds())
	if err := admin.Eval(ctx, script, nil).Err(); err != nil {
		t.Fatal(err)
	}
	r := recv(t, got, 5*time.Second)
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.l.Release(ctx)
	select {
	case <-r.l.Lost():
		t.Fatalf("fixed lease of %v lost %v after Lock returned it: %v", ttl, time.Since(r.at), r.l.Err())
	case <-time.After(3 * time.Second):
	}
	if left, err := r.l.TTL(ctx); err != nil || left < ttl-time.Minute {
		t.Fatalf("lease left %v (%v), want about %v", left, err, ttl)
	}
}

// errorHook signals once a command of its client fails with an error that
// contains text.
type errorHook struct {
	text string
	once sync.Once
	seen chan struct{}
}

func (h *errorHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *errorHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err != nil && strings.Contains(err.Error(), h.text) {
			h.once.Do(func() { close(h.seen) })
		}
		return err
	}
}

func (h *errorHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestHandedOverFixedLeaseDoesNotSpinWhenItsExtendFails: a waiter's lock
// WithoutRenewal whose extend to its TTL fails at the handoff is dropped and
// asked for again (66b200b). When Redis keeps refusing writes but serves
// reads (min-replicas-to-write with its replicas gone: NOREPLICAS), the
// re-ask reads the handed grant without writing, and its extend fails
// again: the call must not ask again in a tight loop for as long as the
// grant's first lease lasts (3,579 script calls in it before), but wait a
// tenth of that lease between asks, as a failed renewal does (about 20).
func TestHandedOverFixedLeaseDoesNotSpinWhenItsExtendFails(t *testing.T) {
	const ttl, latency = time.Hour, 300 * time.Millisecond
	srv := redistest.Start(t)
	admin := srv.Client(t)
	waiter, p, wrdb := proxiedRedis(t, srv, false)
	hook := &errorHook{text: "NOREPLICAS", seen: make(chan struct{})}
	wrdb.AddHook(hook)
	holder := distlock.New(admin)
	defer holder.Close()
	ctx := ctxT(t, 30*time.Second)
	defer admin.ConfigSet(context.Background(), "min-replicas-to-write", "0")
	h, err := holder.Lock(ctx, "spin", distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	// The waiter gives up 3 s after the handoff, past its grant's 2 s
	// first lease.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	got := make(chan lockResult, 1)
	go func() {
		l, err := waiter.Lock(wctx, "spin", distlock.WithTTL(ttl), distlock.WithoutRenewal())
		got <- lockResult{l, err, time.Now()}
	}()
	waitFor(t, 3*time.Second, "the waiter to line up", func() bool {
		return admin.LLen(ctx, "distlock:{spin}:line").Val() == 1
	})
	// The handoff's notice reaches the waiter at once; its extend reaches
	// Redis latency later, once Redis refuses writes.
	p.SetUpstreamLatency(latency)
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := admin.ConfigSet(ctx, "min-replicas-to-write", "1").Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-hook.seen:
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter's extend did not fail")
	}
	p.SetUpstreamLatency(0)
	before := evalCalls(t, admin)
	time.AfterFunc(3*time.Second, cancel)
	var r lockResult
	select {
	case r = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("Lock did not return after its ctx ended")
	}
	calls := evalCalls(t, admin) - before
	if r.l != nil {
		r.l.Release(ctx)
	}
	t.Logf("Lock: %v; %d script calls in the 3 s after the failed extend", r.err, calls)
	if calls > 50 {
		t.Fatalf("%d script calls in 3 s: the call asked again in a tight loop", calls)
	}
}

// handoffKind is one primitive whose hold a release hands to a waiter:
// take takes it, line is its waiting line's key.
type handoffKind struct {
	name, line string
	take       func(c *distlock.Client, ctx context.Context) (*distlock.Lock, error)
}

// handoffKinds are a lock, a write lock and a semaphore's permit of name
// key, taken with ttl.
func handoffKinds(key string, ttl time.Duration) []handoffKind {
	return []handoffKind{
		{"lock", "distlock:{" + key + "}:line", func(c *distlock.Client, ctx context.Context) (*distlock.Lock, error) {
			return c.Lock(ctx, key, distlock.WithTTL(ttl))
		}},
		{"write", "distlock:rw{" + key + "}:line", func(c *distlock.Client, ctx context.Context) (*distlock.Lock, error) {
			return rwMutex(c, key).Lock(ctx, distlock.WithTTL(ttl))
		}},
		{"permit", "distlock:sem{" + key + "}:line", func(c *distlock.Client, ctx context.Context) (*distlock.Lock, error) {
			return semaphore1(c, key).Acquire(ctx, distlock.WithTTL(ttl))
		}},
	}
}

// handOver has holder take k, waiter line up for it, and holder release
// it; it returns the waiter's grant, which the release handed over.
func handOver(t *testing.T, ctx context.Context, rdb *redis.Client, k handoffKind, holder, waiter *distlock.Client) lockResult {
	t.Helper()
	h, err := k.take(holder, ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan lockResult, 1)
	go func() {
		l, err := k.take(waiter, ctx)
		got <- lockResult{l, err, time.Now()}
	}()
	waitFor(t, 2*time.Second, "the waiter to line up", func() bool {
		return rdb.LLen(ctx, k.line).Val() == 1
	})
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := recv(t, got, 2*time.Second)
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r
}
