package distlock

// What a connection reset's retried command, and a Release racing the
// scheduler, could leave behind (found in review): a second line entry, a
// handed-over grant believed to hold its full TTL, a released lock kept in
// the renewer's schedule.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock/internal/faultproxy"
	"github.com/distlock/distlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// growthState is what a Client keeps for waiting: its notifier's
// channels (with and without waiters), its idle count, its held map, and
// the renewer's schedule.
type growthState struct {
	chans, empty, idle, held, scheduled, pending int
}

func growthSnapshot(c *Client) growthState {
	var st growthState
	c.mu.Lock()
	n, r := c.notifier, c.renewer
	c.mu.Unlock()
	if n != nil {
		n.mu.Lock()
		st.chans, st.idle, st.held = len(n.chans), n.idle, len(n.held)
		for _, s := range n.chans {
			if s.empty() {
				st.empty++
			}
		}
		n.mu.Unlock()
	}
	if r != nil {
		r.mu.Lock()
		st.scheduled, st.pending = r.scheduled, len(r.pending)
		r.mu.Unlock()
	}
	return st
}

// settleWithin polls cond until it holds or within passes; it
// reports whether it held.
func settleWithin(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond) // polling state nothing signals
	}
	return true
}

func lineEntriesOf(ctx context.Context, rdb *redis.Client, line, id string) int {
	n := 0
	for _, e := range rdb.LRange(ctx, line, 0, -1).Val() {
		if f := strings.Fields(e); len(f) > 1 && f[1] == id {
			n++
		}
	}
	return n
}

// TestRetriedJoinLeavesNoEntryBehind: design.md, Waiting: "a waiter
// that gives up, at its deadline or cancelled, removes its entry in the
// background, so that a line under a lock held for long holds only the
// waiters still waiting". A Lock call whose joining attempt (acquire.lua
// with again "0") loses its answer to a connection reset is sent again by
// go-redis (MaxRetries 3), and line_up RPUSHes its entry a second time; the
// call's leave (release.lua, LREM count 1) removes one copy only. The other
// stays for as long as the lock is held and anyone waits: it has no
// deadline and its Client still hears its channel, so clear_gone keeps it.
// Each such reset adds one more.
func TestRetriedJoinLeavesNoEntryBehind(t *testing.T) {
	const rounds = 3
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h := New(srv.Client(t))
	defer h.Close()
	held, err := h.TryLock(ctx, "k", WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx)
	line := held.names.line

	w, p := commandsProxiedClient(t, ctx, srv)
	// A first wait subscribes w to the lock's channel, so that the next
	// Lock call lines up in its first request.
	short, stop := context.WithTimeout(ctx, 300*time.Millisecond)
	if _, err := w.Lock(short, "k"); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("warm-up wait: %v", err)
	}
	stop()
	if !settleWithin(10*time.Second, func() bool { return lineEntriesOf(ctx, rdb, line, w.id) == 0 }) {
		t.Fatal("the warm-up waiter did not leave the line")
	}
	inbox := &waiter{channel: held.names.inbox(w.id)}
	for round := 1; round <= rounds; round++ {
		if !settleWithin(10*time.Second, func() bool { return w.existingNotifier().isLive(inbox) }) {
			t.Fatal("w's subscription did not come back")
		}
		// No deadline: the entry says "0", so only a handoff or the end
		// of the line removes it once its Client stops asking.
		wctx, wcancel := context.WithCancel(context.Background())
		got := make(chan error, 1)
		before := lineEntriesOf(ctx, rdb, line, w.id)
		// The join reaches Redis after 500 ms; its answer is lost at 750.
		p.SetLatency(500 * time.Millisecond)
		go func() {
			_, err := w.Lock(wctx, "k")
			got <- err
		}()
		time.Sleep(750 * time.Millisecond)
		p.ResetAll()
		// go-redis sends it again on a new connection (a dial, HELLO and
		// the script: 1.5 s at this latency); the call is then in line.
		settleWithin(10*time.Second, func() bool { return lineEntriesOf(ctx, rdb, line, w.id) >= before+2 })
		p.SetLatency(0)
		t.Logf("round %d: %d entries of the waiter's Client in line while it waits", round, lineEntriesOf(ctx, rdb, line, w.id))
		wcancel()
		select {
		case err := <-got:
			// (ErrNoAnswer if the answer of the attempt sent again had not
			// come by then)
			if !errors.Is(err, ErrNotObtained) && !errors.Is(err, ErrNoAnswer) {
				t.Fatalf("cancelled Lock: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the cancelled Lock did not return")
		}
		// Its leave runs in the background, at once.
		settleWithin(3*time.Second, func() bool { return lineEntriesOf(ctx, rdb, line, w.id) <= before })
	}
	// A live waiter keeps the line alive (it re-asks at least every
	// second) and clears any gone entry it finds ahead of it.
	x := New(srv.Client(t))
	defer x.Close()
	xctx, xstop := context.WithCancel(ctx)
	xdone := make(chan struct{})
	go func() {
		defer close(xdone)
		if l, err := x.Lock(xctx, "k"); err == nil {
			_ = l.Release(ctx)
		}
	}()
	defer func() { xstop(); <-xdone }()
	left := lineEntriesOf(ctx, rdb, line, w.id)
	if !settleWithin(6*time.Second, func() bool { left = lineEntriesOf(ctx, rdb, line, w.id); return left == 0 }) {
		t.Fatalf("%d Lock calls were cancelled (each one's joining request answered after a connection reset), and 6 s later, "+
			"with another waiter re-asking every second, %d of their entries are still in line %s (TTL %v, renewed by each re-ask): %q",
			rounds, left, line, rdb.PTTL(ctx, line).Val(), rdb.LRange(ctx, line, 0, -1).Val())
	}
}

