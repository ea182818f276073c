package distlock_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/fence"
	"github.com/distlock/distlock/internal/faultproxy"
	"github.com/distlock/distlock/internal/redistest"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// TestPausedHolderIsFenced freezes a holder process with SIGSTOP between its
// read and its write, for twice its lease. Meanwhile this process takes the
// lock and debits the balance. The resumed holder then writes what it
// computed before the pause: without the guard that silently overwrites the
// other debit (the lost update the pause causes); with it, the write is
// refused with fence.ErrStale.
func TestPausedHolderIsFenced(t *testing.T) {
	for _, guarded := range []bool{false, true} {
		t.Run(fmt.Sprintf("guard=%v", guarded), func(t *testing.T) {
			testPausedHolder(t, guarded)
		})
	}
}

func testPausedHolder(t *testing.T, guarded bool) {
	c, rdb, srv := setup(t)
	ctx := ctxT(t, 15*time.Second)
	const ttl = 500 * time.Millisecond
	rdb.Set(ctx, "balance", 100, 0)
	guardEnv := "DISTLOCK_GUARD=0"
	if guarded {
		guardEnv = "DISTLOCK_GUARD=1"
	}
	holder := startHelper(t, "pausedwriter", "DISTLOCK_ADDR="+srv.Addr,
		"DISTLOCK_KEY=account", "DISTLOCK_TTL="+ttl.String(), guardEnv)
	staleFence, _ := strconv.ParseInt(holder.expect(t, "fence=", 5*time.Second), 10, 64)
	if read := holder.expect(t, "read=", 5*time.Second); read != "100" {
		t.Fatalf("holder read balance %s, want 100", read)
	}

	// The holder has read 100 and means to write 70. Freeze it there.
	if err := holder.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	defer holder.cmd.Process.Signal(syscall.SIGCONT) // never leave it frozen

	l, err := c.Lock(ctx, "account") // granted when the frozen holder's lease runs out
	if err != nil {
		t.Fatal(err)
	}
	if l.Fence() <= staleFence {
		t.Fatalf("new fence %d not above the frozen holder's %d", l.Fence(), staleFence)
	}
	bal, _ := rdb.Get(ctx, "balance").Int()
	if guarded {
		err = fence.NewGuard(rdb).Set(ctx, l.Fence(), "balance", bal-50, 0)
	} else {
		err = rdb.Set(ctx, "balance", bal-50, 0).Err()
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("took the lock %v after freezing the holder (its ttl %v)", time.Since(stopped).Round(time.Millisecond), ttl)

	time.Sleep(time.Until(stopped.Add(2 * ttl))) // the pause lasts 2×TTL, as a long GC or VM stall would
	if err := holder.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(holder.stdin, "go\n"); err != nil {
		t.Fatal(err)
	}

	write := holder.expect(t, "write=", 5*time.Second)
	release := holder.expect(t, "release=", 5*time.Second)
	lost := holder.expect(t, "lost=", 5*time.Second)
	holder.wait(t, 5*time.Second)
	t.Logf("resumed holder: write=%s release=%s lost=%s", write, release, lost)

	if release != "ErrNotHeld" {
		t.Errorf("stale holder's Release: %s, want ErrNotHeld", release)
	}
	if !strings.HasPrefix(lost, "fired") {
		t.Errorf("stale holder's Lost(): %s, want fired", lost)
	}
	if info, _ := c.Inspect(ctx, "account"); info.Owner != l.Token() {
		t.Errorf("after the stale Release the lock's owner is %q, want this process's token", info.Owner)
	}
	if err := l.Release(ctx); err != nil {
		t.Errorf("current holder's Release: %v", err)
	}
	final, _ := rdb.Get(ctx, "balance").Int()
	if guarded {
		if write != "ErrStaleFence" {
			t.Errorf("stale holder's guarded write: %s, want ErrStaleFence", write)
		}
		if final != 50 {
			t.Errorf("balance %d, want 50: the stale write went through", final)
		}
	} else {
		if write != "ok" {
			t.Errorf("stale holder's unguarded write: %s, want ok", write)
		}
		if final != 70 {
			t.Errorf("balance %d, want 70 (the new holder's debit overwritten); the run does not show the harm", final)
		}
	}
}

// helperPausedWriter takes DISTLOCK_KEY, reads "balance", waits for a line
// on stdin (the test freezes it meanwhile) and then writes balance-30, with
// the fence guard if DISTLOCK_GUARD=1. It reports write, release and loss.
func helperPausedWriter(c *distlock.Client, rdb *redis.Client) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := c.Lock(ctx, os.Getenv("DISTLOCK_KEY"), distlock.WithTTL(envDuration("DISTLOCK_TTL", time.Second)))
	if err != nil {
		return err
	}
	bal, err := rdb.Get(ctx, "balance").Int()
	if err != nil {
		return err
	}
	fmt.Printf("fence=%d\nread=%d\n", l.Fence(), bal)
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return err
	}
	if os.Getenv("DISTLOCK_GUARD") == "1" {
		err = fence.NewGuard(rdb).Set(ctx, l.Fence(), "balance", bal-30, 0)
	} else {
		err = rdb.Set(ctx, "balance", bal-30, 0).Err()
	}
	fmt.Printf("write=%s\n", errName(err))
	fmt.Printf("release=%s\n", errName(l.Release(ctx)))
	select {
	case <-l.Lost():
		fmt.Printf("lost=fired cause=%v\n", l.Err())
	case <-time.After(5 * time.Second):
		fmt.Printf("lost=not fired\n")
	}
	return nil
}

