package distlock_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/redis/go-redis/v9"
)

// A handoff notice can reach its waiter late: the waiter's process paused
// (GC, a VM stall) with the notice in its socket, or the subscription's
// connection stalled in retransmits while the command connection did not.
// These tests hold a waiter's handoff notices back (noticeGate) until a
// chosen moment and check that a notice of a grant that has ended by then
// neither makes a Lock nor frees the waiter's later grant.

// noticeGate holds back, while closed, the data of a connection that
// carries a handoff notice ("g <fence> <token>" in a pub/sub message).
type noticeGate struct {
	mu   sync.Mutex
	shut chan struct{} // nil while open
	held chan struct{} // gets a value when a notice is held back
}

func newNoticeGate() *noticeGate { return &noticeGate{held: make(chan struct{}, 16)} }

func (g *noticeGate) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.shut == nil {
		g.shut = make(chan struct{})
	}
}

func (g *noticeGate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.shut != nil {
		close(g.shut)
		g.shut = nil
	}
}

func (g *noticeGate) closed() chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.shut
}

type gatedConn struct {
	net.Conn
	g *noticeGate
}

func (c gatedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && bytes.Contains(p[:n], []byte("message\r\n")) && bytes.Contains(p[:n], []byte("\r\ng ")) {
		if shut := c.g.closed(); shut != nil {
			c.g.held <- struct{}{}
			<-shut
		}
	}
	return n, err
}

// refusals signals every acquire script call answered {0, ...}: the
// lock was held by someone else.
type refusals chan time.Time

func (r refusals) DialHook(next redis.DialHook) redis.DialHook { return next }
func (r refusals) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (r refusals) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if c, ok := cmd.(*redis.Cmd); ok && err == nil {
			if res, ok := c.Val().([]any); ok && len(res) >= 2 && res[0] == int64(0) {
				select {
				case r <- time.Now():
				default:
				}
			}
		}
		return err
	}
}

// gatedClient is a Redis client whose handoff notices pass through g.
func gatedClient(t *testing.T, addr string, g *noticeGate) *redis.Client {
	var d net.Dialer
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return gatedConn{c, g}, nil
		}})
	t.Cleanup(func() {
		g.open()
		rdb.Close()
	})
	return rdb
}

// waitInLine starts take (a waiting acquire with a short lease) in the
// background and returns once the call is in line, its subscription
// confirmed.
func waitInLine(t *testing.T, rdb *redis.Client, line string, within time.Duration, take func(context.Context) (*distlock.Lock, error)) chan lockResult {
	t.Helper()
	got := make(chan lockResult, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), within)
		defer cancel()
		l, err := take(ctx)
		got <- lockResult{l, err, time.Now()}
	}()
	waitFor(t, 5*time.Second, "the waiter in line", func() bool {
		return rdb.LLen(context.Background(), line).Val() == 1
	})
	return got
}

// lateKind is one primitive's calls for the late-notice tests: a waiting
// acquire and a try on Client c, and the key of its line.
type lateKind struct {
	name string
	line string
	wait func(c *distlock.Client, ctx context.Context, ttl time.Duration) (*distlock.Lock, error)
	try  func(c *distlock.Client, ctx context.Context, ttl time.Duration) (*distlock.Lock, error)
}

var lateKinds = []lateKind{
	{"mutex", "distlock:{late}:line",
		func(c *distlock.Client, ctx context.Context, ttl time.Duration) (*distlock.Lock, error) {
			return c.Lock(ctx, "late", distlock.WithTTL(ttl))
		},
		func(c *distlock.Client, ctx context.Context, ttl time.Duration) (*distlock.Lock, error) {
			return c.TryLock(ctx, "late", distlock.WithTTL(ttl))
		}},
	{"semaphore", "distlock:sem{late}:line",
		func(c *distlock.Client, ctx context.Context, ttl time.Duration) (*distlock.Lock, error) {
			s, err := c.NewSemaphore("late", 1)
			if err != nil {
				return nil, err
			}
			return s.Acquire(ctx, distlock.WithTTL(ttl))
		},
		func(c *distlock.Client, ctx context.Context, ttl time.Duration) (*distlock.Lock, error) {
			s, err := c.NewSemaphore("late", 1)
			if err != nil {
				return nil, err
			}
			return s.TryAcquire(ctx, distlock.WithTTL(ttl))
		}},
	{"rwmutex", "distlock:rw{late}:line",
		func(c *distlock.Client, ctx context.Context, ttl time.Duration) (*distlock.Lock, error) {
			rw, err := c.NewRWMutex("late")
			if err != nil {
				return nil, err
			}
			return rw.Lock(ctx, distlock.WithTTL(ttl))
		},
		func(c *distlock.Client, ctx context.Context, ttl time.Duration) (*distlock.Lock, error) {
			rw, err := c.NewRWMutex("late")
			if err != nil {
				return nil, err
			}
			return rw.TryLock(ctx, distlock.WithTTL(ttl))
		}},
}