// commandsProxiedClient returns a Client whose command connections go
// through a fault proxy on srv and whose pub/sub connection does not:
// resets then break only command connections, as when a load balancer or
// a NAT drops one TCP connection.
func commandsProxiedClient(t *testing.T, ctx context.Context, srv *redistest.Server) (*Client, *faultproxy.Proxy) {
	t.Helper()
	c, _, cmds := splitProxiedClient(t, ctx, srv)
	return c, cmds
}

// splitProxiedClient returns a Client whose pub/sub connection goes
// through one fault proxy on srv (sub) and its command connections through
// another (cmds), warmed up. The first connection the Client makes is its
// subscription's: Observe subscribes before it reads Redis.
func splitProxiedClient(t *testing.T, ctx context.Context, srv *redistest.Server) (c *Client, sub, cmds *faultproxy.Proxy) {
	t.Helper()
	sub, cmds = faultproxy.Start(t, srv.Addr), faultproxy.Start(t, srv.Addr)
	var dials atomic.Int64
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, // MaxRetries: go-redis' default, 3
		Dialer: func(dctx context.Context, network, addr string) (net.Conn, error) {
			addr = cmds.Addr()
			if dials.Add(1) == 1 {
				addr = sub.Addr()
			}
			var d net.Dialer
			return d.DialContext(dctx, network, addr)
		}})
	c = New(rdb)
	t.Cleanup(func() {
		c.Close()
		rdb.Close()
	})
	e, _ := c.NewElection("review-growth-warm")
	octx, ostop := context.WithCancel(ctx)
	defer ostop()
	select {
	case <-e.Observe(octx):
	case <-time.After(10 * time.Second):
		t.Fatal("Observe did not start")
	}
	if dials.Load() < 2 {
		t.Fatalf("%d connections made, want the subscription's and a command connection", dials.Load())
	}
	return c, sub, cmds
}