func errName(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, fence.ErrStale):
		return "ErrStaleFence"
	case errors.Is(err, distlock.ErrNotHeld):
		return "ErrNotHeld"
	}
	return err.Error()
}

// TestLostFiresBeforeServerExpiry freezes redis-server (SIGSTOP) under a
// renewed lock: no renewal can be confirmed, and Lost must fire before the
// lease runs out on the server, whose absolute expiry PEXPIRETIME reads just
// before the freeze.
func TestLostFiresBeforeServerExpiry(t *testing.T) {
	c, rdb, srv := setup(t)
	ctx := ctxT(t, 40*time.Second)
	// The drift margin, ttl/100 + 2ms = 102ms, is all the room a loaded
	// machine has to wake the renewer and this goroutine (the CLI's version
	// of this test once ran 95ms late, see cmd/distlock/claims_test.go).
	const ttl = 10 * time.Second
	l, err := c.TryLock(ctx, "lease", distlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(ttl / 2) // work long enough for a renewal to have happened
	if l.Err() != nil {
		t.Fatalf("lock lost before the freeze: %v", l.Err())
	}
	// A renewal processed after this read only moves the expiry later, so
	// the margin measured below is a lower bound.
	expiry, err := rdb.PExpireTime(ctx, "distlock:{lease}").Result()
	if err != nil || expiry <= 0 {
		t.Fatalf("PEXPIRETIME: %v, %v", expiry, err)
	}
	srv.Signal(syscall.SIGSTOP)
	frozen := time.Now()
	defer srv.Signal(syscall.SIGCONT)

	select {
	case <-l.Lost():
	case <-time.After(2 * ttl):
		t.Fatalf("Lost() did not fire within %v of Redis freezing", 2*ttl)
	}
	lostAt := time.Now()
	srv.Signal(syscall.SIGCONT)

	serverExpiry := time.UnixMilli(int64(expiry / time.Millisecond))
	margin := serverExpiry.Sub(lostAt)
	t.Logf("Lost() fired %v after Redis froze, %v before the server-side expiry (ttl %v, drift margin %v)",
		lostAt.Sub(frozen).Round(time.Millisecond), margin.Round(100*time.Microsecond), ttl, ttl/100+2*time.Millisecond)
	if margin <= 0 {
		t.Fatalf("Lost() fired %v after the lease ran out on the server", -margin)
	}
	if d := lostAt.Sub(frozen); d > ttl {
		t.Fatalf("Lost() fired %v after Redis froze, more than one ttl", d)
	}
	if !errors.Is(l.Err(), distlock.ErrUnreachable) {
		t.Fatalf("cause %v, want ErrUnreachable", l.Err())
	}
	work, stop := l.Context(ctx)
	defer stop()
	if !errors.Is(context.Cause(work), distlock.ErrUnreachable) {
		t.Fatalf("context cause %v, want ErrUnreachable", context.Cause(work))
	}
}

// TestRenewalOutlivesTTL holds a lock across 5× its TTL of work, with a
// waiter that must get it only on release, and checks that no renewal
// traffic follows the release.
func TestRenewalOutlivesTTL(t *testing.T) {
	c, rdb, srv := setup(t)
	ctx := ctxT(t, 15*time.Second)
	const ttl = 300 * time.Millisecond
	l, err := c.TryLock(ctx, "long-job", distlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	other := distlock.New(srv.Client(t))
	t.Cleanup(func() { other.Close() })
	got := make(chan time.Time, 1)
	go func() {
		w, err := other.Lock(ctx, "long-job", distlock.WithTTL(ttl), distlock.WithoutRenewal())
		if err != nil {
			t.Error(err)
			close(got)
			return
		}
		at := time.Now()
		w.Release(ctx)
		got <- at
	}()
	before := evalCalls(t, rdb)
	time.Sleep(5 * ttl) // the long work
	select {
	case <-l.Lost():
		t.Fatalf("lost during work: %v", l.Err())
	case <-got:
		t.Fatal("the waiter got the lock while it was held")
	default:
	}
	if left, err := l.TTL(ctx); err != nil || left <= 0 { // (a loaded machine may renew late: not lost is the claim)
		t.Fatalf("after 5×ttl of work: ttl left %v, %v", left, err)
	}
	renewals := evalCalls(t, rdb) - before
	t.Logf("%d script calls in 5×ttl (renewals at ttl/3 and the waiter's polls)", renewals)

	released := time.Now()
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case at, ok := <-got:
		if !ok {
			t.FailNow()
		}
		t.Logf("waiter got the lock %v after the release", at.Sub(released).Round(time.Millisecond))
	case <-time.After(2 * ttl):
		t.Fatal("the waiter did not get the lock within 2×ttl of the release")
	}

	// Renewal must stop with the release: no script call at all while
	// nothing is held (the waiter released at once and had no renewal).
	idle := evalCalls(t, rdb)
	time.Sleep(3 * ttl) // a window of several renewal periods
	if n := evalCalls(t, rdb) - idle; n != 0 {
		t.Fatalf("%d script calls in 3×ttl after the release", n)
	}
	if n := rdb.Exists(ctx, "distlock:{long-job}").Val(); n != 0 {
		t.Fatal("lock key still present after release")
	}
}

// evalCalls is the number of EVAL and EVALSHA calls the server has run.
func evalCalls(t *testing.T, rdb *redis.Client) int64 {
	t.Helper()
	stats := commandStats(t, rdb)
	return stats["evalsha"] + stats["eval"]
}

// commandStats reads INFO commandstats: command name -> calls.
func commandStats(t testing.TB, rdb *redis.Client) map[string]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	stats := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				stats[strings.TrimPrefix(name, "cmdstat_")], _ = strconv.ParseInt(v, 10, 64)
			}
		}
	}
	return stats
}

