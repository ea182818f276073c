package distlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/distlock/distlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

func ctxFor(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func poll(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond) // polling state we cannot wait on
	}
}

// Since is the clock of the client that made the grant: the holder's when
// it took a free lock, the releasing holder's on a handoff; never the
// server's.
func TestSinceIsTheGrantingClientsClock(t *testing.T) {
	srv := redistest.Start(t)
	c := New(srv.Client(t))
	defer c.Close()
	ctx := ctxFor(t, 10*time.Second)
	defer func(f func() int64) { nowMillis = f }(nowMillis)
	// 1970: far from the server's clock. Atomic: a waiter's refresh may
	// read the clock while the test moves it.
	var fakeMs atomic.Int64
	fakeMs.Store(42_000_000)
	fake := func() time.Time { return time.UnixMilli(fakeMs.Load()) }
	nowMillis = fakeMs.Load

	holder, err := c.Lock(ctx, "clock", WithFair())
	if err != nil {
		t.Fatal(err)
	}
	if info, _ := c.Inspect(ctx, "clock"); !info.Since.Equal(fake()) {
		t.Fatalf("Since of a lock taken free: %v, want %v", info.Since, fake())
	}
	got := make(chan *Lock, 1)
	go func() {
		l, err := c.Lock(ctx, "clock", WithFair())
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	rdb := srv.Client(t)
	poll(t, 2*time.Second, "the waiter to line up", func() bool { return rdb.LLen(ctx, "distlock:{clock}:line").Val() == 1 })
	fakeMs.Add(time.Hour.Milliseconds())
	if err := holder.Release(ctx); err != nil { // hands over, with the releaser's clock
		t.Fatal(err)
	}
	var l *Lock
	select {
	case l = <-got:
	case <-ctx.Done():
		t.Fatal("the waiter did not get the lock")
	}
	if l == nil {
		t.FailNow()
	}
	defer l.Release(ctx)
	info, err := c.Inspect(ctx, "clock")
	if err != nil || !info.Held() || !info.Since.Equal(fake()) {
		t.Fatalf("Since of a handed-over lock: %v (held %v, %v), want %v", info.Since, info.Held(), err, fake())
	}
}

// A quorum release that leaves reentrant holds does not wake the local
// line: the lock is not free.
func TestQuorumReleaseWithHoldsLeftWakesNobody(t *testing.T) {
	servers := redistest.StartN(t, 1) // one node: one subscription confirmation to wait for
	nodes := make([]redis.UniversalClient, len(servers))
	for i, s := range servers {
		nodes[i] = s.Client(t)
	}
	c := NewQuorum(nodes)
	defer c.Close()
	ctx := ctxFor(t, 10*time.Second)
	a, err := c.TryLock(ctx, "re", WithOwner("o"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.TryLock(ctx, "re", WithOwner("o"))
	if err != nil {
		t.Fatal(err)
	}
	n := c.ensureNotifier()
	w := n.joinLocal(c.names(mutexKind, "re").channel())
	poll(t, 2*time.Second, "the subscription", func() bool { return n.isLive(w) })
	select {
	case <-w.wake: // the confirmation's wake-up
	default:
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.wake:
		t.Fatal("a release that left a hold woke the local line")
	case <-time.After(100 * time.Millisecond):
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.wake:
	case <-time.After(2 * time.Second):
		t.Fatal("the last release did not wake the local line")
	}
	n.leave(w)
}

// startQuorum starts n redis-servers and a quorum Client over them, closed
// when the test ends.
func startQuorum(t *testing.T, n int) ([]*redistest.Server, *Client, *quorum) {
	t.Helper()
	servers := redistest.StartN(t, n)
	nodes := make([]redis.UniversalClient, n)
	for i, s := range servers {
		nodes[i] = s.Client(t)
	}
	c := NewQuorum(nodes)
	t.Cleanup(func() { c.Close() })
	return servers, c, c.b.(*quorum)
}

// Renewal keeps track of quorum nodes that stop answering, as acquires do.
func TestQuorumRenewalMarksSuspectNodes(t *testing.T) {
	servers, c, q := startQuorum(t, 3)
	ctx := ctxFor(t, 20*time.Second)
	l, err := c.TryLock(ctx, "renewed", WithTTL(600*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	servers[2].Signal(syscall.SIGSTOP)
	defer servers[2].Signal(syscall.SIGCONT)
	poll(t, 5*time.Second, "renewal to mark the frozen node suspect", q.suspect[2].Load)
	servers[2].Signal(syscall.SIGCONT)
	poll(t, 10*time.Second, "renewal to clear the node", func() bool { return !q.suspect[2].Load() })
	if l.Err() != nil {
		t.Fatalf("lost with a majority up: %v", l.Err())
	}
}

// A frozen minority (a stopped redis-server accepts connections and never
// answers, as a blackholed link does) costs a quorum TTL, renewal and
// Release nothing: they return once a majority answered, not at the
// decision wait.
func TestQuorumFrozenMinorityDoesNotDelay(t *testing.T) {
	servers, c, q := startQuorum(t, 3)
	ctx := ctxFor(t, 30*time.Second)
	const ttl = 20 * time.Second
	wait := decisionWait(ttl) // 1 s: far beyond two healthy round trips
	l, err := c.TryLock(ctx, "k", WithTTL(ttl), WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	direct := make([]*redis.Client, len(servers))
	for i, s := range servers {
		direct[i] = s.Client(t)
		// TryLock returned at the majority's grants; the last one may
		// still be on its way.
		poll(t, 5*time.Second, fmt.Sprintf("node %d to hold the lock", i), func() bool {
			return direct[i].Exists(ctx, "distlock:{k}").Val() == 1
		})
	}
	servers[2].Signal(syscall.SIGSTOP)
	defer servers[2].Signal(syscall.SIGCONT)

	start := time.Now()
	if d, err := l.TTL(ctx); err != nil || d < ttl/2 || time.Since(start) >= wait {
		t.Fatalf("TTL with a frozen node: %v, %v after %v, decision wait %v", d, err, time.Since(start), wait)
	}
	start = time.Now()
	res := q.renew([]*Lock{l})
	if took := time.Since(start); res[0].out != extendDone || took >= wait {
		t.Fatalf("renewal with a frozen node: %v (%v) after %v, decision wait %v", res[0].out, res[0].err, took, wait)
	}
	start = time.Now()
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took >= wait {
		t.Fatalf("Release with a frozen node took %v, decision wait %v", took, wait)
	}
	for i, rdb := range direct[:2] {
		if rdb.Exists(ctx, "distlock:{k}").Val() != 0 {
			t.Fatalf("node %d still holds the lock after Release", i)
		}
	}
	// The thawed node answers the calls it was sent: the release frees it.
	servers[2].Signal(syscall.SIGCONT)
	poll(t, 10*time.Second, "the thawed node to be released", func() bool {
		return direct[2].Exists(ctx, "distlock:{k}").Val() == 0
	})
}

// Subscribe and unsubscribe of one channel reach Redis in the order they
// were asked for: a channel pruned while idle and joined again right after
// stays subscribed.
func TestPruneThenRejoinStaysSubscribed(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	c := New(rdb)
	defer c.Close()
	ctx := ctxFor(t, 20*time.Second)
	n := c.ensureNotifier()
	const channel = "distlock:{x}:to:test"
	for round := range 20 {
		n.leave(n.join(channel, hold{token: "t"}))
		for i := range maxIdleChannels { // push x out: it is the oldest idle channel
			n.leave(n.join(channel+string(rune('a'+round))+string(rune(i)), hold{token: "t"}))
		}
		w := n.join(channel, hold{token: "t"}) // and back
		poll(t, 5*time.Second, "the channel to be confirmed", func() bool { return n.isLive(w) })
		n.leave(w)
	}
	// A last channel, confirmed on the same connection after every request
	// above reached Redis: if they were applied in order, x is subscribed.
	last := n.join("distlock:{y}:to:test", hold{token: "t"})
	poll(t, 5*time.Second, "the last channel to be confirmed", func() bool { return n.isLive(last) })
	if got := rdb.PubSubNumSub(ctx, channel).Val()[channel]; got != 1 {
		t.Fatalf("channel subscribed %d times after the last join, want 1", got)
	}
}

// Short holds never enter the renewer's schedule: a lock released before
// the scheduler next wakes is dropped from its pending list, and that list
// is drained at least every pendingDrain.
func TestReleasedLocksLeaveTheRenewer(t *testing.T) {
	srv := redistest.Start(t)
	c := New(srv.Client(t))
	defer c.Close()
	ctx := ctxFor(t, 30*time.Second)
	long, err := c.Lock(ctx, "long")
	if err != nil {
		t.Fatal(err)
	}
	defer long.Release(ctx)
	for range 3000 {
		l, err := c.Lock(ctx, "short")
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	r := c.renewer
	counts := func() (pending, scheduled int) {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.pending), r.scheduled
	}
	if p, _ := counts(); p >= maxPending {
		t.Fatalf("%d locks pending, want fewer than %d", p, maxPending)
	}
	poll(t, 3*pendingDrain, "the scheduler to drain its pending locks", func() bool {
		p, s := counts()
		return p == 0 && s == 1
	})
}

// Locks released after the scheduler took them in leave its schedule too,
// soon after, not at their renewal time, a third of their TTL away: with
// long leases the schedule grew with every release.
func TestScheduledLocksLeaveTheRenewerWhenReleased(t *testing.T) {
	srv := redistest.Start(t)
	c := New(srv.Client(t))
	defer c.Close()
	ctx := ctxFor(t, 30*time.Second)
	const n = 100
	locks := make([]*Lock, n)
	for i := range locks {
		l, err := c.TryLock(ctx, fmt.Sprintf("long:%d", i), WithTTL(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		locks[i] = l
	}
	r := c.renewer
	scheduled := func() int {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.scheduled
	}
	poll(t, 3*pendingDrain, "the scheduler to take the locks in", func() bool { return scheduled() == n })
	for _, l := range locks {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	poll(t, 3*pendingDrain, "the released locks to leave the schedule", func() bool { return scheduled() == 0 })
}

// globMatch decides as Redis' own MATCH does, malformed patterns, ranges
// over bytes above 0x7f and escapes in classes included; and a sealed
// pattern inside List's SCAN pattern lets through every name it matches.
func TestGlobMatchAgreesWithRedis(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := ctxFor(t, 20*time.Second)
	names := []string{"a", "b", "ab", "ba", "abc", "a}x", "b{a", "x{a}y", `a\`, `\`, "[a", "a]", "]", "-", "^",
		"*", "?", "a*", "aa", "aaa", "é", "\xff", "z", "A", "a-b", "a\\b", "{}", "}", "{"}
	patterns := []string{"*", "a", "a*", "*a", "?", "??", "a?", "*a*", "a*c", "**", `a\`, `\`, `\\`, `a\*`, `\*`, `\?`,
		"[ab]", "[^ab]", "[a-b]", "[b-a]", "[a-]", "[-a]", "[]", "[]a]", "[^]", "[\\]]", "[a\\-z]", "[", "[^", "[a",
		"[a-", "a[", "[ab]*", "*[}]", "[a-\xff]", "[\x80-\xff]", "[^a-z]", "[A-Z]", "a*b*", "*{a*", "?{a*", "[{]*"}
	for _, n := range names {
		rdb.Set(ctx, n, "", 0)
		rdb.Set(ctx, "p:x{"+n+"}:h", "", 0)
	}
	scan := func(match string) map[string]bool {
		got := map[string]bool{}
		keys, _, err := rdb.Scan(ctx, 0, match, 10_000).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			got[k] = true
		}
		return got
	}
	for _, p := range patterns {
		redisSays := scan(p)
		var inList map[string]bool
		if globSealed(p) {
			inList = scan("p:*{" + p + "}*")
		}
		for _, n := range names {
			if globMatch(p, n) != redisSays[n] {
				t.Errorf("globMatch(%q, %q) = %v, Redis says %v", p, n, globMatch(p, n), redisSays[n])
			}
			if inList != nil && redisSays[n] && !inList["p:x{"+n+"}:h"] {
				t.Errorf("sealed %q in a longer pattern misses %q", p, n)
			}
		}
	}
}

// remakeCounter counts the subscriptions its Client made anew because a
// waiter was passed over.
type remakeCounter struct{ n atomic.Int64 }

func (o *remakeCounter) Start(ctx context.Context, _ EventKind, _ string) context.Context {
	return ctx
}
func (o *remakeCounter) Link(context.Context) string { return "" }
func (o *remakeCounter) Observe(_ context.Context, e Event) {
	if e.Kind == EventResubscribed && errors.Is(e.Err, errPassedOver) {
		o.n.Add(1)
	}
}

// A waiter whose deadline has passed by the releasers' clocks (here theirs
// run 10 s ahead of its deadline) is skipped by every handoff and finds
// itself gone from the line at each ask, as docs/design.md says. Its
// subscription is on the one master of a standalone server: its Client
// must not make it anew at every ask (each time waking all its waiters and
// leaving a gap in which handoffs to them go unheard).
func TestSkewedWaiterKeepsItsSubscription(t *testing.T) {
	srv := redistest.Start(t)
	ctx := ctxFor(t, 30*time.Second)
	defer func(f func() int64) { nowMillis = f }(nowMillis)
	nowMillis = func() int64 { return time.Now().UnixMilli() + 10_000 }
	remade := &remakeCounter{}
	holders := New(srv.Client(t))
	defer holders.Close()
	waiter := New(srv.Client(t), WithObserver(remade))
	defer waiter.Close()
	rdb := srv.Client(t)
	line := func() int64 { return rdb.LLen(ctx, "distlock:{skew}:line").Val() }

	l, err := holders.TryLock(ctx, "skew", WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 { // two holders hand the lock to each other
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				hl, err := holders.Lock(ctx, "skew", WithTTL(5*time.Second))
				if err != nil {
					return
				}
				time.Sleep(50 * time.Millisecond) // the work of a critical section
				_ = hl.Release(ctx)
			}
		}()
	}
	poll(t, 2*time.Second, "the two holders in line", func() bool { return line() == 2 })
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		wl, err := waiter.Lock(wctx, "skew")
		if err == nil {
			_ = wl.Release(ctx)
		}
		done <- err
	}()
	poll(t, 2*time.Second, "the waiter in line", func() bool { return line() == 3 })
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	werr := <-done
	close(stop)
	wg.Wait()
	t.Logf("the waiter's Lock: %v; its Client made its subscription anew %d times", werr, remade.n.Load())
	if n := remade.n.Load(); n > 0 {
		t.Errorf("a standalone Client made its subscription anew %d times in 5 s: its waiter was passed over for its deadline, not because nobody heard it", n)
	}
}

// List's readers stop when ctx ends; the holds they did not read then make
// an error, never a shorter list with a nil error. (Since c7f788d a reader
// that found ctx ended before its next read returned without one, so a ctx
// that ended between the SCAN and the reads, or between two reads, gave a
// list missing holds, and no error.)
func TestListReadsEndingWithCtxGiveAnError(t *testing.T) {
	srv := redistest.Start(t)
	c := New(srv.Client(t))
	defer c.Close()
	ctx := ctxFor(t, 10*time.Second)
	var all []listed
	for i := range 20 {
		name := fmt.Sprintf("k%02d", i)
		l, err := c.TryLock(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(context.Background())
		all = append(all, listed{"", name})
	}
	ended, cancel := context.WithCancel(ctx)
	cancel()
	infos, err := c.readHolds(ended, all)
	if err == nil {
		t.Fatalf("read %d of %d holds under an ended ctx, and no error", len(infos), len(all))
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want one that matches context.Canceled", err)
	}
}
