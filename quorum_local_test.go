package distlock_test

// Quorum calls behind a waiter of their own Client, and after most nodes
// came back (found in review).

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// queuedCounter records the events of one Client.
type queuedCounter struct {
	mu     sync.Mutex
	events []distlock.Event
}

func (o *queuedCounter) Start(ctx context.Context, _ distlock.EventKind, _ string) context.Context {
	return ctx
}
func (o *queuedCounter) Link(context.Context) string { return "" }
func (o *queuedCounter) Observe(_ context.Context, e distlock.Event) {
	o.mu.Lock()
	o.events = append(o.events, e)
	o.mu.Unlock()
}

// count is how many events of kind k were seen.
func (o *queuedCounter) count(k distlock.EventKind) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, e := range o.events {
		if e.Kind == k {
			n++
		}
	}
	return n
}

// localLineQuorum is a quorum Client over servers, closed when the test
// ends.
func localLineQuorum(t *testing.T, servers []*redistest.Server, opts ...distlock.ClientOption) *distlock.Client {
	t.Helper()
	nodes := make([]redis.UniversalClient, len(servers))
	for i, s := range servers {
		nodes[i] = s.Client(t)
	}
	c := distlock.NewQuorum(nodes, opts...)
	t.Cleanup(func() { c.Close() })
	return c
}

// localQuorumWaiter starts c.Lock(key) in the background (a goroutine of
// the process that waits for the lock) and waits until it lined up. The
// returned func cancels it and waits for it to return.
func localQuorumWaiter(t *testing.T, c *distlock.Client, obs *queuedCounter, key string) (stop func()) {
	t.Helper()
	before := obs.count(distlock.EventQueued)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if l, err := c.Lock(ctx, key); err == nil {
			_ = l.Release(context.Background())
		}
	}()
	waitFor(t, 5*time.Second, "the background Lock to line up", func() bool {
		return obs.count(distlock.EventQueued) > before
	})
	return func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("the background Lock did not return after its cancel")
		}
	}
}

// TryLock "makes one attempt to take key. It returns ErrNotObtained at once
// if another owner holds it" (client.go). On a quorum Client, a TryLock
// made while another goroutine of the same Client waits for the key joins
// the process's local line instead, and waits like a Lock until its ctx
// ends (or, without a deadline, until the holder lets go).
func TestQuorumTryLockBehindLocalWaiterReturnsAtOnce(t *testing.T) {
	servers := redistest.StartN(t, 3)
	obs := &queuedCounter{}
	a := localLineQuorum(t, servers, distlock.WithObserver(obs))
	b := localLineQuorum(t, servers)
	ctx := ctxT(t, 60*time.Second)
	if _, err := b.TryLock(ctx, "k", distlock.WithTTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	stop := localQuorumWaiter(t, a, obs, "k")
	defer stop()

	const deadline = 5 * time.Second
	tctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	start := time.Now()
	l, err := a.TryLock(tctx, "k")
	took := time.Since(start)
	if l != nil {
		t.Fatalf("TryLock of a lock another Client holds returned a Lock (fence %d)", l.Fence())
	}
	if !errors.Is(err, distlock.ErrNotObtained) || took > time.Second {
		t.Fatalf("TryLock of a held lock while a Lock of the same Client waits for it: %v after %v, want ErrNotObtained at once (one attempt)",
			err, took.Round(time.Millisecond))
	}
}

// "WithOwner(id): the same owner takes the lock again, from this process or
// another" (README). On a quorum Client, the owner's reentrant Lock made
// while another goroutine of the same Client waits for the key lines up
// behind that waiter, which can never get the lock the owner holds: the
// reentry waits until its ctx ends (without a deadline: forever, a
// deadlock), where the same call from another Client returns at once.
func TestQuorumReentryBehindLocalWaiter(t *testing.T) {
	servers := redistest.StartN(t, 3)
	obs := &queuedCounter{}
	a := localLineQuorum(t, servers, distlock.WithObserver(obs))
	b := localLineQuorum(t, servers)
	ctx := ctxT(t, 60*time.Second)
	first, err := a.TryLock(ctx, "job", distlock.WithOwner("job-7"), distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer first.Release(ctx)
	// From another Client, the reentry is immediate.
	other, err := b.Lock(ctx, "job", distlock.WithOwner("job-7"))
	if err != nil {
		t.Fatalf("reentry from another Client: %v", err)
	}
	must(t, other.Release(ctx))

	stop := localQuorumWaiter(t, a, obs, "job") // another job waits for it in this process
	defer stop()

	const deadline = 5 * time.Second
	rctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	start := time.Now()
	again, err := a.Lock(rctx, "job", distlock.WithOwner("job-7"))
	took := time.Since(start)
	if err != nil {
		t.Fatalf("the owner's reentrant Lock while another goroutine of its Client waits: %v after %v (the same call from another Client returned at once)",
			err, took.Round(time.Millisecond))
	}
	defer again.Release(ctx)
	if again.Fence() != first.Fence() {
		t.Fatalf("reentry fence %d, the grant's %d", again.Fence(), first.Fence())
	}
}

// "A node that failed at the network level is not waited for until it
// answers again, so a dead node does not stretch every attempt to the
// timeout" (docs/deployments.md). When a majority of nodes failed (a
// rolling restart, a partition) and came back, the first TryLock after
// that decides as soon as the one node that never failed answers: the
// others, still marked suspect, count as refusals before they can answer,
// so a free lock on a healthy quorum is reported as ErrNotObtained ("held":
// the README's quickstart returns nil and skips the work).
func TestQuorumTryLockAfterMajorityCameBack(t *testing.T) {
	servers := redistest.StartN(t, 3)
	obs := &queuedCounter{}
	a := localLineQuorum(t, servers, distlock.WithObserver(obs))
	ctx := ctxT(t, 60*time.Second)
	l, err := a.TryLock(ctx, "warm")
	must(t, err)
	must(t, l.Release(ctx))

	servers[1].Kill()
	servers[2].Kill()
	if _, err := a.TryLock(ctx, "k", distlock.WithTTL(500*time.Millisecond)); err == nil {
		t.Fatal("TryLock with a majority down succeeded")
	}
	waitFor(t, 5*time.Second, "both dead nodes noted as failed", func() bool {
		return obs.count(distlock.EventNodeError) >= 2
	})
	// The outage: the nodes stay down for a while (the delayed-restart rule
	// asks for at least the longest TTL), past the 2.05 s that the failed
	// attempt's node calls (decision wait 50 ms + 2 s) keep trying them.
	time.Sleep(3 * time.Second)
	servers[1].Restart(t)
	servers[2].Restart(t)
	for i, s := range servers {
		if err := s.Client(t).Ping(ctx).Err(); err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
	}

	l, err = a.TryLock(ctx, "free")
	if err != nil {
		t.Fatalf("TryLock of a free lock with all 3 nodes up again: %v (ErrNotObtained: %v)", err, errors.Is(err, distlock.ErrNotObtained))
	}
	must(t, l.Release(ctx))
}
