package distlock_test

// Review (area: API misuse and concurrent calls on one lock): reproduction
// tests. Each fails on the code as reviewed and passes once its bug is fixed.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/faultproxy"
	"github.com/distlock/distlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// apiEdgeCall runs f and returns its error, or its panic as one.
func apiEdgeCall(f func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return f()
}

// A semaphore (or read-write lock) whose shared holds' leases run out
// together, more than about 8,000 of them, breaks the next script that
// prunes them: prune in lua/shared.lua deletes their grants with
// HDEL(unpack(gone)), and Lua's unpack cannot push that many values. The
// call fails with a raw Redis error instead of granting a free permit (a
// Release would fail the same way and leave its permit held), and since
// ZREMRANGEBYSCORE ran before the error, the dead holds' grants stay in the
// hash for as long as the semaphore stays in use.
func TestAPISemaphoreManyExpiredHolds(t *testing.T) {
	const (
		short = 8100 // holds whose leases end together
		ttl   = 8 * time.Second
	)
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := ctxT(t, 2*time.Minute)
	// Several Clients, so that the permits are taken quickly: each Client
	// runs a quarter of its pool's acquires at once.
	var clients []*distlock.Client
	for range 4 {
		c := distlock.New(redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true}))
		t.Cleanup(func() { c.Close() })
		clients = append(clients, c)
	}
	sem, err := clients[0].NewSemaphore("big", 20000)
	if err != nil {
		t.Fatal(err)
	}
	live, err := sem.TryAcquire(ctx, distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer live.Release(ctx)

	start := time.Now()
	var wg sync.WaitGroup
	var taken atomic.Int32
	errs := make(chan error, 1)
	for w := range 16 {
		s, _ := clients[w%len(clients)].NewSemaphore("big", 20000)
		wg.Go(func() {
			for taken.Add(1) <= short {
				if _, err := s.TryAcquire(ctx, distlock.WithTTL(ttl), distlock.WithoutRenewal()); err != nil {
					select {
					case errs <- err:
					default:
					}
					return
				}
			}
		})
	}
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatalf("taking %d permits: %v", short, err)
	default:
	}
	if took := time.Since(start); took > ttl-time.Second {
		t.Skipf("taking %d permits took %v, too close to their %v lease: the machine is too slow for this test", short, took, ttl)
	}
	// Wait until every short lease has ended (each began before its
	// TryAcquire returned), with room for the server's clock.
	until := time.Now().Add(ttl + 500*time.Millisecond)
	for time.Now().Before(until) {
		time.Sleep(100 * time.Millisecond)
		if ctx.Err() != nil {
			t.Fatal(ctx.Err())
		}
	}
	l, err := sem.TryAcquire(ctx, distlock.WithTTL(time.Minute))
	if err != nil {
		t.Errorf("TryAcquire of a semaphore with 20000 permits and 1 live holder, after %d holds' leases ended: %v", short, err)
	} else {
		l.Release(ctx)
	}
	if _, err := sem.TryAcquire(ctx, distlock.WithTTL(time.Minute)); err != nil {
		t.Fatalf("second TryAcquire: %v", err)
	}
	// The grants of dead holds must not stay behind in the hash.
	n, err := rdb.HLen(ctx, "distlock:sem{big}:d").Result()
	if err != nil {
		t.Fatal(err)
	}
	if n > 10 {
		t.Errorf("the semaphore's grants hash keeps %d fields for 2 live holds", n)
	}
}

// WithTTL accepts any lease from 1ms ("must be in [1ms, MaxTTL]";
// ErrInvalidTTL is "for a TTL below a millisecond"), but a lease of up to
// about 2ms is shorter than its own drift margin (TTL/100 + 2ms): every
// grant's local validity has passed before Redis answers, so every grant
// is given back and every call fails with ErrNotObtained, on a free lock.
// NewMutex validates its options "so that Lock cannot fail on bad input
// later", and then Mutex.Lock retries for ever.
func TestAPITinyTTLIsNeverGranted(t *testing.T) {
	c, _, _ := setup(t)
	ctx := ctxT(t, 30*time.Second)
	for _, ttl := range []time.Duration{time.Millisecond, 2 * time.Millisecond} {
		l, err := c.TryLock(ctx, fmt.Sprintf("tiny-%v", ttl), distlock.WithTTL(ttl))
		switch {
		case errors.Is(err, distlock.ErrInvalidTTL):
		case err != nil:
			t.Errorf("TryLock of a free lock with WithTTL(%v): %v; want a grant or ErrInvalidTTL", ttl, err)
		default:
			l.Release(ctx)
		}
	}
	m, err := c.NewMutex("tiny-mutex", distlock.WithTTL(time.Millisecond))
	if errors.Is(err, distlock.ErrInvalidTTL) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	locked := make(chan error, 1)
	go func() {
		locked <- apiEdgeCall(func() error {
			m.Lock()
			m.Unlock()
			return nil
		})
	}()
	select {
	case err := <-locked:
		if err != nil {
			t.Errorf("Mutex.Lock with WithTTL(1ms): %v", err)
		}
	case <-time.After(5 * time.Second):
		c.Close() // Mutex.Lock then panics (recovered above) and its goroutine ends
		<-locked
		t.Errorf("Mutex.Lock of a free lock with WithTTL(1ms), accepted by NewMutex, has not returned after 5s")
	}
}

