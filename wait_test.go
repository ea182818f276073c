package distlock_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// acquireAsync runs c.Lock in a goroutine and delivers the lock (or error).
func acquireAsync(ctx context.Context, c *distlock.Client, key string, opts ...distlock.Option) <-chan lockResult {
	out := make(chan lockResult, 1)
	go func() {
		l, err := c.Lock(ctx, key, opts...)
		out <- lockResult{l, err, time.Now()}
	}()
	return out
}

type lockResult struct {
	l   *distlock.Lock
	err error
	at  time.Time
}

func recv(t *testing.T, ch <-chan lockResult, within time.Duration) lockResult {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("Lock: %v", r.err)
		}
		return r
	case <-time.After(within):
		t.Fatalf("Lock did not return within %v", within)
	}
	return lockResult{}
}

// waitGroupWithin fails the test unless wg's goroutines are done within
// the bound.
func waitGroupWithin(t *testing.T, wg *sync.WaitGroup, within time.Duration, what string) {
	t.Helper()
	ended := make(chan struct{})
	go func() { wg.Wait(); close(ended) }()
	select {
	case <-ended:
	case <-time.After(within):
		t.Fatalf("timed out after %v waiting for %s", within, what)
	}
}

// waitLost fails the test unless l's Lost channel closes within the bound.
func waitLost(t *testing.T, l *distlock.Lock, within time.Duration) {
	t.Helper()
	select {
	case <-l.Lost():
	case <-time.After(within):
		t.Fatalf("Lost did not fire within %v", within)
	}
}

// waitFor polls cond (Redis state we cannot subscribe to) until it holds.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond) // polling Redis state
	}
}