// TestManyCyclesLeaveNothingBehind runs 10,000 lock/release cycles with
// renewal on, some of them held long enough to be renewed, and checks that
// Close leaves no goroutine and that nothing but the node's one fence
// counter is left in Redis.
func TestManyCyclesLeaveNothingBehind(t *testing.T) {
	c0, rdb, srv := setup(t) // the server and its watcher goroutine predate the check
	c0.Close()
	ignore := goleak.IgnoreCurrent()
	ctx := ctxT(t, 60*time.Second)

	conn := redis.NewClient(srv.Options())
	c := distlock.New(conn)
	const workers, cycles, keysPerWorker = 4, 10_000, 50
	const ttl = 300 * time.Millisecond // short, yet with room for a loaded machine
	errs := make(chan error, workers)
	before := evalCalls(t, rdb)
	for w := range workers {
		go func() {
			for i := range cycles / workers {
				key := fmt.Sprintf("cycle:%d:%d", w, i%keysPerWorker)
				l, err := c.Lock(ctx, key, distlock.WithTTL(ttl))
				if err != nil {
					errs <- err
					return
				}
				if i%500 == 0 {
					time.Sleep(ttl) // held past ttl/3: renewed at least once
				}
				if err := l.Release(ctx); err != nil {
					errs <- fmt.Errorf("cycle %d of %s: %w", i, key, err)
					return
				}
			}
			errs <- nil
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	renewals := evalCalls(t, rdb) - before - 2*cycles
	t.Logf("%d cycles, %d renewals", cycles, renewals)
	if renewals < cycles/500 {
		t.Fatalf("only %d renewals: the long holds were not renewed", renewals)
	}
	c.Close()
	conn.Close()
	goleak.VerifyNone(t, ignore)

	if keys := rdb.Keys(ctx, "*").Val(); len(keys) != 1 || keys[0] != "distlock:fence" {
		t.Fatalf("left in Redis: %v, want only distlock:fence", keys)
	}
}

// TestRenewalAfterScriptFlush: Redis forgets the scripts (SCRIPT FLUSH, what
// a restarted or failed-over server has) again and again while a lock is
// held; the renewer's pipeline finds its extend script gone, loads it and
// renews, and the lock outlives its TTL many times over.
func TestRenewalAfterScriptFlush(t *testing.T) {
	c, rdb, _ := setup(t)
	ctx := ctxT(t, 10*time.Second)
	const ttl = 300 * time.Millisecond
	l, err := c.TryLock(ctx, "flushed-renewal", distlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ { // the long work: 5×ttl, a flush every ttl/2
		if err := rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(ttl / 2)
	}
	select {
	case <-l.Lost():
		t.Fatalf("lost during work: %v", l.Err())
	default:
	}
	if left, err := l.TTL(ctx); err != nil || left <= 0 { // (a loaded machine may renew late: not lost is the claim)
		t.Fatalf("after 5×ttl of work: ttl left %v, %v", left, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// The late grant of TestLateRenewalDoesNotOutliveTheLoss and
// TestExtendLandingAfterTheLoss: every request reaches Redis lateUpstream
// after it was sent, under a lease of lateTTL.
const (
	lateTTL      = 3 * time.Second
	lateUpstream = 2 * time.Second
)

// TestLateRenewalDoesNotOutliveTheLoss delays every request on its way to
// Redis by 2s (answers come back at once) under a 3s lease. The grant
// reaches Redis 2s after it was sent, so the server's lease ends 2s later
// than the local deadline, which counts from the send. The first renewal,
// sent when the grant comes back, reaches Redis after that deadline, once
// Lost has fired, but while the lease is still on. Applied, it would keep
// the lease for a holder that was told it lost it, and nobody else could
// take the lock for another TTL. Its guard must refuse it: another client
// gets the lock once the grant's own lease ends. Each primitive's extend
// script is covered: a lock (extend_head.lua), a write lock and a read lock
// (both branches of shared_extend.lua) and a semaphore's permit.
func TestLateRenewalDoesNotOutliveTheLoss(t *testing.T) {
	const ttl, upstream = lateTTL, lateUpstream
	srv := redistest.Start(t)
	other := distlock.New(srv.Client(t))
	t.Cleanup(func() { other.Close() })
	kinds := []struct {
		name  string
		take  take
		taken func(c *distlock.Client, ctx context.Context) (*distlock.Lock, error) // by another client, at once
	}{
		{"lock", func(c *distlock.Client, ctx context.Context, opts ...distlock.Option) (*distlock.Lock, error) {
			return c.TryLock(ctx, "late-lock", opts...)
		}, func(c *distlock.Client, ctx context.Context) (*distlock.Lock, error) {
			return c.TryLock(ctx, "late-lock")
		}},
		{"write", func(c *distlock.Client, ctx context.Context, opts ...distlock.Option) (*distlock.Lock, error) {
			return rwMutex(c, "late-write").TryLock(ctx, opts...)
		}, func(c *distlock.Client, ctx context.Context) (*distlock.Lock, error) {
			return rwMutex(c, "late-write").TryLock(ctx)
		}},
		{"read", func(c *distlock.Client, ctx context.Context, opts ...distlock.Option) (*distlock.Lock, error) {
			return rwMutex(c, "late-read").TryRLock(ctx, opts...)
		}, func(c *distlock.Client, ctx context.Context) (*distlock.Lock, error) {
			return rwMutex(c, "late-read").TryLock(ctx)
		}},
		{"permit", func(c *distlock.Client, ctx context.Context, opts ...distlock.Option) (*distlock.Lock, error) {
			return semaphore1(c, "late-permit").TryAcquire(ctx, opts...)
		}, func(c *distlock.Client, ctx context.Context) (*distlock.Lock, error) {
			return semaphore1(c, "late-permit").TryAcquire(ctx)
		}},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			ctx := ctxT(t, 30*time.Second)
			l, sent := lateGrant(t, ctx, srv, k.take, ttl, upstream)
			serverEnd := sent.Add(upstream + ttl) // the grant reached Redis no earlier than sent+upstream
			select {
			case <-l.Lost():
			case <-time.After(time.Until(sent.Add(ttl + ttl/2))):
				t.Fatalf("Lost did not fire by ttl+ttl/2 after the grant was sent")
			}
			if !errors.Is(l.Err(), distlock.ErrUnreachable) {
				t.Fatalf("cause %v, want ErrUnreachable", l.Err())
			}
			// The renewal reaches Redis about upstream after the grant
			// came back, before serverEnd; applied, it would keep the
			// lease until about sent+2*upstream+ttl.
			giveUp := serverEnd.Add(ttl / 3)
			for {
				got, err := k.taken(other, ctx)
				if err == nil {
					t.Logf("taken by another client %v after the grant's lease ended", time.Since(serverEnd).Round(time.Millisecond))
					_ = got.Release(ctx)
					break
				}
				if !errors.Is(err, distlock.ErrNotObtained) {
					t.Fatal(err)
				}
				if time.Now().After(giveUp) {
					t.Fatalf("still held %v after the grant's lease ended: a renewal that arrived after Lost fired kept it", time.Since(serverEnd).Round(time.Millisecond))
				}
				time.Sleep(20 * time.Millisecond) // polling Redis
			}
		})
	}
}

// An Extend that fails after it was sent (its ctx ended while the link
// held it up) may still land in Redis and set a lease of its TTL, which
// the guard of the last confirmed call does not cover: the renewal that
// follows, held up past Lost, found that lease and renewed it for nobody.
func TestFailedExtendThenLateRenewalDoesNotOutliveTheLoss(t *testing.T) {
	const ttl, upstream = 3 * time.Second, 2500 * time.Millisecond
	srv := redistest.Start(t)
	ctx := ctxT(t, 30*time.Second)
	take := func(c *distlock.Client, ctx context.Context, opts ...distlock.Option) (*distlock.Lock, error) {
		return c.TryLock(ctx, "failed-extend", opts...)
	}
	c, p := warmProxied(t, ctx, srv, take, ttl)
	l, err := take(c, ctx, distlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	p.SetUpstreamLatency(upstream)
	ectx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	err = l.Extend(ectx, ttl) // reaches Redis later, before the loss
	cancel()
	if err == nil {
		t.Fatal("Extend succeeded through a link that holds requests for 2.5 s")
	}
	select {
	case <-l.Lost():
	case <-time.After(2 * ttl):
		t.Fatal("Lost did not fire")
	}
	lostAt := time.Now()
	// The renewal sent after the failed Extend reaches Redis about
	// upstream after it was sent, after Lost fired.
	time.Sleep(upstream) // a due time in the proxy, nothing to poll
	at, err := srv.Client(t).Do(ctx, "PEXPIRETIME", "distlock:{failed-extend}").Int64()
	if err != nil {
		t.Fatal(err)
	}
	if setAt := time.UnixMilli(at).Add(-ttl); at > 0 && setAt.After(lostAt) {
		t.Fatalf("the lease Redis has was set %v after Lost fired (cause %v): a renewal renewed it for nobody",
			setAt.Sub(lostAt).Round(time.Millisecond), l.Err())
	}
}

// rwMutex and semaphore1 make primitives whose names are valid.
func rwMutex(c *distlock.Client, name string) *distlock.RWMutex {
	rw, err := c.NewRWMutex(name)
	if err != nil {
		panic(err)
	}
	return rw
}

func semaphore1(c *distlock.Client, name string) *distlock.Semaphore {
	s, err := c.NewSemaphore(name, 1)
	if err != nil {
		panic(err)
	}
	return s
}

type take func(c *distlock.Client, ctx context.Context, opts ...distlock.Option) (*distlock.Lock, error)

// warmProxied returns a Client whose requests to srv go through the proxy
// it also returns, with its connections and scripts (Extend's is the
// renewal's) set up by a hold of take under ttl: before a delay is set,
// since each would then cost a delayed round trip.
func warmProxied(t *testing.T, ctx context.Context, srv *redistest.Server, take take, ttl time.Duration) (*distlock.Client, *faultproxy.Proxy) {
	t.Helper()
	c, p, rdb := proxiedRedis(t, srv, true)
	warm, err := take(c, ctx, distlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Extend(ctx, ttl); err != nil {
		t.Fatal(err)
	}
	if err := warm.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Renewals are pipelines, which go-redis sends on connections of their
	// own: set one up too.
	if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error { return p.Ping(ctx).Err() }); err != nil {
		t.Fatal(err)
	}
	return c, p
}

// lateGrant takes a hold with take under lease ttl through a proxy that
// delays every request to srv by upstream, from a Client whose connections
// and scripts were set up before the delay. It returns the hold and when
// its grant was sent.
func lateGrant(t *testing.T, ctx context.Context, srv *redistest.Server, take take, ttl, upstream time.Duration) (*distlock.Lock, time.Time) {
	t.Helper()
	c, p := warmProxied(t, ctx, srv, take, ttl)
	p.SetUpstreamLatency(upstream)
	sent := time.Now()
	l, err := take(c, ctx, distlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	return l, sent
}

// TestExtendLandingAfterTheLoss sets up the grant of
// TestLateRenewalDoesNotOutliveTheLoss and calls Extend as the grant comes
// back. Extend carries no guard: it reaches Redis after Lost fired, while
// the lease is still on, and renews it. It must not report success for a
// lock that was declared lost, and the Release that follows must free the
// lease it renewed, so that another client gets the lock at once.
func TestExtendLandingAfterTheLoss(t *testing.T) {
	const ttl, upstream = lateTTL, lateUpstream
	srv := redistest.Start(t)
	other := distlock.New(srv.Client(t))
	t.Cleanup(func() { other.Close() })
	ctx := ctxT(t, 30*time.Second)
	l, _ := lateGrant(t, ctx, srv, func(c *distlock.Client, ctx context.Context, opts ...distlock.Option) (*distlock.Lock, error) {
		return c.TryLock(ctx, "late-extend", opts...)
	}, ttl, upstream)
	err := l.Extend(ctx, ttl)
	select {
	case <-l.Lost():
	default:
		t.Fatalf("Extend returned (%v) before the loss it was meant to land after", err)
	}
	if !errors.Is(err, distlock.ErrNotHeld) {
		t.Fatalf("Extend that landed after Lost fired: %v, want ErrNotHeld", err)
	}
	if _, err := other.TryLock(ctx, "late-extend"); !errors.Is(err, distlock.ErrNotObtained) {
		t.Fatalf("the late Extend did not renew the lease (TryLock: %v): the test proves nothing", err)
	}
	_ = l.Release(ctx) // the program's deferred Release
	got, err := other.TryLock(ctx, "late-extend")
	if err != nil {
		t.Fatalf("after Release of the lost lock: %v", err)
	}
	_ = got.Release(ctx)
}

// TestExtendWaitsForRenewalInFlight: an Extend called while a renewal of
// the same lock is in flight goes out only once the renewal's answer is
// back. Calls that set a lease never overlap, so no renewal is sent with a
// guard that an Extend in flight would make too small (docs/design.md,
// "A renewal that arrives too late does not apply").
func TestExtendWaitsForRenewalInFlight(t *testing.T) {
	const ttl, latency = 3 * time.Second, 300 * time.Millisecond
	srv := redistest.Start(t)
	seen := monitorLines(t, srv.Addr)
	ctx := ctxT(t, 30*time.Second)
	take := func(c *distlock.Client, ctx context.Context, opts ...distlock.Option) (*distlock.Lock, error) {
		return c.TryLock(ctx, "serial", opts...)
	}
	c, p := warmProxied(t, ctx, srv, take, ttl)
	l, err := take(c, ctx, distlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	p.SetLatency(latency)
	// The renewal goes out about ttl/3 after the grant, with the lease in
	// ms; once Redis has run it, its answer is latency away.
	renewed := awaitCall(t, seen, l.Token(), strconv.Itoa(int(ttl.Milliseconds())), 10*time.Second)
	if err := l.Extend(ctx, 2*ttl); err != nil {
		t.Fatal(err)
	}
	extended := awaitCall(t, seen, l.Token(), strconv.Itoa(int(2*ttl.Milliseconds())), 10*time.Second)
	// Sent at once, the Extend would reach Redis about latency after the
	// renewal; sent after the renewal's answer, at least 2*latency after.
	if gap := extended.Sub(renewed); gap < 3*latency/2 {
		t.Fatalf("the Extend reached Redis %v after the renewal, so it went out before the renewal's answer (%v away) came back", gap, latency)
	} else {
		t.Logf("the Extend reached Redis %v after the renewal (%v each way)", gap.Round(time.Millisecond), latency)
	}
}

// monitorLines returns what MONITOR on addr shows, line by line, until the
// test ends.
func monitorLines(t *testing.T, addr string) <-chan string {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1024)
	go func() {
		defer close(lines)
		r := bufio.NewReader(conn)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			lines <- strings.TrimSpace(line)
		}
	}()
	return lines
}

// awaitCall waits for a script call of token whose arguments include ms,
// and returns when Redis ran it, by its own clock.
func awaitCall(t *testing.T, lines <-chan string, token, ms string, within time.Duration) time.Time {
	t.Helper()
	timeout := time.After(within)
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatal("MONITOR ended")
			}
			if !strings.Contains(line, `"evalsha"`) || !strings.Contains(line, `"`+token+`" "`+ms+`"`) {
				continue
			}
			stamp, _, _ := strings.Cut(strings.TrimPrefix(line, "+"), " ")
			sec, err := strconv.ParseFloat(stamp, 64)
			if err != nil {
				t.Fatalf("MONITOR line %q: %v", line, err)
			}
			return time.UnixMicro(int64(sec * 1e6))
		case <-timeout:
			t.Fatalf("no call of %s with %s ms within %v", token, ms, within)
		}
	}
}

// TestShortestRenewedLease: a renewed lock needs a lease that its renewal
// can keep (MinRenewedTTL): one of 3 to 8 ms was always lost at its first
// TTL on a loopback Redis, its renewal refused by the guard, and reported
// unreachable. Shorter leases are refused unless WithoutRenewal; one of
// MinRenewedTTL stays held on a healthy Redis for 40 leases.
func TestShortestRenewedLease(t *testing.T) {
	c, _, _ := setup(t)
	ctx := ctxT(t, 30*time.Second)
	short := distlock.MinRenewedTTL - time.Millisecond
	if _, err := c.TryLock(ctx, "short", distlock.WithTTL(short)); !errors.Is(err, distlock.ErrInvalidTTL) {
		t.Fatalf("TryLock WithTTL(%v), renewed: %v, want ErrInvalidTTL", short, err)
	}
	fixed, err := c.TryLock(ctx, "short", distlock.WithTTL(distlock.MinTTL), distlock.WithoutRenewal())
	if err != nil && !errors.Is(err, distlock.ErrNotObtained) { // (a grant may come back too late for 3 ms)
		t.Fatalf("TryLock WithTTL(MinTTL) WithoutRenewal: %v", err)
	}
	if fixed != nil {
		_ = fixed.Release(ctx)
	}
	l, err := c.TryLock(ctx, "shortest", distlock.WithTTL(distlock.MinRenewedTTL))
	must(t, err)
	if err := l.Extend(ctx, short); !errors.Is(err, distlock.ErrInvalidTTL) {
		t.Fatalf("Extend(%v) of a renewed lock: %v, want ErrInvalidTTL", short, err)
	}
	select {
	case <-l.Lost():
		t.Fatalf("a renewed lock of %v lost on a healthy Redis: %v", distlock.MinRenewedTTL, l.Err())
	case <-time.After(40 * distlock.MinRenewedTTL):
	}
	must(t, l.Release(ctx))
}

// TestHoldingManyLocksAddsNoGoroutines: a Client that holds renewed locks
// runs four goroutines, whatever their number: the renewer's scheduler and
// worker, and the subscriber and listener of the subscription it keeps to
// hear of restarts (design.md, "Measured": 2 before that subscription).
func TestHoldingManyLocksAddsNoGoroutines(t *testing.T) {
	c, rdb, _ := setup(t)
	ctx := ctxT(t, 60*time.Second)
	const ttl = 300 * time.Millisecond
	if _, err := c.TryLock(ctx, "one", distlock.WithTTL(ttl)); err != nil {
		t.Fatal(err)
	}
	waitHolders(t, rdb, 1)
	if got := distlockGoroutines(); got != 4 {
		t.Fatalf("holding one lock: %d goroutines of distlock's, want 4", got)
	}
	const n = 2000
	for i := range n {
		if _, err := c.TryLock(ctx, fmt.Sprintf("many:%d", i), distlock.WithTTL(ttl)); err != nil {
			t.Fatal(err)
		}
	}
	base := evalCalls(t, rdb)
	waitFor(t, 30*time.Second, "every lock to be renewed", func() bool { return evalCalls(t, rdb)-base > n })
	if got := distlockGoroutines(); got != 4 {
		t.Fatalf("holding %d locks: %d goroutines of distlock's, want 4", n+1, got)
	}
}

// distlockGoroutines counts the goroutines that package distlock started.
func distlockGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "\ncreated by github.com/distlock/distlock.")
		}
		buf = make([]byte, 2*len(buf))
	}
}
