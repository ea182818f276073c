package distlock_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

func TestTryLockIsExclusive(t *testing.T) {
	c, _, _ := setup(t)
	ctx := ctxT(t, 5*time.Second)
	a, err := c.TryLock(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryLock(ctx, "job"); !errors.Is(err, distlock.ErrNotObtained) {
		t.Fatalf("second TryLock: got %v, want ErrNotObtained", err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := c.TryLock(ctx, "job")
	if err != nil {
		t.Fatalf("TryLock after release: %v", err)
	}
	if b.Fence() <= a.Fence() {
		t.Fatalf("fence did not increase: %d then %d", a.Fence(), b.Fence())
	}
	if a.Token() == b.Token() || len(a.Token()) < 22 {
		t.Fatalf("tokens %q and %q: want distinct 128-bit tokens", a.Token(), b.Token())
	}
}

func TestCounterUnderLock(t *testing.T) {
	c, rdb, _ := setup(t)
	ctx := ctxT(t, 60*time.Second)
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := c.Lock(ctx, "counter")
			if err != nil {
				errs <- err
				return
			}
			defer l.Release(ctx)
			n, _ := rdb.Get(ctx, "count").Int()
			time.Sleep(100 * time.Microsecond) // widen the read-modify-write window
			rdb.Set(ctx, "count", n+1, 0)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n, _ := rdb.Get(ctx, "count").Int(); n != 100 {
		t.Fatalf("count = %d, want 100", n)
	}
}

func TestInventoryAcrossProcesses(t *testing.T) {
	_, rdb, srv := setup(t)
	ctx := ctxT(t, 90*time.Second)
	rdb.Set(ctx, "stock", 100, 0)
	var procs []*helperProc
	for range 4 {
		procs = append(procs, startHelper(t, "inventory", "DISTLOCK_ADDR="+srv.Addr, "DISTLOCK_WORKERS=4"))
	}
	for _, p := range procs {
		p.wait(t, 80*time.Second)
	}
	sold, _ := rdb.Get(ctx, "sold").Int()
	stock, _ := rdb.Get(ctx, "stock").Int()
	if sold != 100 || stock != 0 {
		t.Fatalf("sold %d, stock %d: want 100 sold and 0 left", sold, stock)
	}
}

func TestKilledHolderLosesLockAtExpiry(t *testing.T) {
	c, _, srv := setup(t)
	ctx := ctxT(t, 10*time.Second)
	const ttl = 500 * time.Millisecond
	holder := startHelper(t, "hold", "DISTLOCK_ADDR="+srv.Addr, "DISTLOCK_KEY=cron", "DISTLOCK_TTL="+ttl.String())
	holder.expect(t, "fence=", 5*time.Second)
	if _, err := c.TryLock(ctx, "cron"); !errors.Is(err, distlock.ErrNotObtained) {
		t.Fatalf("TryLock while held: %v", err)
	}
	got := make(chan time.Time, 1)
	go func() {
		if _, err := c.Lock(ctx, "cron"); err != nil {
			t.Error(err)
		}
		got <- time.Now()
	}()
	killed := time.Now()
	_ = holder.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case at := <-got:
		// The lease runs out at most ttl after the kill; a waiter that
		// polled, or missed the lease's end, would take about 2×ttl.
		if d := at.Sub(killed); d > ttl+ttl/2 {
			t.Fatalf("waiter took the lock %v after the kill, want ≤ 1.5×ttl", d)
		} else {
			t.Logf("waiter took the lock %v after SIGKILL (ttl %v)", d, ttl)
		}
	case <-ctx.Done():
		t.Fatal("waiter never got the lock")
	}
}

func TestReleaseAfterExpiryLeavesNewHolder(t *testing.T) {
	c, _, _ := setup(t)
	ctx := ctxT(t, 5*time.Second)
	a, err := c.TryLock(ctx, "order:42", distlock.WithTTL(100*time.Millisecond), distlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Lock(ctx, "order:42") // waits for a's lease to run out
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.Lost():
	default:
		t.Fatal("a's Lost() did not fire although b holds the lock")
	}
	if err := a.Release(ctx); !errors.Is(err, distlock.ErrNotHeld) {
		t.Fatalf("stale release: %v, want ErrNotHeld", err)
	}
	if err := a.Extend(ctx, time.Second); !errors.Is(err, distlock.ErrNotHeld) {
		t.Fatalf("stale extend: %v, want ErrNotHeld", err)
	}
	if d, err := b.TTL(ctx); err != nil || d <= 0 {
		t.Fatalf("new holder's lock damaged: ttl %v, %v", d, err)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx); !errors.Is(err, distlock.ErrNotHeld) {
		t.Fatalf("double release: %v, want ErrNotHeld", err)
	}
}

func TestExtendAndTTL(t *testing.T) {
	c, _, _ := setup(t)
	ctx := ctxT(t, 5*time.Second)
	l, err := c.TryLock(ctx, "k", distlock.WithTTL(time.Second), distlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	d, err := l.TTL(ctx)
	if err != nil || d < 59*time.Second || d > time.Minute {
		t.Fatalf("TTL after Extend(1m) = %v, %v", d, err)
	}
	l.Release(ctx)
	if _, err := l.TTL(ctx); !errors.Is(err, distlock.ErrNotHeld) {
		t.Fatalf("TTL after release: %v", err)
	}
}

func TestFencesIncreaseAcrossProcesses(t *testing.T) {
	c, _, srv := setup(t)
	ctx := ctxT(t, 60*time.Second)
	var procs []*helperProc
	for range 3 {
		procs = append(procs, startHelper(t, "fences", "DISTLOCK_ADDR="+srv.Addr, "DISTLOCK_KEY=f", "DISTLOCK_N=20"))
	}
	seen, top := map[string]bool{}, int64(0)
	for _, p := range procs {
		last := int64(0)
		for line := range p.lines {
			if seen[line] {
				t.Fatalf("fence granted twice: %s", line)
			}
			seen[line] = true
			f, _ := strconv.ParseInt(strings.TrimPrefix(line, "fence="), 10, 64)
			if f <= last {
				t.Fatalf("fence %d after %d in one process", f, last)
			}
			last, top = f, max(top, f)
		}
		p.wait(t, 30*time.Second)
	}
	if len(seen) != 60 {
		t.Fatalf("%d distinct fences, want 60", len(seen))
	}
	l, err := c.Lock(ctx, "f")
	if err != nil {
		t.Fatal(err)
	}
	if l.Fence() <= top {
		t.Fatalf("fence after 60 grants = %d, want above %d", l.Fence(), top)
	}
}

func TestBadInput(t *testing.T) {
	c, _, _ := setup(t)
	ctx := ctxT(t, 5*time.Second)
	cases := []struct {
		name string
		key  string
		opts []distlock.Option
		want error
	}{
		{"empty key", "", nil, distlock.ErrInvalidKey},
		{"long key", strings.Repeat("k", distlock.MaxKeyLen+1), nil, distlock.ErrInvalidKey},
		{"zero ttl", "k", []distlock.Option{distlock.WithTTL(0)}, distlock.ErrInvalidTTL},
		{"negative ttl", "k", []distlock.Option{distlock.WithTTL(-time.Second)}, distlock.ErrInvalidTTL},
		{"sub-ms ttl", "k", []distlock.Option{distlock.WithTTL(time.Microsecond)}, distlock.ErrInvalidTTL},
		{"huge ttl", "k", []distlock.Option{distlock.WithTTL(distlock.MaxTTL + 1)}, distlock.ErrInvalidTTL},
		{"empty owner", "k", []distlock.Option{distlock.WithOwner("")}, distlock.ErrInvalidOption},
		{"huge metadata", "k", []distlock.Option{distlock.WithMetadata(strings.Repeat("m", 5000))}, distlock.ErrInvalidOption},
	}
	for _, tc := range cases {
		if _, err := c.TryLock(ctx, tc.key, tc.opts...); !errors.Is(err, tc.want) {
			t.Errorf("TryLock %s: %v, want %v", tc.name, err, tc.want)
		}
		if _, err := c.Lock(ctx, tc.key, tc.opts...); !errors.Is(err, tc.want) {
			t.Errorf("Lock %s: %v, want %v", tc.name, err, tc.want)
		}
	}
	l, _ := c.TryLock(ctx, "k")
	if err := l.Extend(ctx, 0); !errors.Is(err, distlock.ErrInvalidTTL) {
		t.Errorf("Extend(0): %v", err)
	}

	// A nil context is bad input too: ErrNilContext, not a panic, and
	// nothing done.
	var nilCtx context.Context
	for name, call := range map[string]func() error{
		"TryLock":      func() error { _, err := c.TryLock(nilCtx, "n"); return err },
		"Lock":         func() error { _, err := c.Lock(nilCtx, "n"); return err },
		"TryLockAll":   func() error { _, err := c.TryLockAll(nilCtx, []string{"n", "m"}); return err },
		"LockAll":      func() error { _, err := c.LockAll(nilCtx, []string{"n", "m"}); return err },
		"Inspect":      func() error { _, err := c.Inspect(nilCtx, "k"); return err },
		"List":         func() error { _, err := c.List(nilCtx, "*"); return err },
		"ForceRelease": func() error { _, err := c.ForceRelease(nilCtx, "k", 0); return err },
		"Extend":       func() error { return l.Extend(nilCtx, time.Hour) },
		"TTL":          func() error { _, err := l.TTL(nilCtx); return err },
	} {
		if err := unpanicked(call); !errors.Is(err, distlock.ErrNilContext) {
			t.Errorf("%s(nil ctx): %v, want ErrNilContext", name, err)
		}
	}
	if infos, err := c.List(ctx, "*"); err != nil || len(infos) != 1 || infos[0].Key != "k" || infos[0].TTL > distlock.DefaultTTL {
		t.Errorf("after calls with a nil ctx: %+v, %v; want k alone, not extended", infos, err)
	}
	// Context(nil) gives a context that is done and says why; the lock
	// stays held.
	lctx, stop := l.Context(nilCtx)
	defer stop()
	if lctx.Err() == nil || !errors.Is(context.Cause(lctx), distlock.ErrNilContext) || l.Err() != nil {
		t.Errorf("Context(nil): err %v, cause %v; lock's Err %v", lctx.Err(), context.Cause(lctx), l.Err())
	}
	// Release(nil) still releases: a hold must not outlive its caller's bug.
	if err := l.Release(nilCtx); !errors.Is(err, distlock.ErrNilContext) || l.Err() != distlock.ErrReleased {
		t.Errorf("Release(nil): %v, lock's Err %v", err, l.Err())
	}
	m, err := c.TryLockAll(ctx, []string{"k", "m"})
	if err != nil {
		t.Fatalf("after Release(nil): %v", err)
	}
	mctx, mstop := m.Context(nilCtx)
	defer mstop()
	if mctx.Err() == nil || !errors.Is(context.Cause(mctx), distlock.ErrNilContext) {
		t.Errorf("MultiLock.Context(nil): err %v, cause %v", mctx.Err(), context.Cause(mctx))
	}
	if err := m.Release(nilCtx); !errors.Is(err, distlock.ErrNilContext) {
		t.Errorf("MultiLock.Release(nil): %v", err)
	}
	if infos, err := c.List(ctx, "*"); err != nil || len(infos) != 0 {
		t.Errorf("after MultiLock.Release(nil): %+v, %v; want nothing held", infos, err)
	}
}

// unpanicked runs f and returns its error, or its panic as one, so that a
// table of calls reports every call that panics, not the first.
func unpanicked(f func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return f()
}

func TestNilClientAndNilLock(t *testing.T) {
	ctx := ctxT(t, time.Second)
	var typedNil *redis.Client
	for _, c := range []*distlock.Client{distlock.New(nil), distlock.New(typedNil)} {
		if _, err := c.TryLock(ctx, "k"); !errors.Is(err, distlock.ErrNilClient) {
			t.Errorf("TryLock on nil client: %v", err)
		}
		if _, err := c.Lock(ctx, "k"); !errors.Is(err, distlock.ErrNilClient) {
			t.Errorf("Lock on nil client: %v", err)
		}
		c.Close()
	}
	var l *distlock.Lock
	if err := l.Release(ctx); !errors.Is(err, distlock.ErrNotHeld) {
		t.Errorf("nil Release: %v", err)
	}
	if err := l.Extend(ctx, time.Second); !errors.Is(err, distlock.ErrNotHeld) {
		t.Errorf("nil Extend: %v", err)
	}
	if _, err := l.TTL(ctx); !errors.Is(err, distlock.ErrNotHeld) {
		t.Errorf("nil TTL: %v", err)
	}
	waitLost(t, l, time.Second) // a nil Lock's is closed
	var nilCtx context.Context
	if err := l.Release(nilCtx); !errors.Is(err, distlock.ErrNilContext) || !errors.Is(err, distlock.ErrNotHeld) {
		t.Errorf("nil Release(nil ctx): %v, want ErrNilContext and ErrNotHeld", err)
	}
	if lctx, _ := l.Context(nilCtx); !errors.Is(context.Cause(lctx), distlock.ErrNilContext) {
		t.Errorf("nil Context(nil): cause %v", context.Cause(lctx))
	}
	var m *distlock.MultiLock
	if err := m.Release(nilCtx); !errors.Is(err, distlock.ErrNilContext) || !errors.Is(err, distlock.ErrNotHeld) {
		t.Errorf("nil MultiLock.Release(nil ctx): %v", err)
	}
	if _, err := distlock.New(nil).TryLock(nilCtx, "k"); !errors.Is(err, distlock.ErrNilContext) {
		t.Errorf("TryLock(nil ctx) on nil client: %v", err)
	}
}

// TestNilAndZeroPrimitives calls every method of a nil and of a zero
// RWMutex, Semaphore and Election: each returns ErrNilClient (Observe a
// closed channel), none panics.
func TestNilAndZeroPrimitives(t *testing.T) {
	ctx := ctxT(t, 5*time.Second)
	for _, rw := range []*distlock.RWMutex{nil, {}} {
		for name, take := range map[string]func(context.Context, ...distlock.Option) (*distlock.Lock, error){
			"RLock": rw.RLock, "TryRLock": rw.TryRLock, "Lock": rw.Lock, "TryLock": rw.TryLock,
		} {
			if _, err := take(ctx); !errors.Is(err, distlock.ErrNilClient) {
				t.Errorf("RWMutex(%v).%s: %v", rw != nil, name, err)
			}
		}
		if rw.Name() != "" {
			t.Errorf("RWMutex(%v).Name: %q", rw != nil, rw.Name())
		}
	}
	for _, s := range []*distlock.Semaphore{nil, {}} {
		for name, take := range map[string]func(context.Context, ...distlock.Option) (*distlock.Lock, error){
			"Acquire": s.Acquire, "TryAcquire": s.TryAcquire,
		} {
			if _, err := take(ctx); !errors.Is(err, distlock.ErrNilClient) {
				t.Errorf("Semaphore(%v).%s: %v", s != nil, name, err)
			}
		}
		if s.Name() != "" || s.Limit() != 0 {
			t.Errorf("Semaphore(%v): Name %q, Limit %d", s != nil, s.Name(), s.Limit())
		}
	}
	for _, e := range []*distlock.Election{nil, {}} {
		if _, err := e.Campaign(ctx, "v"); !errors.Is(err, distlock.ErrNilClient) {
			t.Errorf("Election(%v).Campaign: %v", e != nil, err)
		}
		if _, err := e.Leader(ctx); !errors.Is(err, distlock.ErrNilClient) {
			t.Errorf("Election(%v).Leader: %v", e != nil, err)
		}
		select {
		case _, ok := <-e.Observe(ctx):
			if ok {
				t.Errorf("Election(%v).Observe sent a leader", e != nil)
			}
		case <-ctx.Done():
			t.Fatalf("Election(%v).Observe: channel not closed", e != nil)
		}
		if e.Name() != "" {
			t.Errorf("Election(%v).Name: %q", e != nil, e.Name())
		}
	}
	var lead *distlock.Leadership
	if err := lead.Proclaim(ctx, "v"); !errors.Is(err, distlock.ErrNotHeld) {
		t.Errorf("nil Leadership.Proclaim: %v", err)
	}
	if err := lead.Resign(ctx); !errors.Is(err, distlock.ErrNotHeld) {
		t.Errorf("nil Leadership.Resign: %v", err)
	}
}

func TestClosedClient(t *testing.T) {
	c, _, _ := setup(t)
	ctx := ctxT(t, 5*time.Second)
	l, err := c.TryLock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	waitLost(t, l, 5*time.Second) // renewal stopped: the holder is told
	if !errors.Is(l.Err(), distlock.ErrClosed) {
		t.Fatalf("cause after Close: %v", l.Err())
	}
	if _, err := c.TryLock(ctx, "k2"); !errors.Is(err, distlock.ErrClosed) {
		t.Fatalf("TryLock after Close: %v", err)
	}
}

// Election.Leader after Close returns ErrClosed like every other call, not
// the leader a closed Client may have stopped renewing.
func TestLeaderAfterClose(t *testing.T) {
	c, _, _ := setup(t)
	ctx := ctxT(t, 5*time.Second)
	e, err := c.NewElection("e")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Campaign(ctx, "v"); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if l, err := e.Leader(ctx); !errors.Is(err, distlock.ErrClosed) {
		t.Fatalf("Leader after Close: %+v, %v; want ErrClosed", l, err)
	}
}

func TestLockReturnsWhenContextEnds(t *testing.T) {
	c, _, _ := setup(t)
	ctx := ctxT(t, 5*time.Second)
	if _, err := c.TryLock(ctx, "busy"); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.Lock(short, "busy")
	if !errors.Is(err, distlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock with deadline: %v, want ErrNotObtained and DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 100*time.Millisecond+deadlineSlack {
		t.Fatalf("Lock returned %v after a 100ms deadline", d)
	}
	cancelled, cancel2 := context.WithCancel(ctx)
	cancel2()
	if _, err := c.Lock(cancelled, "busy"); !errors.Is(err, context.Canceled) || !errors.Is(err, distlock.ErrNotObtained) {
		t.Fatalf("Lock with cancelled ctx: %v", err)
	}
}

func TestRedisDownFailsWithinDeadline(t *testing.T) {
	c, _, srv := setup(t)
	srv.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := c.Lock(ctx, "k"); err == nil {
		t.Fatal("Lock succeeded with Redis down")
	}
	if d := time.Since(start); d > 300*time.Millisecond+deadlineSlack {
		t.Fatalf("Lock took %v with a 300ms deadline", d)
	}
}

func TestMutexIsSyncLocker(t *testing.T) {
	c, _, _ := setup(t)
	m, err := c.NewMutex("m")
	if err != nil {
		t.Fatal(err)
	}
	var inside, max atomic.Int32
	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m2, err := c.NewMutex("m")
			if err != nil {
				t.Error(err)
				return
			}
			m2.Lock()
			n := inside.Add(1)
			for old := max.Load(); n > old && !max.CompareAndSwap(old, n); old = max.Load() {
			}
			runtime.Gosched() // (let another goroutine in, if the lock would)
			inside.Add(-1)
			m2.Unlock()
		}()
	}
	waitGroupWithin(t, &wg, 20*time.Second, "the sync.Locker calls")
	if max.Load() != 1 {
		t.Fatalf("%d holders at once", max.Load())
	}
	if _, err := c.NewMutex(""); !errors.Is(err, distlock.ErrInvalidKey) {
		t.Fatalf("NewMutex(\"\"): %v", err)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("Unlock of unlocked Mutex did not panic")
		}
	}()
	m.Unlock()
}

// A Mutex is also a mutex within its process: when a holder's lease runs
// out, another goroutine of the process does not get the Mutex before the
// holder's Unlock, and that Unlock releases the holder's own grant, never
// the next one's. (Before, the second goroutine took the freed lock, the
// first one's Unlock released it in the middle of its hold, and its own
// Unlock then panicked.)
func TestMutexUnlockReleasesItsOwnGrant(t *testing.T) {
	c, rdb, _ := setup(t)
	ctx := ctxT(t, 15*time.Second)
	m, err := c.NewMutex("m", distlock.WithTTL(300*time.Millisecond), distlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	m.Lock()
	locked, unlocked := make(chan struct{}), make(chan any, 1)
	proceed := make(chan struct{})
	go func() {
		m.Lock()
		close(locked)
		<-proceed
		defer func() { unlocked <- recover() }()
		m.Unlock()
	}()
	waitFor(t, 2*time.Second, "the first hold's lease to run out", func() bool {
		return rdb.Exists(ctx, "distlock:{m}").Val() == 0
	})
	select { // a waiter in Redis would ask again within a second of the lease's end
	case <-locked:
		t.Fatal("a second goroutine got the Mutex before the first one's Unlock")
	case <-time.After(1500 * time.Millisecond):
	}
	m.Unlock()
	select {
	case <-locked:
	case <-ctx.Done():
		t.Fatal("the second goroutine never got the Mutex")
	}
	if rdb.Exists(ctx, "distlock:{m}").Val() != 1 {
		t.Fatal("the second goroutine holds the Mutex but not the lock")
	}
	close(proceed)
	if p := <-unlocked; p != nil {
		t.Fatalf("the second goroutine's Unlock panicked: %v", p)
	}
	if rdb.Exists(ctx, "distlock:{m}").Val() != 0 {
		t.Fatal("Unlock left the lock held")
	}
}

// TestScriptCacheFlushed runs each script of the lock path on a Redis that
// has forgotten it (SCRIPT FLUSH: what a restarted or failed-over server
// has): every call falls back from EVALSHA to EVAL and does its work, also
// in the pipeline that waits for a replica's acknowledgement.
func TestScriptCacheFlushed(t *testing.T) {
	t.Run("standalone", func(t *testing.T) {
		c, rdb, _ := setup(t)
		scriptsAfterFlush(t, c, rdb)
	})
	t.Run("replica ack", func(t *testing.T) {
		master := redistest.Start(t)
		master.StartReplica(t)
		rdb := master.Client(t)
		c := distlock.New(rdb, distlock.WithReplicaAck(1, time.Second))
		t.Cleanup(func() { c.Close() })
		scriptsAfterFlush(t, c, rdb)
	})
}

func scriptsAfterFlush(t *testing.T, c *distlock.Client, rdb *redis.Client) {
	ctx := ctxT(t, 10*time.Second)
	flush := func() {
		t.Helper()
		if err := rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	flush()
	a, err := c.Lock(ctx, "flushed") // try.lua, free
	if err != nil {
		t.Fatal(err)
	}
	flush()
	if _, err := c.TryLock(ctx, "flushed"); !errors.Is(err, distlock.ErrNotObtained) { // try.lua, held
		t.Fatalf("TryLock of a held lock: %v, want ErrNotObtained", err)
	}
	flush()
	if err := a.Extend(ctx, 5*time.Second); err != nil { // extend.lua
		t.Fatal(err)
	}
	flush()
	waiter := acquireAsync(ctx, c, "flushed") // acquire.lua lines it up
	waitFor(t, 5*time.Second, "the waiter to line up", func() bool {
		return rdb.LLen(ctx, "distlock:{flushed}:line").Val() == 1
	})
	flush()
	if err := a.Release(ctx); err != nil { // release.lua hands the lock over
		t.Fatal(err)
	}
	got := recv(t, waiter, 5*time.Second)
	if got.err != nil || got.l.Fence() <= a.Fence() {
		t.Fatalf("waiter after the handoff: fence %d (holder's %d), %v", got.l.Fence(), a.Fence(), got.err)
	}
	flush()
	if err := got.l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	rw, err := c.NewRWMutex("flushed")
	if err != nil {
		t.Fatal(err)
	}
	sem, err := c.NewSemaphore("flushed", 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, acquire := range []func(context.Context, ...distlock.Option) (*distlock.Lock, error){rw.RLock, rw.Lock, sem.Acquire} {
		flush()
		l, err := acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		flush()
		if err := l.Extend(ctx, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		flush()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := rdb.DBSize(ctx).Val(); n != 1 { // the fence counter
		t.Fatalf("%d keys left, want only the fence counter", n)
	}
}

// A renewal that finds another grant in the lock's place ends the hold with
// ErrTaken (matching ErrLost), on Lost, Err and the hold's contexts, and
// the stale hold's Release leaves the new grant alone.
func TestRenewalFindingAnotherGrantReportsTaken(t *testing.T) {
	c, rdb, _ := setup(t)
	other := distlock.New(rdb)
	t.Cleanup(func() { other.Close() })
	ctx := ctxT(t, 10*time.Second)
	const ttl = 900 * time.Millisecond
	a, err := c.TryLock(ctx, "stolen", distlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	work, stop := a.Context(ctx)
	defer stop()
	// An operator frees it and another takes it, both before a's first
	// renewal (ttl/3 after its grant).
	if _, err := other.ForceRelease(ctx, "stolen", 0); err != nil {
		t.Fatal(err)
	}
	b, err := other.TryLock(ctx, "stolen")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.Lost():
	case <-time.After(2 * ttl):
		t.Fatal("the holder was not told within 2×ttl that its lock was taken")
	}
	if !errors.Is(a.Err(), distlock.ErrTaken) || !errors.Is(a.Err(), distlock.ErrLost) {
		t.Fatalf("cause %v, want ErrTaken matching ErrLost", a.Err())
	}
	if work.Err() == nil || !errors.Is(context.Cause(work), distlock.ErrTaken) {
		t.Fatalf("hold's context: err %v, cause %v; want cancelled with ErrTaken", work.Err(), context.Cause(work))
	}
	if err := a.Release(ctx); !errors.Is(err, distlock.ErrNotHeld) {
		t.Fatalf("stale Release: %v, want ErrNotHeld", err)
	}
	if d, err := b.TTL(ctx); err != nil || d <= 0 || b.Err() != nil {
		t.Fatalf("new grant after the stale Release: ttl %v, %v, Err %v", d, err, b.Err())
	}
}

// A lock dropped without Release is renewed while its Client lives (like
// an open file); Close stops renewal without deleting it, so its lease runs
// out within a TTL, and a Lock still waiting returns ErrClosed, matching
// ErrNotObtained.
func TestDroppedLockIsRenewedUntilCloseThenRunsOut(t *testing.T) {
	c, rdb, _ := setup(t)
	other := distlock.New(rdb)
	t.Cleanup(func() { other.Close() })
	ctx := ctxT(t, 15*time.Second)
	const ttl = 300 * time.Millisecond
	func() {
		if _, err := c.TryLock(ctx, "dropped", distlock.WithTTL(ttl)); err != nil {
			t.Fatal(err)
		}
	}()
	runtime.GC() // nothing but the Client refers to the Lock now
	if _, err := other.TryLock(ctx, "busy"); err != nil {
		t.Fatal(err)
	}
	waiting := make(chan error, 1)
	go func() {
		_, err := c.Lock(ctx, "busy")
		waiting <- err
	}()
	waitFor(t, 5*time.Second, "the waiter to line up", func() bool {
		return rdb.LLen(ctx, "distlock:{busy}:line").Val() == 1
	})

	time.Sleep(4 * ttl) // the program goes on without the Lock
	if d := rdb.PTTL(ctx, "distlock:{dropped}").Val(); d <= 0 {
		t.Fatalf("dropped lock after 4×ttl: pttl %v, want still held and renewed", d)
	}

	left := rdb.PTTL(ctx, "distlock:{dropped}").Val()
	closing := time.Now()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	closed := time.Now()
	// Gone before the lease it had when Close began: Close deleted it.
	if rdb.Exists(ctx, "distlock:{dropped}").Val() == 0 && time.Since(closing) < left-10*time.Millisecond {
		t.Fatalf("the dropped lock was gone %v after Close began with %v of lease left: Close deleted it", time.Since(closing), left)
	}
	select {
	case err := <-waiting:
		if !errors.Is(err, distlock.ErrClosed) || !errors.Is(err, distlock.ErrNotObtained) {
			t.Fatalf("Lock waiting at Close: %v, want ErrClosed and ErrNotObtained", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Lock still waiting 5s after Close")
	}
	waitFor(t, 2*ttl, "the dropped lock's lease to run out after Close", func() bool {
		return rdb.Exists(ctx, "distlock:{dropped}").Val() == 0
	})
	t.Logf("the dropped lock's lease ran out %v after Close (ttl %v)", time.Since(closed).Round(time.Millisecond), ttl)
}

// Holding many locks adds no goroutine per lock: one scheduler and one
// worker renew them all.
func TestManyHeldLocksAddNoGoroutines(t *testing.T) {
	c, rdb, _ := setup(t)
	ctx := ctxT(t, 60*time.Second)
	const n, ttl = 1000, time.Second
	var locks []*distlock.Lock
	take := func(i int) {
		l, err := c.TryLock(ctx, fmt.Sprintf("many:%d", i), distlock.WithTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		locks = append(locks, l)
	}
	take(0) // starts the renewer
	before := runtime.NumGoroutine()
	for i := 1; i < n; i++ {
		take(i)
	}
	time.Sleep(ttl) // renewals of every lock under way
	after := runtime.NumGoroutine()
	for _, l := range locks {
		if l.Err() != nil {
			t.Fatalf("lock %s lost while held: %v", l.Key(), l.Err())
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d goroutines with 1 lock held, %d with %d", before, after, n)
	if after > before+3 { // slack for the runtime's and go-redis' own
		t.Fatalf("%d goroutines with 1 lock held, %d with %d: they grow with the locks", before, after, n)
	}
	if keys := rdb.Keys(ctx, "*").Val(); len(keys) != 1 || keys[0] != "distlock:fence" {
		t.Fatalf("left in Redis after the releases: %.10v (%d keys), want the fence counter only", keys, len(keys))
	}
}

// Redis' own errors reach the caller wrapped, for errors.As, and are not
// mistaken for a held lock.
func TestRedisErrorIsWrapped(t *testing.T) {
	c, rdb, _ := setup(t)
	ctx := ctxT(t, 5*time.Second)
	rdb.HSet(ctx, "distlock:{wrong}", "f", "v") // WRONGTYPE for the scripts' GET
	_, err := c.TryLock(ctx, "wrong")
	var rerr redis.Error
	if !errors.As(err, &rerr) || errors.Is(err, distlock.ErrNotObtained) {
		t.Fatalf("TryLock over a hash: %v, want a wrapped redis.Error, not ErrNotObtained", err)
	}
}

// Lock.Context's contexts are done by the time Lost is closed: a goroutine
// woken by Lost found most of them still live (Lost was closed first).
func TestContextsDoneByTheTimeLostCloses(t *testing.T) {
	c, _, _ := setup(t)
	ctx := ctxT(t, 30*time.Second)
	l, err := c.TryLock(ctx, "lost-order", distlock.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	ctxs := make([]context.Context, 20_000)
	for i := range ctxs {
		var stop context.CancelFunc
		ctxs[i], stop = l.Context(context.Background())
		defer stop()
	}
	live, waiting := make(chan int, 1), make(chan struct{})
	go func() {
		close(waiting)
		<-l.Lost()
		n := 0
		for _, x := range ctxs {
			if x.Err() == nil {
				n++
			}
		}
		live <- n
	}()
	<-waiting
	c.Close() // ends the lock: lost, ErrClosed
	select {
	case n := <-live:
		if n > 0 {
			t.Fatalf("%d of %d contexts of the Lock were still live once Lost was closed", n, len(ctxs))
		}
	case <-ctx.Done():
		t.Fatal("Lost not closed by Close")
	}
}
