package distlock_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/faultproxy"
	"github.com/distlock/distlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestRenewalOverSlowLinkKeepsLongLease: a 6 s lease over a link with
// 1.2 s round trips (600 ms each way, a fifth of the lease) is acquired
// fine and must stay renewed: every renewal has two thirds of the lease,
// 4 s, to come back. The README's Quickstart client (ContextTimeoutEnabled)
// is used.
func TestRenewalOverSlowLinkKeepsLongLease(t *testing.T) {
	const ttl, latency = 6 * time.Second, 600 * time.Millisecond
	srv := redistest.Start(t)
	ctx := ctxT(t, 60*time.Second)
	take := func(c *distlock.Client, ctx context.Context, opts ...distlock.Option) (*distlock.Lock, error) {
		return c.TryLock(ctx, "slow-link", opts...)
	}
	c, p := warmProxied(t, ctx, srv, take, ttl)
	p.SetLatency(latency)
	l, err := take(c, ctx, distlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	taken := time.Now()
	select {
	case <-l.Lost():
		t.Fatalf("a %v lease over a link with %v round trips was lost %v after it was taken: %v", ttl, 2*latency, time.Since(taken).Round(time.Millisecond), l.Err())
	case <-time.After(3 * ttl):
	}
}

// TestShortLeaseDoesNotSinkRenewalBatch: one Client holds a 1 s lease over a
// link with 60 ms round trips (a renewal has 660 ms to come back) while
// other goroutines of the same program take 90 ms leases that cannot be
// renewed over that link (each is lost, as it should be). The 1 s lock must
// not be lost with them: a renewal batch's deadline is its earliest
// lock's, so every batch that carries a doomed short lease fails for all.
func TestShortLeaseDoesNotSinkRenewalBatch(t *testing.T) {
	const ttl, short, latency = time.Second, 90 * time.Millisecond, 30 * time.Millisecond
	srv := redistest.Start(t)
	ctx := ctxT(t, 60*time.Second)
	take := func(c *distlock.Client, ctx context.Context, opts ...distlock.Option) (*distlock.Lock, error) {
		return c.TryLock(ctx, "long", opts...)
	}
	obs := &renewLog{}
	c, p := proxiedWithOptions(t, ctx, srv, 100, distlock.WithObserver(obs))
	p.SetLatency(latency)
	l, err := take(c, ctx, distlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	defer func() {
		if t.Failed() {
			t.Log(obs.dump())
		}
	}()
	taken := time.Now()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var shortLost atomic.Int64
	for g := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				s, err := c.TryLock(ctx, fmt.Sprintf("short-%d-%d", g, n), distlock.WithTTL(short))
				if err != nil {
					continue
				}
				go func() {
					select {
					case <-s.Lost():
						shortLost.Add(1)
					case <-stop:
					}
				}()
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	select {
	case <-l.Lost():
		t.Fatalf("the %v lease (round trip %v) was lost %v after it was taken, with %d short leases lost meanwhile: %v",
			ttl, 2*latency, time.Since(taken).Round(time.Millisecond), shortLost.Load(), l.Err())
	case <-time.After(10 * ttl):
		t.Logf("%d short leases lost, the long one held", shortLost.Load())
		t.Log(obs.dump())
	}
}

// proxiedWithOptions is warmProxied for a Client with options: its connections
// and scripts are set up before the caller sets a delay.
func proxiedWithOptions(t *testing.T, ctx context.Context, srv *redistest.Server, pool int, opts ...distlock.ClientOption) (*distlock.Client, *faultproxy.Proxy) {
	t.Helper()
	p := faultproxy.Start(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true, PoolSize: pool})
	c := distlock.New(rdb, opts...)
	t.Cleanup(func() {
		c.Close()
		rdb.Close()
	})
	warm, err := c.TryLock(ctx, "warm-up")
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Extend(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := warm.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 { // a few pipeline connections
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = rdb.Pipelined(ctx, func(p redis.Pipeliner) error { return p.Ping(ctx).Err() })
		}()
	}
	wg.Wait()
	return c, p
}

// renewLog records renewal batches.
type renewLog struct {
	mu     sync.Mutex
	events []string
	start  time.Time
}

func (r *renewLog) Start(ctx context.Context, _ distlock.EventKind, _ string) context.Context {
	return ctx
}
func (r *renewLog) Link(context.Context) string { return "" }
func (r *renewLog) Observe(_ context.Context, e distlock.Event) {
	if e.Kind != distlock.EventRenewal {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.start.IsZero() {
		r.start = time.Now()
	}
	if len(r.events) < 4000 {
		r.events = append(r.events, fmt.Sprintf("%v batch=%d failed=%d lag=%v err=%v", time.Since(r.start).Round(time.Millisecond), e.Batch, e.Failed, e.Lag.Round(time.Millisecond), e.Err))
	}
}
func (r *renewLog) dump() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.events, "\n")
}

