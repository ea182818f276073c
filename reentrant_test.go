package distlock_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/redis/go-redis/v9"
)

// holdCount is the lock's hold count in Redis, 0 when the lock is free.
func holdCount(t *testing.T, rdb *redis.Client, key string) int {
	t.Helper()
	info, err := distlock.New(rdb).Inspect(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return int(info.Count)
}

func TestReentrantCountsHolds(t *testing.T) {
	c, rdb, srv := setup(t)
	ctx := ctxT(t, 15*time.Second)
	// Short enough that a waiter asks again within each window below, long
	// enough that a loaded machine renews in time (a stall past ttl×2/3
	// would lose the lock).
	const ttl = 600 * time.Millisecond
	var holds []*distlock.Lock
	for i := 1; i <= 3; i++ {
		l, err := c.TryLock(ctx, "job", distlock.WithOwner("job-7"), distlock.WithTTL(ttl))
		if err != nil {
			t.Fatalf("hold %d: %v", i, err)
		}
		if n := holdCount(t, rdb, "job"); n != i {
			t.Fatalf("after hold %d: count %d", i, n)
		}
		if len(holds) > 0 && l.Fence() != holds[0].Fence() {
			t.Fatalf("hold %d has fence %d, the first %d: reentry must keep the fence", i, l.Fence(), holds[0].Fence())
		}
		holds = append(holds, l)
	}
	// Not reentrant for anyone else: another owner, or no owner at all.
	if _, err := c.TryLock(ctx, "job", distlock.WithOwner("job-8")); !errors.Is(err, distlock.ErrNotObtained) {
		t.Fatalf("other owner: %v, want ErrNotObtained", err)
	}
	if _, err := c.TryLock(ctx, "job"); !errors.Is(err, distlock.ErrNotObtained) {
		t.Fatalf("no owner: %v, want ErrNotObtained", err)
	}

	other := distlock.New(srv.Client(t))
	t.Cleanup(func() { other.Close() })
	got := make(chan *distlock.Lock, 1)
	go func() {
		w, err := other.Lock(ctx, "job", distlock.WithTTL(ttl))
		if err != nil {
			t.Error(err)
		}
		got <- w
	}()

	for i := 3; i >= 2; i-- {
		if err := holds[i-1].Release(ctx); err != nil {
			t.Fatalf("release of hold %d: %v", i, err)
		}
		if n := holdCount(t, rdb, "job"); n != i-1 {
			t.Fatalf("after releasing hold %d: count %d, want %d", i, n, i-1)
		}
		if !errors.Is(holds[i-1].Err(), distlock.ErrReleased) {
			t.Fatalf("released hold's Err: %v", holds[i-1].Err())
		}
		// Longer than the renewal period and the waiter's longest poll
		// (capped at the holder's ttl): a waiter could take a free lock here.
		select {
		case <-got:
			t.Fatalf("the waiter got the lock with %d holds left", i-1)
		case <-time.After(2 * ttl):
		}
	}
	if holds[0].Err() != nil {
		t.Fatalf("the remaining hold lost its lock: %v", holds[0].Err())
	}
	released := time.Now()
	if err := holds[0].Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case w := <-got:
		if w == nil {
			t.FailNow()
		}
		t.Logf("waiter got the lock %v after the last release", time.Since(released).Round(time.Millisecond))
		if w.Fence() <= holds[0].Fence() {
			t.Fatalf("waiter's fence %d not above %d", w.Fence(), holds[0].Fence())
		}
		w.Release(ctx)
	case <-time.After(2 * ttl):
		t.Fatal("the waiter did not get the lock within 2×ttl of the last release")
	}
}