// A notice that comes after the waiter asked again and found another holder
// is of a grant that ended before that ask: it must not make a Lock.
func TestLateNoticeAfterAnotherHolderIsDropped(t *testing.T) {
	for _, k := range lateKinds {
		t.Run(k.name, func(t *testing.T) { testLateNoticeAfterAnotherHolder(t, k) })
	}
}

func testLateNoticeAfterAnotherHolder(t *testing.T, k lateKind) {
	c, rdb, srv := setup(t)
	ctx := ctxT(t, 30*time.Second)
	gate := newNoticeGate()
	wrdb := gatedClient(t, srv.Addr, gate)
	refused := make(refusals, 64)
	wrdb.AddHook(refused)
	w := distlock.New(wrdb)
	defer w.Close()
	other := distlock.New(rdb)
	defer other.Close()

	const ttl = 300 * time.Millisecond // the handed grant's first lease
	h, err := k.try(c, ctx, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	got := waitInLine(t, rdb, k.line, 4*time.Second, func(ctx context.Context) (*distlock.Lock, error) {
		return k.wait(w, ctx, ttl)
	})
	gate.close()
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-gate.held: // the handoff's notice, held back
	case <-time.After(5 * time.Second):
		t.Fatal("no handoff notice")
	}
	// The handed grant runs out unconfirmed; another Client takes the lock.
	var x *distlock.Lock
	waitFor(t, 5*time.Second, "another holder", func() bool {
		x, err = k.try(other, ctx, 10*time.Second)
		return err == nil
	})
	took := time.Now()
	defer x.Release(ctx)
	// The waiter asks again and is refused: then the notice comes.
	for refusedAfter := false; !refusedAfter; {
		select {
		case at := <-refused:
			refusedAfter = at.After(took)
		case <-time.After(3 * time.Second):
			t.Fatal("the waiter did not ask again")
		}
	}
	gate.open()
	select {
	case r := <-got:
		if r.err == nil {
			defer r.l.Release(ctx)
			t.Fatalf("the waiter got a Lock (fence %d) from the notice of a grant that had ended, while another holds the lock (fence %d)",
				r.l.Fence(), x.Fence())
		}
		if !errors.Is(r.err, distlock.ErrNotObtained) {
			t.Fatalf("Lock: %v, want ErrNotObtained", r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Lock did not return by its deadline")
	}
	if x.Err() != nil {
		t.Fatalf("the holder lost its lock: %v", x.Err())
	}
}

// A notice that comes after the waiter took the lock free (its handed
// grant had run out) must not free the grant the waiter holds now.
func TestLateNoticeAfterWinningFreeLeavesTheLockHeld(t *testing.T) {
	c, rdb, srv := setup(t)
	ctx := ctxT(t, 30*time.Second)
	gate := newNoticeGate()
	w := distlock.New(gatedClient(t, srv.Addr, gate))
	defer w.Close()

	const ttl = 300 * time.Millisecond // the handed grant's first lease
	h, err := c.TryLock(ctx, "late", distlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := waitInLine(t, rdb, "distlock:{late}:line", 10*time.Second, func(ctx context.Context) (*distlock.Lock, error) {
		return w.Lock(ctx, "late", distlock.WithTTL(ttl))
	})
	gate.close()
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-gate.held:
	case <-time.After(5 * time.Second):
		t.Fatal("no handoff notice")
	}
	// The handed grant runs out; the waiter's next ask takes the lock free.
	var l *distlock.Lock
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatal(r.err)
		}
		l = r.l
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not take the lock")
	}
	defer l.Release(ctx)
	fence := l.Fence()
	gate.open()
	// The notice, now delivered, is of the grant before: the lock stays
	// the waiter's. (Polled: nothing tells of a notice dropped.)
	until := time.Now().Add(ttl * 3)
	for time.Now().Before(until) {
		select {
		case <-l.Lost():
			t.Fatalf("the waiter lost its lock to the late notice: %v", l.Err())
		default:
		}
		if rdb.Exists(ctx, "distlock:{late}").Val() == 0 {
			t.Fatalf("the late notice freed the lock the waiter holds (fence %d)", fence)
		}
		time.Sleep(5 * time.Millisecond) // polling Redis state
	}
}