// A waiter in another Client (another process's view) is woken by the
// release notice, not by its backoff: its retry strategy would make it wait
// 10s.
func TestReleaseWakesWaiterAtOnce(t *testing.T) {
	c, rdb, _ := setup(t)
	other := distlock.New(rdb)
	defer other.Close()
	ctx := ctxT(t, 20*time.Second)
	for _, fair := range []bool{false, true} {
		t.Run(fmt.Sprintf("fair=%v", fair), func(t *testing.T) {
			var opts []distlock.Option
			if fair {
				opts = append(opts, distlock.WithFair())
			}
			key := fmt.Sprintf("wake-%v", fair)
			l, err := c.TryLock(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			got := acquireAsync(ctx, other, key, opts...)
			waitSubscribed(t, rdb, key)
			released := time.Now()
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			r := recv(t, got, 2*time.Second)
			// A waiter that missed the handoff would ask again a second
			// later; under half of that proves the wake-up is event-driven
			// and leaves a loaded machine room.
			if d := r.at.Sub(released); d > 2*time.Second/5 {
				t.Fatalf("waiter took %v after the release", d)
			} else {
				t.Logf("release → waiter holds: %v", d)
			}
			if r.l.Fence() <= l.Fence() {
				t.Fatalf("fence %d after %d", r.l.Fence(), l.Fence())
			}
			r.l.Release(ctx)
		})
	}
}

// A release whose notice is lost (the key deleted behind distlock's back)
// is found by the safety-net retry.
func TestLostNoticeIsCoveredByRetry(t *testing.T) {
	c, rdb, _ := setup(t)
	ctx := ctxT(t, 10*time.Second)
	if _, err := c.TryLock(ctx, "quiet", distlock.WithTTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	other := distlock.New(rdb)
	defer other.Close()
	got := acquireAsync(ctx, other, "quiet")
	waitSubscribed(t, rdb, "quiet")
	rdb.Del(ctx, "distlock:{quiet}") // freed without a notice
	recv(t, got, 3*time.Second)      // waiters ask again every second
}

// Killing the subscription connection does not strand a waiter: go-redis
// reconnects, resubscribes, and the confirmation makes the waiter retry.
func TestSubscriptionKilledDoesNotStrandWaiter(t *testing.T) {
	c, rdb, _ := setup(t)
	ctx := ctxT(t, 10*time.Second)
	l, err := c.TryLock(ctx, "kill", distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	other := distlock.New(rdb)
	defer other.Close()
	got := acquireAsync(ctx, other, "kill")
	waitSubscribed(t, rdb, "kill")
	waitHolders(t, rdb, 1)
	// (the waiter's subscription and the holder's, on the holders channel)
	if n, err := rdb.ClientKillByFilter(ctx, "TYPE", "pubsub").Result(); err != nil || n != 2 {
		t.Fatalf("CLIENT KILL TYPE pubsub: %d, %v; want 2", n, err)
	}
	// Release while the subscription is down: the notice is lost.
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	recv(t, got, 2*time.Second)
}

func TestWaiterContextCancelled(t *testing.T) {
	c, rdb, _ := setup(t)
	ctx := ctxT(t, 10*time.Second)
	for _, fair := range []bool{false, true} {
		key := fmt.Sprintf("cancel-%v", fair)
		if _, err := c.TryLock(ctx, key); err != nil {
			t.Fatal(err)
		}
		opts := []distlock.Option{}
		if fair {
			opts = append(opts, distlock.WithFair())
		}
		short, cancel := context.WithCancel(ctx)
		got := acquireAsync(short, c, key, opts...)
		waitSubscribed(t, rdb, key)
		if fair {
			waitFor(t, 2*time.Second, "the waiter to line up", func() bool {
				return rdb.LLen(ctx, "distlock:{"+key+"}:line").Val() == 1
			})
		}
		cancelled := time.Now()
		cancel()
		select {
		case r := <-got:
			if !errors.Is(r.err, context.Canceled) || !errors.Is(r.err, distlock.ErrNotObtained) {
				t.Fatalf("fair=%v: %v", fair, r.err)
			}
			if d := r.at.Sub(cancelled); d > deadlineSlack {
				t.Fatalf("fair=%v: returned %v after cancel", fair, d)
			}
		case <-time.After(2 * time.Second):
			t.Fatalf("fair=%v: waiter did not return after cancel", fair)
		}
		// The waiter leaves the line in the background, at once.
		waitFor(t, time.Second, "the waiter to leave the line", func() bool {
			return rdb.LLen(ctx, "distlock:{"+key+"}:line").Val() == 0
		})
	}
}

// In fair mode waiters get the lock in arrival order, and the releaser, who
// asks again at once, waits for its turn.
func TestFairOrder(t *testing.T) {
	c, rdb, _ := setup(t)
	ctx := ctxT(t, 20*time.Second)
	first, err := c.Lock(ctx, "fifo", distlock.WithFair())
	if err != nil {
		t.Fatal(err)
	}
	const n = 6
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := range n {
		// Each waiter uses its own Client, as separate processes would.
		wc := distlock.New(rdb)
		defer wc.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := wc.Lock(ctx, "fifo", distlock.WithFair())
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			l.Release(ctx)
		}()
		waitFor(t, 2*time.Second, "the waiter to line up", func() bool {
			return rdb.LLen(ctx, "distlock:{fifo}:line").Val() == int64(i+1)
		})
	}
	first.Release(ctx)
	wg.Wait()
	for i, got := range order {
		if got != i {
			t.Fatalf("grant order %v, want arrival order", order)
		}
	}
}

// A fair TryLock does not take a free lock ahead of the line: the head is
// handed it. The lock is freed as an expired lease frees it (its key gone)
// while the waiter, told the holder's lease is long, waits for a notice.
func TestFairTryLockLeavesFreeLockToLine(t *testing.T) {
	c, rdb, _ := setup(t)
	ctx := ctxT(t, 20*time.Second)
	holder, err := c.Lock(ctx, "queue", distlock.WithFair())
	if err != nil {
		t.Fatal(err)
	}
	wc := distlock.New(rdb) // the waiter's own process
	defer wc.Close()
	waiter := acquireAsync(ctx, wc, "queue", distlock.WithFair())
	waitFor(t, 2*time.Second, "the waiter to line up", func() bool {
		return rdb.LLen(ctx, "distlock:{queue}:line").Val() == 1
	})
	if err := rdb.Del(ctx, "distlock:{queue}").Err(); err != nil {
		t.Fatal(err)
	}
	tc := distlock.New(rdb)
	defer tc.Close()
	if l, err := tc.TryLock(ctx, "queue", distlock.WithFair()); !errors.Is(err, distlock.ErrNotObtained) {
		t.Fatalf("fair TryLock of a free lock with a waiter in line: lock %t, error %v; want ErrNotObtained", l != nil, err)
	}
	got := recv(t, waiter, 5*time.Second)
	if got.l.Fence() <= holder.Fence() {
		t.Fatalf("waiter's fence %d, holder's %d", got.l.Fence(), holder.Fence())
	}
	if err := got.l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// With nobody in line a fair TryLock takes the lock, leaving no line.
	l, err := tc.TryLock(ctx, "queue", distlock.WithFair())
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := rdb.Exists(ctx, "distlock:{queue}", "distlock:{queue}:line").Val(); n != 0 {
		t.Fatalf("%d keys of the lock left", n)
	}
}

// A fair waiter whose process vanished (its entry is no longer refreshed) is
// skipped once its entry's deadline passes, so the line never wedges.
func TestFairDeadWaiterIsSkipped(t *testing.T) {
	c, rdb, srv := setup(t)
	ctx := ctxT(t, 20*time.Second)
	holder, err := c.Lock(ctx, "line", distlock.WithFair())
	if err != nil {
		t.Fatal(err)
	}
	dead := startHelper(t, "fairwait", "DISTLOCK_ADDR="+srv.Addr, "DISTLOCK_KEY=line")
	waitFor(t, 5*time.Second, "the helper to line up", func() bool {
		return rdb.LLen(ctx, "distlock:{line}:line").Val() == 1
	})
	live := acquireAsync(ctx, c, "line", distlock.WithFair())
	waitFor(t, 2*time.Second, "the live waiter to line up", func() bool {
		return rdb.LLen(ctx, "distlock:{line}:line").Val() == 2
	})
	_ = dead.cmd.Process.Kill()
	killed := time.Now()
	holder.Release(ctx)
	r := recv(t, live, 10*time.Second)
	t.Logf("live waiter got the lock %v after the dead one was killed", r.at.Sub(killed).Round(time.Millisecond))
	if d := r.at.Sub(killed); d > 5*time.Second {
		t.Fatalf("line wedged for %v", d)
	}
}

// In default mode, a process that releases and asks again at once queues
// behind its own waiters instead of re-grabbing the lock.
func TestDefaultModeReleaserDoesNotBarge(t *testing.T) {
	c, rdb, _ := setup(t)
	ctx := ctxT(t, 10*time.Second)
	l, err := c.Lock(ctx, "barge")
	if err != nil {
		t.Fatal(err)
	}
	waiter := acquireAsync(ctx, c, "barge")
	waitSubscribed(t, rdb, "barge") // the waiter is in this process's line
	l.Release(ctx)
	releaser := acquireAsync(ctx, c, "barge")
	w := recv(t, waiter, 2*time.Second)
	w.l.Release(ctx)
	r := recv(t, releaser, 2*time.Second)
	if r.l.Fence() < w.l.Fence() {
		t.Fatalf("releaser re-grabbed: its fence %d, the waiter's %d", r.l.Fence(), w.l.Fence())
	}
}

// waitHolders waits until n Clients listen on the holders channel, which
// a Client subscribes to in the background when first granted a lock:
// tests that count commands start counting after that SUBSCRIBE.
func waitHolders(t *testing.T, rdb *redis.Client, n int64) {
	t.Helper()
	const channel = distlock.DefaultPrefix + "holders"
	waitFor(t, 5*time.Second, "the holders subscription", func() bool {
		return rdb.PubSubNumSub(context.Background(), channel).Val()[channel] >= n
	})
}

// waitSubscribed waits until some Client listens on one of key's channels
// (the shared release channel or a Client's inbox).
func waitSubscribed(t *testing.T, rdb *redis.Client, key string) {
	t.Helper()
	pattern := "distlock:{" + key + "}:*"
	waitFor(t, 2*time.Second, "a subscription to "+pattern, func() bool {
		chs, _ := rdb.PubSubChannels(context.Background(), pattern).Result()
		return len(chs) >= 1
	})
}

// A line lives 30 s after the last waiter asked, whether it joined a line
// that was there already or asked again from its place: a line refreshed
// only when it was made died under waiters that kept asking, and the lock
// went to nobody in line (to a caller that came later, for WithFair).
func TestLineLivesWhileWaitersAsk(t *testing.T) {
	c, rdb, _ := setup(t)
	ctx := ctxT(t, 15*time.Second)
	const line = "distlock:{busy}:line"
	holder, err := c.TryLock(ctx, "busy")
	if err != nil {
		t.Fatal(err)
	}
	// shortened stands for a line made 29 s ago; lives waits for its TTL to be a line's again.
	shortened := func() {
		t.Helper()
		if !rdb.PExpire(ctx, line, 3*time.Second).Val() {
			t.Fatal("no line")
		}
	}
	lives := func(what string) {
		t.Helper()
		// (waiters ask again at least every second)
		waitFor(t, 2500*time.Millisecond, what, func() bool { return rdb.PTTL(ctx, line).Val() > 10*time.Second })
	}
	for _, fair := range []bool{false, true} {
		var opts []distlock.Option
		if fair {
			opts = append(opts, distlock.WithFair())
		}
		a, b := distlock.New(rdb), distlock.New(rdb)
		defer a.Close()
		defer b.Close()
		first := acquireAsync(ctx, a, "busy", opts...)
		waitFor(t, 2*time.Second, "the first waiter to line up", func() bool { return rdb.LLen(ctx, line).Val() == 1 })
		shortened()
		second := acquireAsync(ctx, b, "busy", opts...)
		waitFor(t, 2*time.Second, "the second waiter to line up", func() bool { return rdb.LLen(ctx, line).Val() == 2 })
		lives(fmt.Sprintf("fair %v: the line to live on when a waiter joins it", fair))
		shortened()
		lives(fmt.Sprintf("fair %v: the line to live on when its waiters ask again", fair))
		for _, next := range []<-chan lockResult{first, second} {
			if err := holder.Release(ctx); err != nil {
				t.Fatal(err)
			}
			holder = recv(t, next, 2*time.Second).l
		}
	}
}

// TestWaitersThatGaveUpLeaveTheLine: a waiter that gives up at its deadline
// leaves the line as a cancelled one does. Handoffs skip its entry once the
// deadline has passed, but while the lock stays held nothing else removes
// it, and the line grew with every such waiter (the audit counted 599
// entries after 12 s of waiters arriving every 20 ms under a held lock).
func TestWaitersThatGaveUpLeaveTheLine(t *testing.T) {
	c, rdb, srv := setup(t)
	ctx := ctxT(t, 60*time.Second)
	w := distlock.New(srv.Client(t))
	defer w.Close()
	if _, err := c.TryLock(ctx, "m"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryLock(ctx, "f", distlock.WithFair()); err != nil {
		t.Fatal(err)
	}
	sem, _ := c.NewSemaphore("s", 1)
	if _, err := sem.TryAcquire(ctx); err != nil {
		t.Fatal(err)
	}
	rw, _ := c.NewRWMutex("rw")
	if _, err := rw.TryRLock(ctx); err != nil {
		t.Fatal(err)
	}
	wsem, _ := w.NewSemaphore("s", 1)
	wrw, _ := w.NewRWMutex("rw")
	waits := map[string]func(context.Context) error{
		"lock":      func(ctx context.Context) error { _, err := w.Lock(ctx, "m"); return err },
		"fair lock": func(ctx context.Context) error { _, err := w.Lock(ctx, "f", distlock.WithFair()); return err },
		"semaphore": func(ctx context.Context) error { _, err := wsem.Acquire(ctx); return err },
		"write":     func(ctx context.Context) error { _, err := wrw.Lock(ctx); return err },
	}
	const rounds = 25
	for i := range rounds {
		for name, wait := range waits {
			short, cancel := context.WithTimeout(ctx, time.Duration(20+i%3*10)*time.Millisecond)
			err := wait(short)
			cancel()
			if !errors.Is(err, distlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("%s: %v", name, err)
			}
		}
	}
	w.Close() // waits for what the waiters left to do in the background
	if lines := rdb.Keys(ctx, "*:line").Val(); len(lines) > 0 {
		for _, k := range lines {
			t.Errorf("%s holds %d entries after %d waiters gave up", k, rdb.LLen(ctx, k).Val(), rounds)
		}
	}
	if info, err := c.Inspect(ctx, "m"); err != nil || info.Queued != 0 {
		t.Errorf("Inspect counts %d waiting, nobody waits (%v)", info.Queued, err)
	}
}

// TestKilledWaitersLeaveTheLine: a waiter killed outright (SIGKILL) cannot
// leave the line, and while the lock stays held and others wait nothing
// removed its entry (a semaphore's line, refreshed by every re-ask, kept
// it for good). A live waiter's re-ask now clears the dead entry ahead of
// it, and the live one stays in line and gets the lock.
func TestKilledWaitersLeaveTheLine(t *testing.T) {
	c, rdb, srv := setup(t)
	ctx := ctxT(t, 30*time.Second)
	for _, tc := range []struct {
		kind, helper, key, line string
		hold                    func() (*distlock.Lock, error)
		wait                    func(context.Context) (*distlock.Lock, error)
	}{
		{"lock", "fairwait", "dead-l", "distlock:{dead-l}:line",
			func() (*distlock.Lock, error) { return c.TryLock(ctx, "dead-l") },
			func(ctx context.Context) (*distlock.Lock, error) { return c.Lock(ctx, "dead-l", distlock.WithFair()) }},
		{"semaphore", "semwait", "dead-s", "distlock:sem{dead-s}:line",
			func() (*distlock.Lock, error) { s, _ := c.NewSemaphore("dead-s", 1); return s.TryAcquire(ctx) },
			func(ctx context.Context) (*distlock.Lock, error) {
				s, _ := c.NewSemaphore("dead-s", 1)
				return s.Acquire(ctx)
			}},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			holder, err := tc.hold()
			if err != nil {
				t.Fatal(err)
			}
			dead := startHelper(t, tc.helper, "DISTLOCK_ADDR="+srv.Addr, "DISTLOCK_KEY="+tc.key)
			waitFor(t, 5*time.Second, "the helper to line up", func() bool {
				return rdb.LLen(ctx, tc.line).Val() == 1
			})
			got := make(chan error, 1)
			go func() {
				l, err := tc.wait(ctx)
				if err == nil {
					err = l.Release(ctx)
				}
				got <- err
			}()
			waitFor(t, 5*time.Second, "the live waiter to line up", func() bool {
				return rdb.LLen(ctx, tc.line).Val() == 2
			})
			_ = dead.cmd.Process.Kill()
			// A waiter re-asks at least every second.
			waitFor(t, 10*time.Second, "the dead waiter's entry to go", func() bool {
				return rdb.LLen(ctx, tc.line).Val() == 1
			})
			if err := holder.Release(ctx); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-got:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the live waiter did not get the lock")
			}
		})
	}
}