// TestRenewedAfterFailedShorteningExtend: Extend to a shorter lease
// fails on a network blip (its call times out while the link drops
// everything; the lease in Redis is untouched). Lock.Extend's doc: "the
// lock stays held and renewed, valid for the shorter of its old lease and
// ttl until a renewal confirms it". Once the link is back, renewal must
// confirm the lock; it must not run out unrenewed at the shortened deadline.
func TestRenewedAfterFailedShorteningExtend(t *testing.T) {
	const ttl, shorter = 30 * time.Second, 2 * time.Second
	srv := redistest.Start(t)
	direct := srv.Client(t)
	ctx := ctxT(t, 60*time.Second)
	c, p := proxiedWithOptions(t, ctx, srv, 0)
	l, err := c.TryLock(ctx, "blip", distlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	p.Blackhole()
	short, cancel := context.WithTimeout(ctx, 400*time.Millisecond)
	err = l.Extend(short, shorter)
	cancel()
	if err == nil {
		t.Fatal("Extend through a blackhole succeeded")
	}
	p.Heal()
	p.ResetAll()
	t.Logf("Extend during the blip: %v; lease left in Redis: %v", err, direct.PTTL(ctx, "distlock:{blip}").Val())
	healed := time.Now()
	select {
	case <-l.Lost():
		t.Fatalf("lost %v after the link came back, never renewed (lease left in Redis %v): %v",
			time.Since(healed).Round(time.Millisecond), direct.PTTL(ctx, "distlock:{blip}").Val(), l.Err())
	case <-time.After(3 * shorter):
	}
}

// TestTenThousandLocksShareOneScheduler: 10,000 held locks of mixed TTLs, taken
// and released concurrently, add no goroutines, none is lost, and once
// released (or the Client closed) the renewer keeps none of them.
func TestTenThousandLocksShareOneScheduler(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, PoolSize: 64})
	t.Cleanup(func() { rdb.Close() })
	c := distlock.New(rdb)
	ctx := ctxT(t, 4*time.Minute)
	ttls := []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, time.Hour}
	first, err := c.TryLock(ctx, "first") // starts the renewer
	if err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()
	const n = 10_000
	locks := make([]*distlock.Lock, n)
	var collected atomic.Int64
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 8 {
				l, err := c.TryLock(ctx, fmt.Sprintf("k%d", i), distlock.WithTTL(ttls[i%len(ttls)]))
				if err != nil {
					t.Error(err)
					return
				}
				runtime.SetFinalizer(l, func(*distlock.Lock) { collected.Add(1) })
				locks[i] = l
				if i%3 == 0 { // churn: some go at once
					if err := l.Release(ctx); err != nil {
						t.Error(err)
					}
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	time.Sleep(2 * time.Second) // several renewals of the short ones
	during := runtime.NumGoroutine()
	for i, l := range locks {
		if i%3 != 0 && l.Err() != nil {
			t.Fatalf("lock %s (ttl %v) lost while held: %v", l.Key(), ttls[i%len(ttls)], l.Err())
		}
	}
	t.Logf("goroutines: %d with 1 lock, %d with %d", before, during, n*2/3)
	if during > before+5 {
		t.Errorf("%d goroutines with 1 lock held, %d with %d", before, during, n*2/3)
	}
	// Release half of the rest, Close with the others held.
	for i, l := range locks {
		if i%3 == 1 {
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	time.Sleep(1500 * time.Millisecond) // past pendingDrain
	c.Close()
	for i, l := range locks {
		if i%3 == 2 && !errors.Is(l.Err(), distlock.ErrClosed) {
			t.Fatalf("lock %d after Close: %v", i, l.Err())
		}
	}
	clear(locks)
	deadline := time.Now().Add(10 * time.Second)
	for collected.Load() < n && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(50 * time.Millisecond)
	}
	if got := collected.Load(); got < n {
		t.Fatalf("%d of %d Locks still referenced after their Release or Close", n-got, n)
	}
	_ = first
}

// TestGrantExpiredBeforeAnswerIsNotObtained: a grant whose lease ran out in
// Redis before its answer came back (a 20 ms lease over a link with 40 ms
// each way) must not be handed to the caller as held: the README promises
// that Lost() is closed "as soon as the lock is known lost — including when
// no renewal was confirmed before the lease could have run out in Redis, so
// before anyone else can take it", and the local deadline (send time + TTL
// - drift) passed before TryLock returned. A quorum Client refuses such a
// grant (quorum.attempt's valid()); the single-node path returns it held.
func TestGrantExpiredBeforeAnswerIsNotObtained(t *testing.T) {
	const ttl, latency = 20 * time.Millisecond, 40 * time.Millisecond
	srv := redistest.Start(t)
	other := distlock.New(srv.Client(t))
	t.Cleanup(func() { other.Close() })
	ctx := ctxT(t, 60*time.Second)
	c, p := proxiedWithOptions(t, ctx, srv, 0)
	p.SetLatency(latency)
	held := 0
	for i := range 10 {
		key := fmt.Sprintf("gone-%d", i)
		sent := time.Now()
		// (WithoutRenewal: a renewed lease must be at least MinRenewedTTL)
		l, err := c.TryLock(ctx, key, distlock.WithTTL(ttl), distlock.WithoutRenewal())
		if errors.Is(err, distlock.ErrInvalidTTL) {
			t.Fatal(err)
		}
		if err != nil {
			continue // refused: fine
		}
		lostAtReturn := l.Err() != nil
		// Another process takes the lock while this holder has not been told.
		o, oerr := other.TryLock(ctx, key, distlock.WithTTL(time.Second))
		if !lostAtReturn && oerr == nil {
			held++
			t.Logf("TryLock returned %v after sending, with Err() nil, a lock another client then took at once (holder's Err() once the other had it: %v)", time.Since(sent).Round(time.Millisecond), l.Err())
		}
		if o != nil {
			_ = o.Release(ctx)
		}
		_ = l.Release(ctx)
	}
	if held > 0 {
		t.Fatalf("%d of 10 TryLocks returned as held (Err() nil, Lost() open) a grant whose lease had already run out in Redis", held)
	}
}

// TestExtendWithEndedContextChangesNothing: Extend called with a context
// that has already ended returns its error and changes nothing (its doc:
// "If ctx ends meanwhile, Extend returns its error and changes nothing"),
// neither the lease in Redis nor the lease that renewal keeps. It sent the
// extend all the same (in the background, for a context without a
// deadline), or, run inline, kept its TTL for the next renewal: either
// way the lock went on renewed with the hour that the caller was told it
// did not get, and would block the key for an hour after a crash.
func TestExtendWithEndedContextChangesNothing(t *testing.T) {
	const ttl = 300 * time.Millisecond
	c, rdb, _ := setup(t)
	ctx := ctxT(t, 20*time.Second)
	for _, tc := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
	}{
		{"cancelled, no deadline", func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) }},
		{"cancelled, far deadline", func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 10*time.Second) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "ended-extend-" + strings.ReplaceAll(tc.name, " ", "")
			l, err := c.TryLock(ctx, key, distlock.WithTTL(ttl))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Release(ctx)
			ectx, cancel := tc.ctx()
			cancel()
			if err := l.Extend(ectx, time.Hour); !errors.Is(err, context.Canceled) {
				t.Fatalf("Extend with a cancelled context: %v, want context.Canceled", err)
			}
			// Renewals go out every ttl/3: over 5 TTLs the lease must stay
			// the lock's own (polling Redis).
			for end := time.Now().Add(5 * ttl); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
				if left := rdb.PTTL(ctx, "distlock:{"+key+"}").Val(); left > ttl {
					t.Fatalf("lease left in Redis %v after an Extend that returned context.Canceled, want at most %v", left, ttl)
				}
			}
			if err := l.Err(); err != nil {
				t.Fatalf("lock lost: %v", err)
			}
		})
	}
}