// TestLocksReleasedWhileRescheduledLeaveTheSchedule: renew.go's forget says a
// released lock leaves the schedule "when it next wakes, within
// pendingDrain", not at its renewal time "(up to 8 h) away: with long
// leases the schedule grew with every release"
// (TestScheduledLocksLeaveTheRenewerWhenReleased). Release calls forget
// only if l.scheduled is set; popDue clears it when it pops a due lock and
// sets it again when it puts the lock back, after the loop over every due
// lock. A Release in between is not forgotten, and the lock goes back in
// with its validity deadline as its next event: it stays in the schedule
// for most of its TTL. Many locks fall due together after a pub/sub
// reconnect (renewAll), here with releases going on.
func TestLocksReleasedWhileRescheduledLeaveTheSchedule(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	c := New(srv.Client(t))
	defer c.Close()
	h := New(srv.Client(t))
	defer h.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// One wait gives c its pub/sub subscription.
	if _, err := h.TryLock(ctx, "busy"); err != nil {
		t.Fatal(err)
	}
	short, stop := context.WithTimeout(ctx, 200*time.Millisecond)
	if _, err := c.Lock(short, "busy"); !errors.Is(err, ErrNotObtained) {
		t.Fatal(err)
	}
	stop()
	const n, rounds = 8000, 3
	for round := 1; round <= rounds; round++ {
		locks := make([]*Lock, n)
		for i := range locks {
			l, err := c.TryLock(ctx, fmt.Sprintf("r%d:%d", round, i), WithTTL(time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			locks[i] = l
		}
		if !settleWithin(10*time.Second, func() bool { return growthSnapshot(c).scheduled >= n }) {
			t.Fatalf("the locks were not scheduled: %+v", growthSnapshot(c))
		}
		var released sync.WaitGroup
		var count atomic.Int64
		for k := range 4 {
			released.Go(func() {
				for i := k; i < n; i += 4 {
					_ = locks[i].Release(ctx)
					count.Add(1)
				}
			})
		}
		settleWithin(10*time.Second, func() bool { return count.Load() >= n/10 })
		// The subscription breaks and comes back: every lock is renewed now.
		if err := rdb.ClientKillByFilter(ctx, "TYPE", "pubsub").Err(); err != nil {
			t.Fatal(err)
		}
		released.Wait()
	}
	var st growthState
	if !settleWithin(3*pendingDrain, func() bool { st = growthSnapshot(c); return st.scheduled == 0 }) {
		t.Fatalf("%d locks with a 1 h TTL were taken and released, %d at a time while a pub/sub reconnect renewed them all; "+
			"%v after the last Release the renewer still schedules %d of them (until their validity deadline, about an hour)",
			rounds*n, n, 3*pendingDrain, st.scheduled)
	}
}

// TestRetriedJoinHandedOverKeepsTheHandoffsLease: README, "Lost() is
// closed ... as soon as the lock is known lost — including when no renewal
// was confirmed before the lease could have run out in Redis, so before
// anyone else can take it"; design.md: a lock handed to a waiter "has a
// short first lease (the shorter of its TTL and 2 s)". A Lock call's
// joining attempt (acquire.lua, again "0") lines the call up; a release
// hands the lock to it (first lease 2 s); the join's answer is lost to a
// connection reset and go-redis sends it again, which finds the lock held
// by the call's own token and answers {1, fence, 1, 1}. single.ask takes
// that for the call's own grant (q.again is false), with the full TTL from
// the send time: the Lock believes it holds for 30 s while Redis frees the
// lock 2 s after the handoff, and another client takes it.
func TestRetriedJoinHandedOverKeepsTheHandoffsLease(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h := New(srv.Client(t))
	defer h.Close()
	x := New(srv.Client(t))
	defer x.Close()
	held, err := h.TryLock(ctx, "k", WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	line, lock := held.names.line, held.names.lock
	w, p := commandsProxiedClient(t, ctx, srv)
	short, stop := context.WithTimeout(ctx, 300*time.Millisecond)
	if _, err := w.Lock(short, "k"); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("warm-up wait: %v", err)
	}
	stop()
	inbox := &waiter{channel: held.names.inbox(w.id)}
	if !settleWithin(10*time.Second, func() bool {
		return w.existingNotifier().isLive(inbox) && rdb.LLen(ctx, line).Val() == 0
	}) {
		t.Fatal("w is not subscribed, or its warm-up entry is still in line")
	}
	p.SetLatency(200 * time.Millisecond)
	got := make(chan error, 1)
	var wl *Lock
	go func() {
		var err error
		wl, err = w.Lock(ctx, "k", WithTTL(30*time.Second))
		got <- err
	}()
	// The join lines the call up 500 ms after it was sent; its answer is
	// on its way back when the holder releases (handing the lock to the
	// call) and every connection of w is reset.
	if !settleWithin(5*time.Second, func() bool { return rdb.LLen(ctx, line).Val() == 1 }) {
		t.Fatal("w did not line up")
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	p.ResetAll()
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("Lock: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Lock did not return")
	}
	p.SetLatency(0)
	t.Logf("w's Lock returned: fence %d, Err %v, lease left in Redis %v", wl.Fence(), wl.Err(), rdb.PTTL(ctx, lock).Val())
	// Redis frees the handed-over lock when its 2 s first lease ends,
	// unless w renews it before.
	if !settleWithin(5*time.Second, func() bool { return rdb.Exists(ctx, lock).Val() == 0 }) {
		return // w made its lease longer in time (the call took the handoff for one, and confirmed it)
	}
	xl, err := x.TryLock(ctx, "k")
	if err != nil {
		t.Fatalf("another client could not take the lock: %v", err)
	}
	defer xl.Release(ctx)
	if wl.Err() == nil {
		select {
		case <-wl.Lost():
		default:
			t.Fatalf("w's Lock (fence %d) is still held by its own account (Err nil, Lost open, valid until %v from now) "+
				"while another client took the lock (fence %d): its 2 s handoff lease ran out in Redis",
				wl.Fence(), time.Until(wl.validUntil()).Round(time.Second), xl.Fence())
		}
	}
}