// A zero Client (new(distlock.Client), or a Client field never set with
// New) panics on every method, Close included, where a zero RWMutex,
// Semaphore and Election return ErrNilClient and a Client on a nil Redis
// client returns ErrNilClient.
func TestAPIZeroClientDoesNotPanic(t *testing.T) {
	ctx := ctxT(t, 5*time.Second)
	c := new(distlock.Client)
	calls := []struct {
		name string
		f    func() error
	}{
		{"TryLock", func() error { _, err := c.TryLock(ctx, "k"); return err }},
		{"Lock", func() error { _, err := c.Lock(ctx, "k"); return err }},
		{"TryLockAll", func() error { _, err := c.TryLockAll(ctx, []string{"a", "b"}); return err }},
		{"LockAll", func() error { _, err := c.LockAll(ctx, []string{"a", "b"}); return err }},
		{"NewMutex", func() error { _, err := c.NewMutex("k"); return err }},
		{"NewRWMutex", func() error { _, err := c.NewRWMutex("k"); return err }},
		{"NewSemaphore", func() error { _, err := c.NewSemaphore("k", 2); return err }},
		{"NewElection", func() error { _, err := c.NewElection("k"); return err }},
		{"Inspect", func() error { _, err := c.Inspect(ctx, "k"); return err }},
		{"List", func() error { _, err := c.List(ctx, "*"); return err }},
		{"ForceRelease", func() error { _, err := c.ForceRelease(ctx, "k", 0); return err }},
	}
	for _, call := range calls {
		if err := apiEdgeCall(call.f); !errors.Is(err, distlock.ErrNilClient) {
			t.Errorf("zero Client.%s: %v; want ErrNilClient", call.name, err)
		}
	}
	if err := apiEdgeCall(c.Close); err != nil {
		t.Errorf("zero Client.Close: %v", err)
	}
}

// A zero Lock panics in Release, Extend and TTL, where a nil *Lock returns
// ErrNotHeld; a zero MultiLock's Lost blocks for ever, where a nil one's is
// closed and its Release says ErrNotHeld (it holds nothing), and its Err
// was nil and its Context live, as if it held every lock; and a nil
// *Leadership panicked in the methods it got from *Lock (Release, Extend,
// TTL, Lost, Err, Context, Fence), while its own Proclaim and Resign
// returned ErrNotHeld.
func TestAPIZeroHoldsDoNotPanicOrHang(t *testing.T) {
	ctx := ctxT(t, 5*time.Second)
	var l distlock.Lock
	calls := []struct {
		name string
		f    func() error
	}{
		{"zero Lock.Release", func() error { return l.Release(ctx) }},
		{"zero Lock.Extend", func() error { return l.Extend(ctx, time.Second) }},
		{"zero Lock.TTL", func() error { _, err := l.TTL(ctx); return err }},
	}
	for _, call := range calls {
		if err := apiEdgeCall(call.f); !errors.Is(err, distlock.ErrNotHeld) {
			t.Errorf("%s: %v; want ErrNotHeld", call.name, err)
		}
	}
	var m distlock.MultiLock
	if err := m.Release(ctx); !errors.Is(err, distlock.ErrNotHeld) {
		t.Fatalf("zero MultiLock.Release: %v", err)
	}
	select {
	case <-m.Lost():
	case <-time.After(time.Second):
		t.Errorf("zero MultiLock.Lost: not closed after 1s, although the MultiLock holds nothing (Release: ErrNotHeld)")
	}
	// Nor may its Err or Context say that it holds: work would start
	// unprotected under them.
	if err := m.Err(); !errors.Is(err, distlock.ErrNotHeld) {
		t.Errorf("zero MultiLock.Err: %v; want ErrNotHeld", err)
	}
	mctx, cancel := m.Context(ctx)
	defer cancel()
	if !errors.Is(context.Cause(mctx), distlock.ErrNotHeld) {
		t.Errorf("zero MultiLock.Context: cause %v; want ErrNotHeld", context.Cause(mctx))
	}
	var ld *distlock.Leadership // a failed Campaign's
	leadership := []struct {
		name string
		f    func() error
	}{
		{"Release", func() error { return ld.Release(ctx) }},
		{"Extend", func() error { return ld.Extend(ctx, time.Second) }},
		{"TTL", func() error { _, err := ld.TTL(ctx); return err }},
		{"Err", ld.Err},
		{"Lost", func() error { <-ld.Lost(); return distlock.ErrNotHeld }},
		{"Context", func() error { c, stop := ld.Context(ctx); defer stop(); return context.Cause(c) }},
		{"Fence", func() error { _ = ld.Fence() + int64(len(ld.Key()+ld.Token())); return distlock.ErrNotHeld }},
		{"Resign", func() error { return ld.Resign(ctx) }},
		{"Proclaim", func() error { return ld.Proclaim(ctx, "v") }},
	}
	for _, call := range leadership {
		if err := apiEdgeCall(call.f); !errors.Is(err, distlock.ErrNotHeld) {
			t.Errorf("nil Leadership.%s: %v; want ErrNotHeld", call.name, err)
		}
	}
}