// TestRenewedAfterFailedLengtheningExtend is
// TestRenewedAfterFailedShorteningExtend for an Extend to a far longer
// lease: its call times out while the link drops everything, so the lease
// in Redis is still the short one. Once the link is back, renewal must
// confirm the lock. The renewal after a call that may have landed is
// refused and tells the lease left; that bound, and the retry's guard,
// took their drift margin from the hour asked for (36 s), not from the
// few seconds left, so the bound lay in the past and every retry was
// refused: the lock was lost (ErrUnreachable) with Redis up and its lease
// there.
func TestRenewedAfterFailedLengtheningExtend(t *testing.T) {
	const ttl, longer = 3 * time.Second, time.Hour
	srv := redistest.Start(t)
	direct := srv.Client(t)
	ctx := ctxT(t, 60*time.Second)
	c, p := proxiedWithOptions(t, ctx, srv, 0)
	l, err := c.TryLock(ctx, "blip-longer", distlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	p.Blackhole()
	short, cancel := context.WithTimeout(ctx, 400*time.Millisecond)
	err = l.Extend(short, longer)
	cancel()
	if err == nil {
		t.Fatal("Extend through a blackhole succeeded")
	}
	p.Heal()
	p.ResetAll()
	t.Logf("Extend during the blip: %v; lease left in Redis: %v", err, direct.PTTL(ctx, "distlock:{blip-longer}").Val())
	healed := time.Now()
	select {
	case <-l.Lost():
		t.Fatalf("lost %v after the link came back (lease left in Redis %v): %v",
			time.Since(healed).Round(time.Millisecond), direct.PTTL(ctx, "distlock:{blip-longer}").Val(), l.Err())
	case <-time.After(3 * ttl):
	}
	if left := direct.PTTL(ctx, "distlock:{blip-longer}").Val(); left <= ttl {
		t.Fatalf("lease left in Redis %v: renewal did not take up the %v that Extend set as the lease to keep", left, longer)
	}
}