// TestOwnerSharedAcrossProcesses: a helper process holds a lock as owner
// "job-42"; this process takes it again under the same owner (a retried job
// on another machine), both hold it, and it is free only when both released.
func TestOwnerSharedAcrossProcesses(t *testing.T) {
	c, rdb, srv := setup(t)
	ctx := ctxT(t, 15*time.Second)
	helper := startHelper(t, "reentrant", "DISTLOCK_ADDR="+srv.Addr,
		"DISTLOCK_KEY=batch", "DISTLOCK_OWNER=job-42", "DISTLOCK_TTL=500ms")
	fence, _ := strconv.ParseInt(helper.expect(t, "fence=", 5*time.Second), 10, 64)

	mine, err := c.TryLock(ctx, "batch", distlock.WithOwner("job-42"), distlock.WithTTL(500*time.Millisecond))
	if err != nil {
		t.Fatalf("second process, same owner: %v", err)
	}
	if mine.Fence() != fence {
		t.Fatalf("fence %d in this process, %d in the helper", mine.Fence(), fence)
	}
	if n := holdCount(t, rdb, "batch"); n != 2 {
		t.Fatalf("count %d with both processes holding, want 2", n)
	}
	if _, err := c.TryLock(ctx, "batch"); !errors.Is(err, distlock.ErrNotObtained) {
		t.Fatalf("stranger: %v, want ErrNotObtained", err)
	}
	if err := mine.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := holdCount(t, rdb, "batch"); n != 1 {
		t.Fatalf("count %d after this process released, want 1 (the helper's)", n)
	}
	if _, err := c.TryLock(ctx, "batch"); !errors.Is(err, distlock.ErrNotObtained) {
		t.Fatalf("stranger while the helper still holds: %v, want ErrNotObtained", err)
	}
	if _, err := io.WriteString(helper.stdin, "release\n"); err != nil {
		t.Fatal(err)
	}
	if r := helper.expect(t, "release=", 5*time.Second); r != "ok" {
		t.Fatalf("helper's release: %s", r)
	}
	helper.wait(t, 5*time.Second)
	if n := holdCount(t, rdb, "batch"); n != 0 {
		t.Fatalf("count %d after both released", n)
	}
	l, err := c.TryLock(ctx, "batch")
	if err != nil {
		t.Fatalf("stranger after both released: %v", err)
	}
	l.Release(ctx)
}

// helperReentrant takes DISTLOCK_KEY as DISTLOCK_OWNER, prints its fence and
// releases it when a line arrives on stdin.
func helperReentrant(c *distlock.Client) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := c.Lock(ctx, os.Getenv("DISTLOCK_KEY"), distlock.WithOwner(os.Getenv("DISTLOCK_OWNER")),
		distlock.WithTTL(envDuration("DISTLOCK_TTL", time.Second)))
	if err != nil {
		return err
	}
	fmt.Printf("fence=%d\n", l.Fence())
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return err
	}
	fmt.Printf("release=%s\n", errName(l.Release(ctx)))
	return nil
}

// The holds of a reentrant lock share one lease, and each hold's loss
// signal counts on the lease its own renewals set. A hold with a shorter
// TTL must not cut that lease short: its renewals used to set the key's
// expiry to its own TTL, so once it was released the key ran out long
// before the longer hold renewed, and a stranger took the lock while the
// longer hold, renewed and never told, still held it.
func TestReentrantShortHoldKeepsLongHoldsLease(t *testing.T) {
	rec := &recorder{}
	c, _, srv := setup(t, distlock.WithObserver(rec))
	ctx := ctxT(t, 20*time.Second)
	const long, short = 6 * time.Second, 300 * time.Millisecond
	a, err := c.TryLock(ctx, "shared-lease", distlock.WithOwner("job"), distlock.WithTTL(long))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release(ctx)
	b, err := c.TryLock(ctx, "shared-lease", distlock.WithOwner("job"), distlock.WithTTL(short))
	if err != nil {
		t.Fatal(err)
	}
	// b is renewed at short/3; a is not due before long/3.
	waitFor(t, long/3, "the short hold's first renewal", func() bool {
		_, ok := rec.find(distlock.EventRenewal, func(e distlock.Event) bool { return e.Failed == 0 })
		return ok
	})
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	released := time.Now()

	// Well past the short hold's lease, well before a's renewal is due.
	other := distlock.New(srv.Client(t))
	t.Cleanup(func() { other.Close() })
	sctx, cancel := context.WithTimeout(ctx, 3*short)
	defer cancel()
	if s, err := other.Lock(sctx, "shared-lease"); err == nil {
		s.Release(ctx)
		t.Fatalf("a stranger took the lock %v after the short hold's release, while the long hold (ttl %v) held it (its Err then: %v)",
			time.Since(released).Round(time.Millisecond), long, a.Err())
	} else if !errors.Is(err, distlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("stranger's Lock: %v, want ErrNotObtained and DeadlineExceeded", err)
	}
	if a.Err() != nil {
		t.Fatalf("the long hold lost its lock: %v", a.Err())
	}
	if left, err := a.TTL(ctx); err != nil || left <= short {
		t.Fatalf("the long hold's lease left: %v, %v; want more than the short hold's %v", left, err, short)
	}
}

