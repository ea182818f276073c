package distlock_test

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// frozenNodeQuorum is a quorum Client a over three servers, observed by obs,
// whose connection to node 2 is warm (one, idle). direct reaches node 2, and
// counter reads node 2's fence counter.
type frozenNodeQuorum struct {
	servers []*redistest.Server
	a       *distlock.Client
	obs     *queuedCounter
	direct  *redis.Client
}

// frozenLateTTL: decision wait 1 s, so a node call ends 3 s after it began
// (decision wait + cleanupTimeout).
const frozenLateTTL = time.Minute

func newFrozenNodeQuorum(t *testing.T, ctx context.Context) *frozenNodeQuorum {
	t.Helper()
	f := &frozenNodeQuorum{servers: redistest.StartN(t, 3), obs: &queuedCounter{}}
	nodes := make([]redis.UniversalClient, len(f.servers))
	var node2 *redis.Client
	for i, s := range f.servers {
		rdb := s.Client(t)
		nodes[i] = rdb
		node2 = rdb
	}
	f.a = distlock.NewQuorum(nodes, distlock.WithObserver(f.obs))
	t.Cleanup(func() { f.a.Close() })
	f.direct = f.servers[2].Client(t)
	// The scripts are loaded on every node (by another Client), and a has
	// one idle connection to node 2.
	w := localLineQuorum(t, f.servers)
	l, err := w.TryLock(ctx, "warm")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := node2.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if s := node2.PoolStats(); s.TotalConns != 1 || s.IdleConns != 1 {
		t.Fatalf("a's connections to node 2: %+v, want one, idle", *s)
	}
	return f
}

func (f *frozenNodeQuorum) counter(ctx context.Context) string {
	return f.direct.Get(ctx, "distlock:fence").Val()
}

// thawAndExpectGiveBack resumes node 2 once after has passed and a's call to
// it ended at its bound (a node error), waits for the node to run the try
// queued on it (its fence counter moves from before), and fails unless
// what that try granted key is given back within cleanupTimeout and a
// round trip.
func (f *frozenNodeQuorum) thawAndExpectGiveBack(t *testing.T, ctx context.Context, key, before string, errorsBefore int, after time.Time) {
	t.Helper()
	waitFor(t, 10*time.Second, "a's call to node 2 to end at its bound", func() bool {
		return f.obs.count(distlock.EventNodeError) > errorsBefore
	})
	time.Sleep(time.Until(after)) // the freeze lasts at least this long
	f.servers[2].Signal(syscall.SIGCONT)
	resumed := time.Now()
	waitFor(t, 5*time.Second, "the resumed node to run a's queued try", func() bool { return f.counter(ctx) != before })
	const within = 3 * time.Second
	name := "distlock:{" + key + "}"
	for f.direct.Exists(ctx, name).Val() == 1 {
		if time.Since(resumed) > within {
			t.Fatalf("%v after node 2 resumed, a's grant there is still held (%q, %v left of its %v lease): nobody gave it back",
				time.Since(resumed).Round(time.Millisecond), f.direct.Get(ctx, name).Val(), f.direct.PTTL(ctx, name).Val(), frozenLateTTL)
		}
		time.Sleep(5 * time.Millisecond) // polling Redis state
	}
}

// A node frozen (a stalled VM, a Redis busy with a slow command) past a
// failed attempt's node call's bound runs the attempt's queued try when it
// resumes, and grants it. The attempt failed, so the grant is nobody's and
// must be given back ("every grant of a failed attempt, including one that
// comes late, is given back"). The call ended at its own deadline, and its
// give-back ran under that same, expired, context: it never went out, and
// the grant kept the node's vote for its whole TTL.
func TestQuorumGrantAfterTheNodeCallsBoundIsGivenBack(t *testing.T) {
	ctx := ctxT(t, 40*time.Second)
	f := newFrozenNodeQuorum(t, ctx)
	// Another Client holds the lock on nodes 0 and 1; node 2 is free.
	b := localLineQuorum(t, f.servers)
	if _, err := b.TryLock(ctx, "k", distlock.WithTTL(frozenLateTTL), distlock.WithoutRenewal()); err != nil {
		t.Fatal(err)
	}
	if err := f.direct.Del(ctx, "distlock:{k}").Err(); err != nil {
		t.Fatal(err)
	}
	before, errorsBefore := f.counter(ctx), f.obs.count(distlock.EventNodeError)
	f.servers[2].Signal(syscall.SIGSTOP)
	defer f.servers[2].Signal(syscall.SIGCONT)
	if _, err := f.a.TryLock(ctx, "k", distlock.WithTTL(frozenLateTTL)); !errors.Is(err, distlock.ErrNotObtained) {
		t.Fatalf("TryLock of a lock held on 2 of 3 nodes: %v", err)
	}
	f.thawAndExpectGiveBack(t, ctx, "k", before, errorsBefore, time.Time{})
}

// The same after a Lock taken on the other two nodes was released: a grant
// that lands after its Lock's Release is given back (docs/deployments.md).
// The Release's own call to node 2 needs a new connection, whose handshake
// the frozen node does not answer within that call's bound either.
func TestQuorumGrantAfterReleaseAndTheNodeCallsBoundIsGivenBack(t *testing.T) {
	ctx := ctxT(t, 40*time.Second)
	f := newFrozenNodeQuorum(t, ctx)
	before, errorsBefore := f.counter(ctx), f.obs.count(distlock.EventNodeError)
	f.servers[2].Signal(syscall.SIGSTOP)
	defer f.servers[2].Signal(syscall.SIGCONT)
	l, err := f.a.TryLock(ctx, "k", distlock.WithTTL(frozenLateTTL))
	if err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Node 2 stays frozen past the Release's call too (decision wait + 2 s).
	f.thawAndExpectGiveBack(t, ctx, "k", before, errorsBefore, released.Add(3*time.Second+200*time.Millisecond))
}