// TestCrashedHolderTakenAtExpiryWhileUnsubscribed: design.md,
// Waiting: "no lost wake-up: a waiter asks Redis again when the holder's
// lease runs out (a crashed holder's lock is taken within milliseconds of
// its expiry)"; README: "If the holder dies, the lock is taken by a waiter
// within milliseconds of the lease's end". The waiter's first ask learns
// the holder's lease left, but while its Client's subscription is not yet
// confirmed (here: the pub/sub connection cannot be dialled, as when the
// network to Redis is slow to accept new connections or a reconnect is
// under way) call.heard parked for liveWait (1 s) without regard to that
// lease, so a lock whose holder crashed was taken up to a second after its
// lease ended although the waiter's command connection worked throughout.
// It parks until the lease ends at most.
func TestCrashedHolderTakenAtExpiryWhileUnsubscribed(t *testing.T) {
	const lease = 200 * time.Millisecond
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := ctxT(t, 30*time.Second)

	gate := make(chan struct{}) // closed: new connections may be dialled
	var gated atomic.Bool
	t.Cleanup(func() { close(gate) })
	opts := srv.Options()
	opts.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if gated.Load() {
			select {
			case <-gate:
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(10 * time.Second):
				return nil, errors.New("review: dial held back")
			}
		}
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	wr := redis.NewClient(opts)
	defer wr.Close()
	must(t, wr.Ping(ctx).Err()) // the waiter's command connection, dialled now
	gated.Store(true)           // from here only its pub/sub connection is held back
	w := distlock.New(wr)
	defer w.Close()

	holder := distlock.New(rdb)
	defer holder.Close()
	// A holder that crashed: nothing renews its lease.
	if _, err := holder.TryLock(ctx, "crashed", distlock.WithTTL(lease), distlock.WithoutRenewal()); err != nil {
		t.Fatal(err)
	}
	end, err := rdb.PExpireTime(ctx, "distlock:{crashed}").Result()
	must(t, err)
	expiry := time.UnixMilli(int64(end / time.Millisecond))

	l, err := w.Lock(ctx, "crashed")
	must(t, err)
	defer l.Release(context.Background())
	late := time.Since(expiry)
	t.Logf("taken %v after the holder's lease ended", late)
	if late > 400*time.Millisecond {
		t.Fatalf("a crashed holder's lock (lease %v) was taken %v after its lease ended; want within milliseconds (bound 400ms): the waiter parked for its subscription, not for the lease", lease, late)
	}
}