// Release and Extend go by token, not by owner: a hold whose lease ran out
// cannot release or extend a later grant made to the same owner id.
func TestStaleHoldCannotReleaseLaterGrantOfSameOwner(t *testing.T) {
	c, rdb, _ := setup(t)
	ctx := ctxT(t, 10*time.Second)
	stale, err := c.TryLock(ctx, "retried", distlock.WithOwner("job"), distlock.WithTTL(100*time.Millisecond), distlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-stale.Lost():
	case <-time.After(time.Second):
		t.Fatal("a fixed 100ms lease was not declared lost within 1s")
	}
	if !errors.Is(stale.Err(), distlock.ErrExpired) {
		t.Fatalf("fixed lease's cause: %v, want ErrExpired", stale.Err())
	}
	// Lost fires a drift margin before the server lets the key go; a
	// reentry before then would join the stale grant, not make a new one.
	waitFor(t, time.Second, "the stale lease to run out in Redis", func() bool {
		return rdb.Exists(ctx, "distlock:{retried}").Val() == 0
	})
	later, err := c.TryLock(ctx, "retried", distlock.WithOwner("job"))
	if err != nil {
		t.Fatal(err)
	}
	if later.Fence() <= stale.Fence() {
		t.Fatalf("later grant's fence %d not above the stale one's %d", later.Fence(), stale.Fence())
	}
	if err := stale.Extend(ctx, time.Minute); !errors.Is(err, distlock.ErrNotHeld) {
		t.Fatalf("stale Extend: %v, want ErrNotHeld", err)
	}
	if err := stale.Release(ctx); !errors.Is(err, distlock.ErrNotHeld) {
		t.Fatalf("stale Release: %v, want ErrNotHeld", err)
	}
	if n := holdCount(t, rdb, "retried"); n != 1 || later.Err() != nil {
		t.Fatalf("after the stale calls: %d holds, later hold's Err %v; want 1 held", n, later.Err())
	}
	if d, err := later.TTL(ctx); err != nil || d < distlock.DefaultTTL/2 {
		t.Fatalf("later grant's lease after the stale Extend: %v, %v", d, err)
	}
	if err := later.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A waiter whose owner came to hold the lock while it waited takes it again
// on its next ask, and leaves the line then: its entry, left behind, would
// have been handed the lock at the next release, for nobody.
func TestReentryFromTheLineLeavesTheLine(t *testing.T) {
	c, rdb, _ := setup(t)
	ctx := ctxT(t, 10*time.Second)
	first, second := distlock.New(rdb), distlock.New(rdb)
	defer first.Close()
	defer second.Close()
	holder, err := c.TryLock(ctx, "owned")
	if err != nil {
		t.Fatal(err)
	}
	const line = "distlock:{owned}:line"
	a := acquireAsync(ctx, first, "owned", distlock.WithOwner("job"))
	waitFor(t, 2*time.Second, "the first waiter to line up", func() bool { return rdb.LLen(ctx, line).Val() == 1 })
	b := acquireAsync(ctx, second, "owned", distlock.WithOwner("job"))
	waitFor(t, 2*time.Second, "the second waiter to line up", func() bool { return rdb.LLen(ctx, line).Val() == 2 })
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	la := recv(t, a, 2*time.Second).l
	lb := recv(t, b, 3*time.Second).l // on its next ask, within a second
	if n := rdb.LLen(ctx, line).Val(); n != 0 {
		t.Fatalf("%d entries left in line after the owner's second hold", n)
	}
	for _, l := range []*distlock.Lock{lb, la} {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
