package distlock

// Review (session 25), retried commands across primitives: go-redis sends a
// script again after a connection reset (MaxRetries 3 by default), so every
// script may run twice for one call. These tests lose an answer to a reset
// and check what the second run leaves.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock/internal/faultproxy"
	"github.com/distlock/distlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// retriedLatency is the one-way latency while a call's answer is to
// be lost: the answer of a script that ran at t reaches the proxy's
// client side at t+latency, so a test that sees the script's effect in
// Redis and then blackholes the proxy has that long to do so.
const retriedLatency = 400 * time.Millisecond

// retriedProxied returns a Client whose every connection goes
// through a fault proxy on srv (go-redis' defaults, MaxRetries 3), warmed
// up: a connection is open.
func retriedProxied(t *testing.T, ctx context.Context, srv *redistest.Server) (*Client, *faultproxy.Proxy) {
	t.Helper()
	p := faultproxy.Start(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
	c := New(rdb)
	t.Cleanup(func() {
		c.Close()
		rdb.Close()
	})
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	return c, p
}

// retriedLoseAnswer makes the answer of the call running in the
// background be lost: once effect reports that the call's script ran in
// Redis, the proxy drops everything (the answer is still delayed by the
// latency), between runs Redis sees, and then the proxy heals and resets
// every connection, so that go-redis sends the script again on a new one.
// The caller must have set the proxy's latency to retriedLatency
// before the call was sent.
func retriedLoseAnswer(t *testing.T, p *faultproxy.Proxy, effect func() bool, between func()) {
	t.Helper()
	if !settleWithin(10*time.Second, effect) {
		t.Fatal("the call's script did not run in Redis")
	}
	p.Blackhole()
	holed := time.Now()
	if between != nil {
		between()
	}
	// The answer was due at most retriedLatency after the script ran,
	// before the blackhole: by then it was dropped.
	if wait := retriedLatency + 100*time.Millisecond - time.Since(holed); wait > 0 {
		time.Sleep(wait) // a due time in the proxy, nothing to poll
	}
	p.SetLatency(0)
	p.Heal()
	p.ResetAll()
}

// TestRetriedTryAcquireTakenTwiceIsNotLeaked: README, "TryLock (and
// TryRLock, TryAcquire, TryLockAll) makes one attempt and returns
// ErrNotObtained at once if it cannot have the lock"; docs/design.md
// (Leases): every hold is a lease that its Lock renews and releases. A
// TryAcquire (sem_acquire.lua, mode "t") or a RWMutex.TryLock (rw_acquire.lua)
// whose grant's answer is lost to a connection reset is sent again by
// go-redis; the second run does not look for the token's own hold (own() only
// when again == "1"), finds the semaphore full (or the write grant there) and
// answers {0, ttl}. The call returns ErrNotObtained and nobody ever releases
// the hold it took: the permit (or the write lock) is held by nobody for the
// whole TTL. (The mutex's try.lua answers the same retry with the caller's
// own grant: TestRetriedAcquireAfterResetIsTheCallsOwnGrant.)
func TestRetriedTryAcquireTakenTwiceIsNotLeaked(t *testing.T) {
	for _, prim := range []string{"semaphore", "rwmutex-write"} {
		t.Run(prim, func(t *testing.T) {
			srv := redistest.Start(t)
			rdb := srv.Client(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			w, p := retriedProxied(t, ctx, srv)
			x := New(srv.Client(t))
			defer x.Close()
			try := func(c *Client) (*Lock, error) {
				if prim == "semaphore" {
					s, err := c.NewSemaphore("s", 1)
					if err != nil {
						t.Fatal(err)
					}
					return s.TryAcquire(ctx, WithTTL(time.Minute))
				}
				rw, err := c.NewRWMutex("rw")
				if err != nil {
					t.Fatal(err)
				}
				return rw.TryLock(ctx, WithTTL(time.Minute))
			}
			// Warm up: the scripts loaded, a connection open.
			l, err := try(w)
			if err != nil {
				t.Fatal(err)
			}
			names := l.names
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			held := func() bool {
				return rdb.Exists(ctx, names.lock).Val() == 1 || rdb.ZCard(ctx, names.keys[3]).Val() > 0
			}
			p.SetLatency(retriedLatency)
			type result struct {
				l   *Lock
				err error
			}
			got := make(chan result, 1)
			go func() {
				l, err := try(w)
				got <- result{l, err}
			}()
			retriedLoseAnswer(t, p, held, nil)
			var res result
			select {
			case res = <-got:
			case <-time.After(20 * time.Second):
				t.Fatal("the try did not return")
			}
			if res.err == nil {
				_ = res.l.Release(ctx)
				return // the retry answered with the call's own grant
			}
			if !errors.Is(res.err, ErrNotObtained) {
				t.Fatalf("try: %v", res.err)
			}
			// The call got nothing: nothing may stay held in its name. Its
			// give-back, if any, runs in the background at once.
			if !settleWithin(5*time.Second, func() bool { return !held() }) {
				xl, xerr := try(x)
				if xerr == nil {
					_ = xl.Release(ctx)
				}
				t.Fatalf("a %s try whose answer was lost to a connection reset returned %v, yet 5 s later its hold is still in Redis "+
					"(zset %v, write grant %q, lease left %v), held by nobody until its 1 min TTL runs out; another client's try: %v",
					prim, res.err, rdb.ZRangeWithScores(ctx, names.keys[3], 0, -1).Val(), rdb.Get(ctx, names.lock).Val(),
					retriedLeaseLeft(ctx, rdb, names), xerr)
			}
		})
	}
}

// retriedLeaseLeft is the longest lease left of any hold of names.
func retriedLeaseLeft(ctx context.Context, rdb *redis.Client, names keyNames) time.Duration {
	left := rdb.PTTL(ctx, names.lock).Val()
	if len(names.keys) > 3 {
		if z := rdb.ZRangeWithScores(ctx, names.keys[3], -1, -1).Val(); len(z) == 1 {
			now, _ := rdb.Time(ctx).Result()
			left = max(left, time.UnixMilli(int64(z[0].Score)).Sub(now))
		}
	}
	return left.Round(time.Second)
}

// retriedShareLeft is the lease that Redis has left for token's
// shared hold (zset names.keys[3]), or -1 when it has none.
func retriedShareLeft(ctx context.Context, rdb *redis.Client, names keyNames, token string) time.Duration {
	score, err := rdb.ZScore(ctx, names.keys[3], token).Result()
	if err != nil {
		return -1
	}
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		return -1
	}
	return time.UnixMilli(int64(score)).Sub(now)
}

// retriedStillBelieved reports whether l counts itself held: Err nil
// and Lost open.
func retriedStillBelieved(l *Lock) bool {
	if l.Err() != nil {
		return false
	}
	select {
	case <-l.Lost():
		return false
	default:
		return true
	}
}

// retriedAwaitLock waits for a Lock call run in the background.
func retriedAwaitLock(t *testing.T, got <-chan retriedResult) *Lock {
	t.Helper()
	select {
	case res := <-got:
		if res.err != nil {
			t.Fatalf("the call whose answer was lost: %v", res.err)
		}
		return res.l
	case <-time.After(30 * time.Second):
		t.Fatal("the call whose answer was lost did not return")
	}
	return nil
}

type retriedResult struct {
	l   *Lock
	err error
}

// TestRetriedSemaphoreFirstJoinHandedBetweenRuns: README, Semaphore
// "lets up to n holders hold a name at once"; design.md, Waiting: a
// release hands the lock "to the first waiter in line". An Acquire's first
// joining attempt (sem_acquire.lua, again "0") lines the call up; a
// release hands it a permit (popping its entry) before go-redis sends the
// script again after a reset. The second run does not look for the
// token's hold (own/shared_fence only when again == "1"), finds the
// semaphore full again (the handed permit counts) and RPUSHes the entry a
// second time. The call takes the handoff's notice and holds; its stale
// entry stays in line. The next release of any other permit hands that
// entry a "new" permit: hold_shared ZADDs the holder's token with the 2 s
// handoff lease, cutting its renewed 30 s lease short, and the notifier
// drops the notice as late (the token's Lock is held). Redis frees the
// permit 2 s later while the Lock still counts itself held until its next
// renewal (TTL/3 away), so another client takes both permits: three holders
// of a two-permit semaphore.
func TestRetriedSemaphoreFirstJoinHandedBetweenRuns(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h := New(srv.Client(t))
	defer h.Close()
	x := New(srv.Client(t))
	defer x.Close()
	hs, err := h.NewSemaphore("s", 2)
	if err != nil {
		t.Fatal(err)
	}
	a1, err := hs.TryAcquire(ctx, WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	a2, err := hs.TryAcquire(ctx, WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer a2.Release(ctx)
	names := a1.names
	w, p := commandsProxiedClient(t, ctx, srv)
	ws, _ := w.NewSemaphore("s", 2)
	p.SetLatency(retriedLatency)
	got := make(chan retriedResult, 1)
	go func() {
		l, err := ws.Acquire(ctx, WithTTL(30*time.Second))
		got <- retriedResult{l, err}
	}()
	retriedLoseAnswer(t, p,
		func() bool { return lineEntriesOf(ctx, rdb, names.line, w.id) == 1 },
		func() {
			if err := a1.Release(ctx); err != nil { // hands a permit to w's call
				t.Error(err)
			}
		})
	retriedPermitOutlivesHandoff(t, ctx, rdb, names, w, x, retriedAwaitLock(t, got), a2,
		"handed over between the two runs of its first join",
		"w's stale line entry was handed a permit with the 2 s handoff lease, which replaced w's renewed lease")
}

// TestRetriedReaderFirstJoinHandedBetweenRuns: the RWMutex doc,
// "many readers or one writer at a time". An RLock's first joining
// attempt (rw_acquire.lua, again "0") lines up behind a writer that holds
// the lock; another writer lines up behind it; the holder releases,
// handing the read hold to the reader (the writer behind it waits), before
// go-redis sends the reader's script again after a reset. The second run
// does not look for the token's hold, finds the writer at the head and
// lines the reader up again, behind it. The reader takes the handoff's
// notice and holds; when the waiting writer gives up, the stale entry is
// at the head and the next rw script serves it: hold_shared gives the
// reader's token the 2 s handoff lease in place of its renewed one. Redis
// frees the read hold 2 s later while the reader's Lock counts itself
// held, and a writer takes the lock alongside it.
func TestRetriedReaderFirstJoinHandedBetweenRuns(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h := New(srv.Client(t))
	defer h.Close()
	x := New(srv.Client(t))
	defer x.Close()
	hrw, _ := h.NewRWMutex("rw")
	xrw, _ := x.NewRWMutex("rw")
	hw, err := hrw.TryLock(ctx, WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	names := hw.names
	w, p := commandsProxiedClient(t, ctx, srv)
	wrw, _ := w.NewRWMutex("rw")
	p.SetLatency(retriedLatency)
	got := make(chan retriedResult, 1)
	go func() {
		l, err := wrw.RLock(ctx, WithTTL(30*time.Second))
		got <- retriedResult{l, err}
	}()
	xctx, xcancel := context.WithCancel(ctx)
	defer xcancel()
	xgot := make(chan retriedResult, 1)
	retriedLoseAnswer(t, p,
		func() bool { return lineEntriesOf(ctx, rdb, names.line, w.id) == 1 },
		func() {
			go func() {
				l, err := xrw.Lock(xctx, WithTTL(time.Minute))
				xgot <- retriedResult{l, err}
			}()
			if !settleWithin(10*time.Second, func() bool { return lineEntriesOf(ctx, rdb, names.line, x.id) == 1 }) {
				t.Error("the second writer did not line up")
			}
			if err := hw.Release(ctx); err != nil { // hands the read hold to w
				t.Error(err)
			}
		})
	wl := retriedAwaitLock(t, got)
	defer wl.Release(ctx)
	stale := lineEntriesOf(ctx, rdb, names.line, w.id)
	t.Logf("w reads with fence %d; %d entries of w's Client in line %q", wl.Fence(), stale, rdb.LRange(ctx, names.line, 0, -1).Val())
	if !settleWithin(15*time.Second, func() bool { return retriedShareLeft(ctx, rdb, names, wl.token) > 10*time.Second }) {
		t.Fatalf("w's read hold was not renewed: lease left %v", retriedShareLeft(ctx, rdb, names, wl.token))
	}
	// The waiting writer gives up; its leave (shared_release.lua) hands
	// what is free to the line's head.
	xcancel()
	select {
	case res := <-xgot:
		if res.err == nil {
			_ = res.l.Release(ctx)
			t.Fatal("the second writer took the lock while w reads")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the cancelled writer did not return")
	}
	settleWithin(3*time.Second, func() bool { return lineEntriesOf(ctx, rdb, names.line, x.id) == 0 })
	t.Logf("after the writer left, w's read hold has %v left in Redis; w's Lock counts itself valid for %v",
		retriedShareLeft(ctx, rdb, names, wl.token), time.Until(wl.validUntil()).Round(time.Millisecond))
	var xl *Lock
	settleWithin(8*time.Second, func() bool {
		xl, err = xrw.TryLock(ctx, WithTTL(time.Minute))
		return err == nil
	})
	if xl != nil {
		defer xl.Release(ctx)
		if retriedStillBelieved(wl) {
			t.Fatalf("a writer took the read-write lock (fence %d) while a reader holds it by its own account (fence %d, Err nil, "+
				"Lost open, valid for %v more): the reader's read hold was handed over between the two runs of its first join, "+
				"its stale line entry (%d) was served again with the 2 s handoff lease, which replaced its renewed lease",
				xl.Fence(), wl.Fence(), time.Until(wl.validUntil()).Round(time.Millisecond), stale)
		}
	}
}

// TestRetriedAcquireRetriedTryLeavesNoEntry: design.md, Waiting, and
// the Semaphore doc ("a released permit is handed to the first of them").
// An Acquire on a Client that has not waited yet makes a first attempt in
// try mode (sem_acquire.lua, mode "t"); it takes the last free permit and
// its answer is lost to a reset. go-redis' second run finds the semaphore
// full (the call's own permit counts), the call lines up (a join, again
// "0", RPUSH), and its first re-ask finds its own permit (own/shared_fence)
// and returns {1, fence, 1, 0} without removing the call's entry (only
// acquire.lua's held path does LREM). The entry stays in line while the
// call holds; the next release of another permit hands it a permit with
// the 2 s handoff lease, which replaces the holder's renewed lease, and the
// notice is dropped as late. 2 s later another client takes the permit that
// the holder still counts as its own.
func TestRetriedAcquireRetriedTryLeavesNoEntry(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h := New(srv.Client(t))
	defer h.Close()
	x := New(srv.Client(t))
	defer x.Close()
	hs, _ := h.NewSemaphore("s", 2)
	a1, err := hs.TryAcquire(ctx, WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer a1.Release(ctx)
	names := a1.names
	w, p := retriedProxied(t, ctx, srv)
	ws, _ := w.NewSemaphore("s", 2)
	p.SetLatency(retriedLatency)
	got := make(chan retriedResult, 1)
	go func() {
		l, err := ws.Acquire(ctx, WithTTL(30*time.Second))
		got <- retriedResult{l, err}
	}()
	retriedLoseAnswer(t, p, func() bool { return rdb.ZCard(ctx, names.keys[3]).Val() == 2 }, nil)
	retriedPermitOutlivesHandoff(t, ctx, rdb, names, w, x, retriedAwaitLock(t, got), a1,
		"whose first try's answer was lost to a reset",
		"w's line entry, left behind when its re-ask found its own permit, was handed a permit with the 2 s handoff lease, which replaced w's renewed lease")
}

// TestRetriedReentryRetriedAddsOneHold: README, "Reentrancy.
// WithOwner(id): the same owner takes the lock again, from this process or
// another; each hold releases its own", and "every lock is a lease (no
// deadlock when a holder dies)". A reentrant TryLock whose answer is lost
// to a reset is sent again by go-redis; held() in holds.lua answers "held
// by token already" only when the token is the lock's only hold (holds ==
// token), so the second run, finding "t1,t2", takes the owner's path again
// and appends t2 a second time. When both holds are released, one copy of
// t2 is left: the lock stays held by nobody, unrenewed, until its lease
// (which the reentry raised to its TTL) runs out.
func TestRetriedReentryRetriedAddsOneHold(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h := New(srv.Client(t))
	defer h.Close()
	x := New(srv.Client(t))
	defer x.Close()
	first, err := h.TryLock(ctx, "k", WithOwner("o"), WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	lock := first.names.lock
	w, p := retriedProxied(t, ctx, srv)
	// Warm up: the scripts loaded.
	if l, err := w.TryLock(ctx, "warm"); err != nil {
		t.Fatal(err)
	} else {
		_ = l.Release(ctx)
	}
	p.SetLatency(retriedLatency)
	got := make(chan retriedResult, 1)
	go func() {
		l, err := w.TryLock(ctx, "k", WithOwner("o"), WithTTL(time.Minute))
		got <- retriedResult{l, err}
	}()
	retriedLoseAnswer(t, p, func() bool { return strings.Count(rdb.Get(ctx, lock).Val(), ",") >= 1 }, nil)
	second := retriedAwaitLock(t, got)
	t.Logf("the lock after the retried reentry: %q", rdb.Get(ctx, lock).Val())
	if err := second.Release(ctx); err != nil {
		t.Fatalf("release of the reentry: %v", err)
	}
	if err := first.Release(ctx); err != nil {
		t.Fatalf("release of the first hold: %v", err)
	}
	if xl, err := x.TryLock(ctx, "k"); err != nil {
		t.Fatalf("both holds of owner \"o\" were released (the second one's reentry was sent twice after a connection reset), "+
			"yet the lock is still held by nobody: %q, lease left %v; another client's TryLock: %v",
			rdb.Get(ctx, lock).Val(), rdb.PTTL(ctx, lock).Val().Round(time.Second), err)
	} else {
		_ = xl.Release(ctx)
	}
}

// retriedPermitOutlivesHandoff checks w's permit wl of the 2-permit
// semaphore "s": once renewed, and after other, the other holder, is
// released, another client (x) must not get both permits while wl counts
// itself held. how says how wl was granted, stale what went wrong if it did.
func retriedPermitOutlivesHandoff(t *testing.T, ctx context.Context, rdb *redis.Client, names keyNames, w, x *Client, wl, other *Lock, how, stale string) {
	t.Helper()
	defer wl.Release(ctx)
	entries := lineEntriesOf(ctx, rdb, names.line, w.id)
	t.Logf("w holds fence %d; %d entries of w's Client in line %q", wl.Fence(), entries, rdb.LRange(ctx, names.line, 0, -1).Val())
	// w's renewal makes its permit's lease its TTL (30 s).
	if !settleWithin(15*time.Second, func() bool { return retriedShareLeft(ctx, rdb, names, wl.token) > 10*time.Second }) {
		t.Fatalf("w's permit was not renewed: lease left %v", retriedShareLeft(ctx, rdb, names, wl.token))
	}
	if err := other.Release(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("after the other holder's release, w's permit has %v left in Redis; w's Lock counts itself valid for %v",
		retriedShareLeft(ctx, rdb, names, wl.token), time.Until(wl.validUntil()).Round(time.Millisecond))
	// Another client takes every permit it can for 8 s (the 2 s lease, and
	// a loaded machine's slack), well inside w's renewal period (10 s).
	xs, _ := x.NewSemaphore("s", 2)
	var taken []*Lock
	defer func() {
		for _, l := range taken {
			_ = l.Release(ctx)
		}
	}()
	settleWithin(8*time.Second, func() bool {
		if l, err := xs.TryAcquire(ctx, WithTTL(time.Minute)); err == nil {
			taken = append(taken, l)
		}
		return len(taken) == 2
	})
	if len(taken) == 2 && retriedStillBelieved(wl) {
		t.Fatalf("a 2-permit semaphore has 3 holders: another client took 2 permits (fences %d, %d) while w's permit (fence %d, %s) "+
			"is held by its own account (Err nil, Lost open, valid for %v more); %s (%d stale entries)",
			taken[0].Fence(), taken[1].Fence(), wl.Fence(), how, time.Until(wl.validUntil()).Round(time.Millisecond), stale, entries)
	}
}

// retriedLateNotice is one call of w that waits (first join, again "0")
// behind holder, whose answer is lost to a reset; a release of holder
// hands it the lock (or a permit) between the two runs of its script, and
// the handoff's notice reaches w's Client late, after the call returned
// with the grant that its second run found (or, with expire, took free
// once the handed grant's 2 s first lease ran out). The late notice must
// not be passed on: that would free the grant of a Lock that counts itself
// held, and x would take it alongside.
type retriedLateNotice struct {
	holder  *Lock
	wait    func(ctx context.Context, w *Client) (*Lock, error)
	try     func(ctx context.Context, x *Client) (*Lock, error)
	inRedis func(ctx context.Context, rdb *redis.Client, wl *Lock) bool
	expire  bool
}

func (c retriedLateNotice) run(t *testing.T, ctx context.Context, srv *redistest.Server, x *Client) {
	t.Helper()
	rdb := srv.Client(t)
	names := c.holder.names
	w, sub, cmds := splitProxiedClient(t, ctx, srv)
	cmds.SetLatency(retriedLatency)
	got := make(chan retriedResult, 1)
	go func() {
		l, err := c.wait(ctx, w)
		got <- retriedResult{l, err}
	}()
	late := 2500 * time.Millisecond
	if c.expire {
		late = 6 * time.Second
	}
	retriedLoseAnswer(t, cmds,
		func() bool { return lineEntriesOf(ctx, rdb, names.line, w.id) == 1 },
		func() {
			sub.SetLatency(late)
			if err := c.holder.Release(ctx); err != nil { // hands over to w's call
				t.Error(err)
			}
			if c.expire && !settleWithin(5*time.Second, func() bool { return rdb.Exists(ctx, names.lock).Val() == 0 }) {
				t.Error("the handed grant did not run out")
			}
		})
	wl := retriedAwaitLock(t, got)
	defer wl.Release(ctx)
	// Past the notice's arrival: a pass-on would have freed the grant. (A
	// lease that ran out unrenewed is no pass-on: its Lock knew before.)
	if settleWithin(late+2*time.Second, func() bool { return !c.inRedis(ctx, rdb, wl) }) && retriedStillBelieved(wl) {
		sub.SetLatency(0)
		xl, err := c.try(ctx, x)
		if err == nil {
			defer xl.Release(ctx)
		}
		t.Fatalf("w's grant (fence %d) is gone from Redis while its Lock counts itself held; x's try: %v", wl.Fence(), err)
	}
}

// TestRetriedFirstJoinLateNoticeKeepsThePermit: a late notice of the
// handoff to a retried first join found no waiter and no held Lock for
// its token (the notifier kept a Lock for that only for re-asks) and
// passed the permit on: three holders of a two-permit semaphore.
func TestRetriedFirstJoinLateNoticeKeepsThePermit(t *testing.T) {
	srv := redistest.Start(t)
	ctx := ctxFor(t, 2*time.Minute)
	h, x := New(srv.Client(t)), New(srv.Client(t))
	defer h.Close()
	defer x.Close()
	hs, _ := h.NewSemaphore("s", 2)
	a1, err := hs.TryAcquire(ctx, WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	a2, err := hs.TryAcquire(ctx, WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer a2.Release(ctx)
	retriedLateNotice{
		holder: a1,
		wait: func(ctx context.Context, w *Client) (*Lock, error) {
			s, _ := w.NewSemaphore("s", 2)
			return s.Acquire(ctx, WithTTL(30*time.Second))
		},
		try: func(ctx context.Context, x *Client) (*Lock, error) {
			s, _ := x.NewSemaphore("s", 2)
			return s.TryAcquire(ctx)
		},
		inRedis: func(ctx context.Context, rdb *redis.Client, wl *Lock) bool {
			return retriedShareLeft(ctx, rdb, wl.names, wl.token) > 0
		},
	}.run(t, ctx, srv, x)
}

// TestRetriedFirstJoinLateNoticeKeepsTheLock: the same on a mutex, whose
// retried first join found the handed grant (two holders); and with the
// handed grant run out before the second run, which took the lock free
// under the same token.
func TestRetriedFirstJoinLateNoticeKeepsTheLock(t *testing.T) {
	for _, expire := range []bool{false, true} {
		t.Run(fmt.Sprintf("expired=%v", expire), func(t *testing.T) {
			srv := redistest.Start(t)
			ctx := ctxFor(t, 2*time.Minute)
			h, x := New(srv.Client(t)), New(srv.Client(t))
			defer h.Close()
			defer x.Close()
			a1, err := h.TryLock(ctx, "k", WithTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			retriedLateNotice{
				holder: a1,
				wait: func(ctx context.Context, w *Client) (*Lock, error) {
					return w.Lock(ctx, "k", WithTTL(30*time.Second))
				},
				try: func(ctx context.Context, x *Client) (*Lock, error) { return x.TryLock(ctx, "k") },
				inRedis: func(ctx context.Context, rdb *redis.Client, wl *Lock) bool {
					return strings.Contains(rdb.Get(ctx, wl.names.lock).Val(), wl.token)
				},
				expire: expire,
			}.run(t, ctx, srv, x)
		})
	}
}