// TestUnheardWaiterAsksEverySecond: a waiter whose subscription is never
// confirmed (here its user may not subscribe: ACL resetchannels) is passed
// over by every handoff, so its own asks are all it has; it must still ask
// every lineRefresh (1 s), not wait for the subscription for a second and
// then for its next ask for another. Asks are told by the server's count
// of script calls: the holder, on a 30 s lease, sends nothing meanwhile.
func TestUnheardWaiterAsksEverySecond(t *testing.T) {
	const lineRefresh = time.Second // single.go
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := ctxT(t, 30*time.Second)
	holder := distlock.New(srv.Client(t))
	defer holder.Close()
	deafRdb := aclUser(t, ctx, srv, "deaf", "resetchannels") // may not subscribe
	waiter := distlock.New(deafRdb)
	defer waiter.Close()
	if _, err := holder.TryLock(ctx, "unheard", distlock.WithTTL(30*time.Second)); err != nil {
		t.Fatal(err)
	}
	calls := func() int64 {
		info := admin.Info(ctx, "commandstats").Val()
		var n int64
		for _, cmd := range []string{"cmdstat_evalsha:calls=", "cmdstat_eval:calls="} {
			if _, rest, ok := strings.Cut(info, cmd); ok {
				v, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
				n += v
			}
		}
		return n
	}
	wctx, cancel := context.WithTimeout(ctx, 7*time.Second)
	defer cancel()
	got := acquireAsync(wctx, waiter, "unheard")
	var asks []time.Time
	last := calls()
	for len(got) == 0 {
		if n := calls(); n != last {
			asks, last = append(asks, time.Now()), n
		}
		time.Sleep(10 * time.Millisecond) // polling Redis's counters
	}
	if r := <-got; !errors.Is(r.err, distlock.ErrNotObtained) {
		t.Fatalf("the waiter's Lock: %v, want ErrNotObtained at its deadline", r.err)
	}
	var gaps []time.Duration
	for i := 2; i < len(asks); i++ { // from its second ask on: it is in line
		gaps = append(gaps, asks[i].Sub(asks[i-1]))
	}
	if len(gaps) < 3 {
		t.Fatalf("an unheard waiter asked %d times in 7 s, want about once every %v", len(asks), lineRefresh)
	}
	t.Logf("gaps between asks: %v", gaps)
	slices.Sort(gaps)
	if median := gaps[len(gaps)/2]; median > lineRefresh*3/2 {
		t.Errorf("an unheard waiter asked every %v (median of %v), want about every %v", median, gaps, lineRefresh)
	}
}