// Close promises that "waiting Lock calls return ErrClosed" and waits "for
// at most a few seconds" (4 s). A Lock waiting under a context that never
// ends, whose re-ask is stuck on a hung Redis, runs that re-ask inline on
// the caller's goroutine (detached: ctx.Done() == nil), which nothing but
// go-redis' ReadTimeout ends: with go-redis' defaults it returns some 9 s
// after Close (ReadTimeout 3 s, retries), and never with ReadTimeout -1.
func TestAPICloseEndsWaitingLockOnHungRedis(t *testing.T) {
	srv := redistest.Start(t)
	holder := distlock.New(srv.Client(t))
	t.Cleanup(func() { holder.Close() })
	ctx := ctxT(t, time.Minute)
	if _, err := holder.TryLock(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	p := faultproxy.Start(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	c := distlock.New(rdb)
	t.Cleanup(func() { c.Close() })

	done := make(chan error, 1)
	go func() { _, err := c.Lock(context.Background(), "k"); done <- err }()
	// Wait until it is in line, then hang Redis: its next re-ask (at most
	// a second later) is stuck.
	waitFor := time.Now().Add(10 * time.Second)
	for {
		info, err := holder.Inspect(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if info.Queued == 1 {
			break
		}
		if time.Now().After(waitFor) {
			t.Fatal("the Lock call did not line up")
		}
		time.Sleep(10 * time.Millisecond)
	}
	p.Blackhole()
	time.Sleep(1500 * time.Millisecond)
	closed := time.Now()
	c.Close()
	const bound = 4*time.Second + time.Second // Close's bound, and slack for a loaded machine
	select {
	case err := <-done:
		took := time.Since(closed)
		if !errors.Is(err, distlock.ErrClosed) || took > bound {
			t.Errorf("waiting Lock returned %v after Close: %v; want ErrClosed within %v", took, err, bound)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("waiting Lock has not returned 30s after Close")
	}
}

// Client configurations distlock cannot keep its promises on are refused
// with ErrInvalidOption (found in review): a Ring, which hashes keys to its
// shards on the client and moves them when a shard comes or goes (List
// scanned one shard: 9 of 20 holds), and a key prefix ending with a kind's
// part of a key, under which prefix "app"'s read-write lock "orders" and
// prefix "apprw"'s lock "orders" were the same key.
func TestRefusedClientConfigurations(t *testing.T) {
	srv := redistest.Start(t)
	ctx := ctxT(t, 10*time.Second)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": srv.Addr}})
	defer ring.Close()
	clients := map[string]*distlock.Client{
		"ring": distlock.New(ring),
	}
	for _, prefix := range []string{"apprw", "app:sem", "x:elect"} {
		clients["prefix "+prefix] = distlock.New(srv.Client(t), distlock.WithKeyPrefix(prefix))
		clients["quorum prefix "+prefix] = distlock.NewQuorum([]redis.UniversalClient{srv.Client(t), srv.Client(t), srv.Client(t)}, distlock.WithKeyPrefix(prefix))
	}
	for name, c := range clients {
		if _, err := c.TryLock(ctx, "orders"); !errors.Is(err, distlock.ErrInvalidOption) {
			t.Errorf("%s: TryLock: %v, want ErrInvalidOption", name, err)
		}
		c.Close()
	}
	for _, prefix := range []string{"app:", "app", "apprw:", "sem-"} {
		c := distlock.New(srv.Client(t), distlock.WithKeyPrefix(prefix))
		l, err := c.TryLock(ctx, "orders")
		if err != nil {
			t.Errorf("prefix %q: %v", prefix, err)
		} else {
			must(t, l.Release(ctx))
		}
		c.Close()
	}
}