// TestReconnectedSubscriptionIsNotRemade: on a standalone server, where no
// failover can happen, a waiter's Client loses its subscription for a
// while (its connection killed, its user disabled) and a release in that
// gap passes the waiter over. go-redis's reconnection put the subscription
// back on the one master; the waiter's next ask finds itself passed over,
// and its Client must not tear that subscription down and make it anew (a
// second gap, in which its other waiters go unheard).
func TestReconnectedSubscriptionIsNotRemade(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := ctxT(t, 60*time.Second)
	rec := &recorder{}
	rdb := aclUser(t, ctx, srv, "w", "&*")
	waiter := distlock.New(rdb, distlock.WithObserver(rec))
	defer waiter.Close()
	holder := distlock.New(srv.Client(t))
	defer holder.Close()
	l, err := holder.TryLock(ctx, "reconnected", distlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := acquireAsync(ctx, waiter, "reconnected")
	waitFor(t, 5*time.Second, "the waiter subscribed and in line", func() bool {
		return failoverEdgeChannels(ctx, admin, "reconnected") == 1 &&
			admin.LLen(ctx, distlock.DefaultPrefix+"{reconnected}:line").Val() == 1
	})
	if err := admin.Do(ctx, "ACL", "SETUSER", "w", "off").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the subscription gone", func() bool { return failoverEdgeChannels(ctx, admin, "reconnected") == 0 })
	if err := l.Release(ctx); err != nil { // passes the unheard waiter over
		t.Fatal(err)
	}
	if err := admin.Do(ctx, "ACL", "SETUSER", "w", "on").Err(); err != nil {
		t.Fatal(err)
	}
	r := recv(t, got, 10*time.Second)
	defer r.l.Release(ctx)
	// The Client's subscription changes go in order: once a later wait's
	// channel is subscribed, a remake asked for by the ask above is done.
	l2, err := holder.TryLock(ctx, "reconnected-later", distlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Release(ctx)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	acquireAsync(wctx, waiter, "reconnected-later")
	waitFor(t, 5*time.Second, "a later wait subscribed", func() bool {
		return failoverEdgeChannels(ctx, admin, "reconnected-later") == 1
	})
	if e, ok := rec.find(distlock.EventResubscribed, func(e distlock.Event) bool {
		return e.Err != nil && strings.Contains(e.Err.Error(), "passed a waiter over")
	}); ok {
		t.Errorf("a standalone Client made its reconnected subscription anew (%v): nothing failed over", e.Err)
	}
}

// A fair Lock of a free lock with nobody in line takes it at once, even
// when its Client's subscription cannot be confirmed (here its user may
// not subscribe; or the pub/sub connection is reconnecting): it waited for
// the subscription before it asked at all, a full second (liveWait), where
// a plain Lock took the lock at once.
func TestFairLockOfFreeLockDoesNotWaitForItsSubscription(t *testing.T) {
	srv := redistest.Start(t)
	ctx := ctxT(t, 30*time.Second)
	deafRdb := aclUser(t, ctx, srv, "deaf", "resetchannels") // may not subscribe
	c := distlock.New(deafRdb)
	defer c.Close()
	for i := range 3 {
		start := time.Now()
		l, err := c.Lock(ctx, "free", distlock.WithFair())
		if err != nil {
			t.Fatal(err)
		}
		d := time.Since(start)
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if d > 300*time.Millisecond {
			t.Fatalf("fair Lock %d of a free lock, nobody in line, took %v", i, d)
		}
	}
}

// TestFairSharedHoldOfFreeLockDoesNotWaitForItsSubscription: options of
// RLock, Lock and Acquire are "as for Client.Lock"; a fair Lock of a free
// lock takes it at once even when the Client's subscription cannot be
// confirmed (TestFairLockOfFreeLockDoesNotWaitForItsSubscription, c302365).
// A read-write lock or a semaphore with WithFair waited for its
// subscription (liveWait, 1 s) before it asked at all (found in review).
func TestFairSharedHoldOfFreeLockDoesNotWaitForItsSubscription(t *testing.T) {
	srv := redistest.Start(t)
	ctx := ctxT(t, 30*time.Second)
	deafRdb := aclUser(t, ctx, srv, "deaf", "resetchannels") // may not subscribe
	c := distlock.New(deafRdb)
	defer c.Close()
	rw, err := c.NewRWMutex("free-rw")
	if err != nil {
		t.Fatal(err)
	}
	sem, err := c.NewSemaphore("free-sem", 2)
	if err != nil {
		t.Fatal(err)
	}
	takes := []struct {
		name string
		take func() (*distlock.Lock, error)
	}{
		{"RLock", func() (*distlock.Lock, error) { return rw.RLock(ctx, distlock.WithFair()) }},
		{"Lock", func() (*distlock.Lock, error) { return rw.Lock(ctx, distlock.WithFair()) }},
		{"Acquire", func() (*distlock.Lock, error) { return sem.Acquire(ctx, distlock.WithFair()) }},
	}
	for _, x := range takes {
		for i := range 3 {
			start := time.Now()
			l, err := x.take()
			d := time.Since(start)
			if err != nil {
				t.Fatalf("%s: %v", x.name, err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if d > 300*time.Millisecond {
				t.Errorf("fair %s %d of a free lock, nobody in line, took %v", x.name, i, d)
			}
		}
	}
}

// aclUser makes a Redis user name on srv with every command and key and
// the extra rules, and returns a client of srv as that user, closed when
// the test ends.
func aclUser(t *testing.T, ctx context.Context, srv *redistest.Server, name string, rules ...string) *redis.Client {
	t.Helper()
	args := []any{"ACL", "SETUSER", name, "on", ">pw", "~*", "+@all"}
	for _, r := range rules {
		args = append(args, r)
	}
	if err := srv.Client(t).Do(ctx, args...).Err(); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: name, Password: "pw"})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}
