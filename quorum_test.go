package distlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/faultproxy"
	"github.com/distlock/distlock/internal/redistest"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// quorumSetup starts n independent servers and two quorum Clients on them
// (two processes' views), each made with opts.
func quorumSetup(t *testing.T, n int, opts ...distlock.ClientOption) ([]*redistest.Server, *distlock.Client, *distlock.Client) {
	t.Helper()
	servers := redistest.StartN(t, n)
	clients := func() *distlock.Client {
		nodes := make([]redis.UniversalClient, n)
		for i, s := range servers {
			nodes[i] = s.Client(t)
		}
		c := distlock.NewQuorum(nodes, opts...)
		t.Cleanup(func() { c.Close() })
		return c
	}
	return servers, clients(), clients()
}

func TestQuorumLockIsExclusive(t *testing.T) {
	servers, a, b := quorumSetup(t, 5)
	ctx := ctxT(t, 30*time.Second)
	servers[0].Kill()
	servers[3].Kill() // 3 of 5 still form a majority
	var inside, overlaps, grants atomic.Int32
	var wg sync.WaitGroup
	for i := range 6 {
		c := a
		if i%2 == 1 {
			c = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				l, err := c.Lock(ctx, "q")
				if err != nil {
					t.Error(err)
					return
				}
				if inside.Add(1) > 1 {
					overlaps.Add(1)
				}
				grants.Add(1)
				time.Sleep(time.Millisecond) // the critical section
				inside.Add(-1)
				if err := l.Release(ctx); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if overlaps.Load() != 0 || grants.Load() != 60 {
		t.Fatalf("%d grants, %d overlapping: want 60 and 0", grants.Load(), overlaps.Load())
	}
}

func TestQuorumLostMajorityFailsWithinDeadline(t *testing.T) {
	servers, a, _ := quorumSetup(t, 5)
	for _, s := range servers[:3] {
		s.Kill()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := a.Lock(ctx, "q")
	if d := time.Since(start); d > 500*time.Millisecond+deadlineSlack {
		t.Fatalf("Lock returned after %v with a 500ms deadline", d)
	}
	var qe *distlock.QuorumError
	if !errors.As(err, &qe) || !errors.Is(err, distlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want a QuorumError matching ErrNotObtained and DeadlineExceeded", err)
	}
	t.Logf("error: %v", err)
	// The failed attempt's grants are given back in the background.
	for _, s := range servers[3:] {
		waitFor(t, 2*time.Second, "the failed attempt's grant on live node "+s.Addr+" to be given back", func() bool {
			return s.Client(t).Exists(context.Background(), "distlock:{q}").Val() == 0
		})
	}
}

// A node restarted empty grants the lock again, but a majority still refuses
// while the holder's validity lasts; this is why the Redlock "delayed
// restart" rule asks restarted nodes to stay down for the longest TTL: with
// a majority restarted early, a second holder would get in.
func TestQuorumRestartedNodesMinority(t *testing.T) {
	servers, a, b := quorumSetup(t, 5)
	ctx := ctxT(t, 10*time.Second)
	held, err := a.TryLock(ctx, "q", distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	servers[0].Restart(t)
	servers[1].Restart(t)
	if _, err := b.TryLock(ctx, "q"); !errors.Is(err, distlock.ErrNotObtained) {
		t.Fatalf("second holder got in with 2 of 5 nodes restarted: %v", err)
	}
	if d, err := held.TTL(ctx); err != nil || d < 50*time.Second {
		t.Fatalf("holder's lease: %v, %v", d, err)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestQuorumFencesIncreaseWithNodesDown(t *testing.T) {
	servers, a, b := quorumSetup(t, 5)
	// A hang guard, not a timing assertion: Lock and Release return once a
	// majority answered. (Were a Release to wait out its 100 ms decision
	// wait for each stopped node, this run would take most of a minute.)
	ctx := ctxT(t, time.Minute)
	rng := rand.New(rand.NewPCG(1, 2))
	var stopped []*redistest.Server
	resume := func() {
		for _, s := range stopped {
			s.Signal(syscall.SIGCONT)
		}
		stopped = nil
	}
	defer resume()
	last := int64(0)
	for i := range 1000 {
		if i%50 == 0 { // a new random minority of nodes goes down
			resume()
			for _, j := range rng.Perm(5)[:rng.IntN(3)] {
				servers[j].Signal(syscall.SIGSTOP)
				stopped = append(stopped, servers[j])
			}
		}
		c := a
		if i%2 == 1 {
			c = b
		}
		l, err := c.Lock(ctx, "fenced", distlock.WithTTL(time.Second), distlock.WithoutRenewal())
		if err != nil {
			t.Fatalf("grant %d: %v", i, err)
		}
		if l.Fence() <= last {
			t.Fatalf("grant %d: fence %d after %d", i, l.Fence(), last)
		}
		last = l.Fence()
		if err := l.Release(ctx); err != nil {
			t.Fatalf("release %d: %v", i, err)
		}
	}
	t.Logf("1000 grants, last fence %d", last)
}

func TestQuorumRenewalAndLoss(t *testing.T) {
	servers, a, b := quorumSetup(t, 3)
	ctx := ctxT(t, 10*time.Second)
	l, err := a.TryLock(ctx, "renewed", distlock.WithTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	// Renewal carries the lock well past its TTL.
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		if _, err := b.TryLock(ctx, "renewed"); !errors.Is(err, distlock.ErrNotObtained) {
			t.Fatalf("second holder got in during renewal: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // the holder's work
	}
	servers[0].Kill()
	servers[1].Kill()
	select {
	case <-l.Lost():
		t.Logf("loss cause: %v", l.Err())
	case <-ctx.Done():
		t.Fatal("Lost did not fire after the majority died")
	}
}

func TestQuorumReentrantAndBadOptions(t *testing.T) {
	_, a, _ := quorumSetup(t, 3)
	ctx := ctxT(t, 5*time.Second)
	l1, err := a.TryLock(ctx, "re", distlock.WithOwner("job-7"))
	if err != nil {
		t.Fatal(err)
	}
	l2, err := a.TryLock(ctx, "re", distlock.WithOwner("job-7"))
	if err != nil || l2.Fence() != l1.Fence() {
		t.Fatalf("reentrant quorum acquire: %v, fences %d/%d", err, l1.Fence(), l2.Fence())
	}
	l2.Release(ctx)
	if _, err := a.TryLock(ctx, "re"); !errors.Is(err, distlock.ErrNotObtained) {
		t.Fatal("lock freed before its last hold was released")
	}
	l1.Release(ctx)
	if _, err := a.TryLock(ctx, "x", distlock.WithFair()); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Fatalf("fair on quorum: %v", err)
	}
	if _, err := distlock.NewQuorum(nil).TryLock(ctx, "x"); !errors.Is(err, distlock.ErrNilClient) {
		t.Fatalf("empty quorum: %v", err)
	}
}

// A node that grants after the quorum decided holds its own copy of the
// grant, drawn from its own counter: the acquire settles it on the grant's
// fence in the background, so that a later majority that includes it (a
// reentrant Lock answered by other nodes first) returns the grant's one
// fence.
func TestQuorumLateNodeGetsTheGrantsFence(t *testing.T) {
	servers := redistest.StartN(t, 3)
	slow := faultproxy.Start(t, servers[2].Addr)
	nodes := []redis.UniversalClient{servers[0].Client(t), servers[1].Client(t),
		redis.NewClient(&redis.Options{Addr: slow.Addr(), ContextTimeoutEnabled: true})}
	t.Cleanup(func() { nodes[2].Close() })
	c := distlock.NewQuorum(nodes)
	t.Cleanup(func() { c.Close() }) // after the node frozen below is continued
	ctx := ctxT(t, 20*time.Second)

	// The third node answers late, and its counter, started from its clock
	// at its first draw, is then ahead of the other two.
	slow.SetLatency(200 * time.Millisecond)
	l1, err := c.TryLock(ctx, "late", distlock.WithOwner("job"))
	if err != nil {
		t.Fatal(err)
	}
	third := servers[2].Client(t)
	fenceOn := func(rdb *redis.Client) int64 {
		v, err := rdb.Get(ctx, "distlock:{late}").Result()
		if errors.Is(err, redis.Nil) {
			return 0 // the late grant has not arrived yet
		} else if err != nil {
			t.Fatal(err)
		}
		f, _, _ := strings.Cut(v, " ")
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			t.Fatalf("value %q: %v", v, err)
		}
		return n
	}
	waitFor(t, 5*time.Second, "the late node settled on the grant's fence", func() bool {
		return fenceOn(third) == l1.Fence()
	})

	// Now the first node is the slow one: the reentry is answered by the
	// second and the third.
	slow.SetLatency(0)
	servers[0].Signal(syscall.SIGSTOP)
	t.Cleanup(func() { servers[0].Signal(syscall.SIGCONT) })
	l2, err := c.TryLock(ctx, "late", distlock.WithOwner("job"))
	if err != nil {
		t.Fatal(err)
	}
	if l2.Fence() != l1.Fence() {
		t.Fatalf("reentry answered by the other majority: fence %d, the grant's %d", l2.Fence(), l1.Fence())
	}
}

// A reentry that a node answers between granting the first hold late
// (after the quorum decided) and being settled on the grant's fence reports
// that node's own fence. The reentry waits for a majority that agrees on
// one fence, which is the grant's, and the settle still lands on the node
// although the reentry added a hold there.
func TestQuorumReentryBeforeTheLateNodeSettles(t *testing.T) {
	servers := redistest.StartN(t, 3)
	third := redis.NewClient(servers[2].Options())
	t.Cleanup(func() { third.Close() })
	nodes := []redis.UniversalClient{servers[0].Client(t), servers[1].Client(t), third}
	c := distlock.NewQuorum(nodes)
	t.Cleanup(func() { c.Close() }) // after the nodes stopped below are continued
	ctx := ctxT(t, 20*time.Second)
	warmConns(t, third, 3) // the calls to the stopped node must not wait to dial it

	// The third node is stopped: the first two grant, and its grant comes
	// after the decision, with a fence of its own.
	servers[2].Signal(syscall.SIGSTOP)
	t.Cleanup(func() { servers[2].Signal(syscall.SIGCONT) })
	l1, err := c.TryLock(ctx, "settle", distlock.WithOwner("job"))
	if err != nil {
		t.Fatal(err)
	}
	// Now the first node is stopped: the reentry reaches the third node
	// right behind the late grant, before its settle can.
	servers[0].Signal(syscall.SIGSTOP)
	t.Cleanup(func() { servers[0].Signal(syscall.SIGCONT) })
	type result struct {
		l   *distlock.Lock
		err error
	}
	done := make(chan result, 1)
	go func() {
		l, err := c.TryLock(ctx, "settle", distlock.WithOwner("job"))
		done <- result{l, err}
	}()
	waitFor(t, 5*time.Second, "both calls queued at the stopped node", func() bool {
		return queuedConns(t, servers[2].Port) >= 2
	})
	servers[2].Signal(syscall.SIGCONT)
	direct := servers[2].Client(t)
	waitFor(t, 5*time.Second, "the reentry answered by the third node", func() bool {
		v, _ := direct.Get(ctx, "distlock:{settle}").Result()
		return strings.Count(v, ",") == 1 // two holds
	})
	servers[0].Signal(syscall.SIGCONT)
	r := <-done
	if r.err != nil || r.l.Fence() != l1.Fence() {
		t.Fatalf("reentry: %v, fence %d, the grant's %d", r.err, r.l.Fence(), l1.Fence())
	}
	waitFor(t, 5*time.Second, "the third node settled on the grant's fence", func() bool {
		v, _ := direct.Get(ctx, "distlock:{settle}").Result()
		g, _, _ := strings.Cut(v, " ")
		return g == strconv.FormatInt(l1.Fence(), 10)
	})
	if err := r.l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l1.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// An owner's TryLock of a lock that a majority of nodes have free is a new
// grant, also while one node still has a copy of the owner's earlier hold,
// which was lost: its last renewals reached that node only, so that copy
// outlives the others. The attempt was taken for a reentry on which no
// majority of nodes reports one fence, and refused with ErrNotObtained each
// time (while a TryLock of another owner got the lock), every attempt
// lengthening the lost hold's copy to the attempt's TTL.
func TestQuorumOwnerTakesAgainAfterItsHoldWasLost(t *testing.T) {
	proxies, direct, a, b := proxiedQuorum(t, 3)
	ctx := ctxT(t, 30*time.Second)
	const ttl = 2 * time.Second
	const key = "distlock:{k}"
	exists := func(i int) bool { return direct[i].Exists(ctx, key).Val() == 1 }
	first, err := a.TryLock(ctx, "k", distlock.WithOwner("job"), distlock.WithTTL(ttl))
	must(t, err)
	for i := range direct {
		waitFor(t, 5*time.Second, fmt.Sprintf("node %d's copy", i), func() bool { return exists(i) })
	}
	// A lock taken while node 2 is unreachable moves the fence counters of
	// nodes 0 and 1 only: nodes 1 and 2 then draw different fences.
	proxies[2].Blackhole()
	other, err := a.TryLock(ctx, "other", distlock.WithTTL(time.Second), distlock.WithoutRenewal())
	must(t, err)
	must(t, other.Release(ctx))
	// With node 1 unreachable too, the renewals reach node 0 only.
	proxies[1].Blackhole()
	waitLost(t, first, 3*ttl)
	waitFor(t, 5*time.Second, "the copies on nodes 1 and 2 to run out", func() bool { return !exists(1) && !exists(2) })
	if !exists(0) {
		t.Fatal("node 0's copy ran out too early for the test")
	}
	for _, p := range proxies[1:] {
		p.Heal()
		p.ResetAll()
		p.SetLatency(20 * time.Millisecond) // node 0 answers first
	}
	l, err := b.TryLock(ctx, "k", distlock.WithOwner("job"), distlock.WithTTL(ttl))
	if err != nil {
		t.Fatalf("the owner's TryLock of a lock free on 2 of 3 nodes: %v", err)
	}
	if l.Fence() <= first.Fence() {
		t.Fatalf("fence %d after the lost hold's %d", l.Fence(), first.Fence())
	}
	// Node 0's copy, which the new grant joined, carries the grant's fence.
	waitFor(t, 5*time.Second, "node 0 settled on the grant's fence", func() bool {
		f, _, _ := strings.Cut(direct[0].Get(ctx, key).Val(), " ")
		return f == strconv.FormatInt(l.Fence(), 10)
	})
	must(t, l.Release(ctx))
}

// A Cluster client as a quorum node needs a key prefix with a hash tag: a
// node's one fence counter must be in the slot of every lock. Without one
// every script on the node failed with CROSSSLOT, an answer taken for a
// refusal: the quorum silently ran on the other nodes alone (here a
// majority of 2 of 3, which one more node down stops), and with a majority
// of such nodes TryLock said the lock was held and Lock waited until its
// ctx ended.
func TestQuorumClusterNodeNeedsATaggedPrefix(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	servers := redistest.StartN(t, 2)
	nodes := []redis.UniversalClient{cl.Client(t), servers[0].Client(t), servers[1].Client(t)}
	ctx := ctxT(t, 20*time.Second)
	for _, prefix := range []string{distlock.DefaultPrefix, "app{}:", "app{locks"} {
		c := distlock.NewQuorum(nodes, distlock.WithKeyPrefix(prefix))
		if _, err := c.TryLock(ctx, "k"); !errors.Is(err, distlock.ErrInvalidOption) {
			t.Errorf("prefix %q: TryLock with a Cluster node: %v, want ErrInvalidOption", prefix, err)
		}
		c.Close()
	}
	// With a tag, every node, the Cluster included, grants.
	c := distlock.NewQuorum(nodes, distlock.WithKeyPrefix("app{locks}:"))
	defer c.Close()
	l, err := c.TryLock(ctx, "k")
	must(t, err)
	waitFor(t, 5*time.Second, "the Cluster node's copy", func() bool {
		return nodes[0].Exists(ctx, "app{locks}:{k}").Val() == 1
	})
	must(t, l.Release(ctx))
}

// warmConns leaves n connections open in rdb's pool.
func warmConns(t *testing.T, rdb *redis.Client, n int) {
	t.Helper()
	conns := make([]*redis.Conn, n)
	for i := range conns {
		conns[i] = rdb.Conn()
		if err := conns[i].Ping(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for _, cn := range conns {
		cn.Close()
	}
	if idle := rdb.PoolStats().IdleConns; idle < uint32(n) {
		t.Fatalf("%d idle connections, want %d", idle, n)
	}
}

// queuedConns counts the connections to the local server on port whose
// requests wait unread (Linux: the receive queues in /proc/net/tcp).
func queuedConns(t *testing.T, port int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	local := fmt.Sprintf("0100007F:%04X", port)
	n := 0
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 5 || f[1] != local {
			continue
		}
		if _, rx, ok := strings.Cut(f[4], ":"); ok && strings.Trim(rx, "0") != "" {
			n++
		}
	}
	return n
}

// proxiedQuorum starts n servers behind fault proxies, and two quorum
// Clients (two processes' views) that reach them through the proxies,
// each with one lock taken and released so that their connections and
// script caches are warm. direct reaches each server past its proxy.
func proxiedQuorum(t *testing.T, n int) (proxies []*faultproxy.Proxy, direct []*redis.Client, a, b *distlock.Client) {
	t.Helper()
	servers := redistest.StartN(t, n)
	for _, s := range servers {
		proxies = append(proxies, faultproxy.Start(t, s.Addr))
		direct = append(direct, s.Client(t))
	}
	client := func() *distlock.Client {
		nodes := make([]redis.UniversalClient, n)
		for i, p := range proxies {
			rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
			t.Cleanup(func() { rdb.Close() })
			nodes[i] = rdb
		}
		c := distlock.NewQuorum(nodes)
		t.Cleanup(func() { c.Close() })
		ctx := ctxT(t, 5*time.Second)
		l, err := c.TryLock(ctx, "warm")
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		return c
	}
	return proxies, direct, client(), client()
}

// An acquire whose majority's counters differ lifts them in a second round
// trip, and the lease left is looked at again after it: a Lock whose
// validity ran out meanwhile is not returned.
func TestQuorumValidityAfterRaisingFences(t *testing.T) {
	proxies, direct, c, _ := proxiedQuorum(t, 3)
	ctx := ctxT(t, 10*time.Second)
	for _, p := range proxies {
		p.SetLatency(20 * time.Millisecond) // 40 ms round trips, under the 50 ms decision wait
	}
	// counters sets the nodes' fence counters step apart, above any fence
	// drawn yet: with a step, every majority's counters differ, as after a
	// node restarted empty, and the acquire lifts them in a second round trip.
	counters := func(step int64) {
		base := time.Now().UnixMicro() + 1_000_000_000
		for i, d := range direct {
			if err := d.Set(ctx, "distlock:fence", base+int64(i)*step, 0).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	const ttl = 70 * time.Millisecond // a validity of 67 ms: one round trip, not two
	counters(0)
	l, err := c.TryLock(ctx, "one-trip", distlock.WithTTL(ttl), distlock.WithoutRenewal())
	if err != nil {
		t.Fatalf("one round trip: %v", err)
	}
	_ = l.Release(ctx)
	counters(1000)
	start := time.Now()
	l, err = c.TryLock(ctx, "two-trips", distlock.WithTTL(ttl), distlock.WithoutRenewal())
	if err == nil {
		t.Fatalf("a Lock returned after %v with a validity of %v (fence %d)", time.Since(start), ttl-ttl/100-2*time.Millisecond, l.Fence())
	} else if !errors.Is(err, distlock.ErrNotObtained) {
		t.Fatal(err)
	}
}

// Release tells whether the Lock held the lock by what a majority of nodes
// says: a node that granted late keeps its copy of the lease longer than
// the others, and when the others' copies ran out and another Client took
// the lock, freeing that last copy does not make the Release a success.
func TestQuorumReleaseCountsAMajority(t *testing.T) {
	proxies, direct, a, b := proxiedQuorum(t, 3)
	ctx := ctxT(t, 20*time.Second)
	proxies[2].SetUpstreamLatency(800 * time.Millisecond) // node 2 gets the acquire late
	l, err := a.TryLock(ctx, "k", distlock.WithTTL(2*time.Second), distlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	exists := func(i int) bool { return direct[i].Exists(ctx, "distlock:{k}").Val() == 1 }
	waitFor(t, 5*time.Second, "node 2's late copy", func() bool { return exists(2) })
	proxies[2].SetUpstreamLatency(0)
	waitFor(t, 5*time.Second, "the majority's copies to run out", func() bool { return !exists(0) && !exists(1) })
	if _, err := b.TryLock(ctx, "k", distlock.WithTTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if !exists(2) {
		t.Fatal("node 2's copy ran out too early for the test")
	}
	if err := l.Release(ctx); !errors.Is(err, distlock.ErrNotHeld) {
		t.Fatalf("Release of a Lock that another Client holds on a majority: %v, want ErrNotHeld", err)
	}
	if exists(2) {
		t.Fatal("node 2's stale copy was not freed")
	}
}

// A node's grant that lands after its Lock was released is given back: it
// would otherwise keep that node's vote from every contender for its TTL.
func TestQuorumLateGrantAfterReleaseIsGivenBack(t *testing.T) {
	proxies, direct, c, _ := proxiedQuorum(t, 3)
	ctx := ctxT(t, 20*time.Second)
	counter := func() string { return direct[2].Get(ctx, "distlock:fence").Val() }
	before := counter()
	proxies[2].SetUpstreamLatency(500 * time.Millisecond) // the acquire reaches node 2 late
	l, err := c.TryLock(ctx, "k", distlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	proxies[2].SetUpstreamLatency(0) // the release, on another connection, overtakes it
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the late grant to reach node 2", func() bool { return counter() != before })
	waitFor(t, 3*time.Second, "node 2's late grant to be given back", func() bool {
		return direct[2].Exists(ctx, "distlock:{k}").Val() == 0
	})
}

// A quorum holder whose renewal finds another grant on a majority is told
// ErrTaken, as on a single node, not ErrExpired.
func TestQuorumRenewalFindingAnotherGrantReportsTaken(t *testing.T) {
	servers, a, b := quorumSetup(t, 3)
	ctx := ctxT(t, 10*time.Second)
	const ttl = 900 * time.Millisecond
	l, err := a.TryLock(ctx, "stolen", distlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	// Its keys vanish (an operator) and another takes it, both before the
	// holder's first renewal (ttl/3 after its grant).
	for _, s := range servers {
		if err := s.Client(t).Del(ctx, "distlock:{stolen}").Err(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.TryLock(ctx, "stolen"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Lost():
	case <-time.After(2 * ttl):
		t.Fatal("the holder was not told within 2×ttl that its lock was taken")
	}
	if !errors.Is(l.Err(), distlock.ErrTaken) {
		t.Fatalf("cause %v, want ErrTaken", l.Err())
	}
}

// What a quorum attempt's node calls do after the decision (give back a
// grant that came late) stays within Close's bound, a blackholed node
// included: the give-back runs within the node call's own bound.
func TestQuorumCloseCoversLateGiveBacks(t *testing.T) {
	proxies, direct, a, b := proxiedQuorum(t, 3)
	ctx := ctxT(t, 20*time.Second)
	if _, err := b.TryLock(ctx, "k", distlock.WithTTL(time.Minute), distlock.WithoutRenewal()); err != nil {
		t.Fatal(err)
	}
	for _, d := range direct {
		waitHolders(t, d, 1) // b's listeners run on
	}
	ignore := goleak.IgnoreCurrent()
	proxies[2].Blackhole()
	if _, err := a.TryLock(ctx, "k", distlock.WithTTL(10*time.Second)); !errors.Is(err, distlock.ErrNotObtained) {
		t.Fatalf("TryLock of a held lock: %v", err)
	}
	took, err := timedCall(6*time.Second, a.Close)
	if err != nil || took > 4*time.Second+500*time.Millisecond {
		t.Fatalf("Close: %v after %v, want nil within 4s", err, took.Round(time.Millisecond))
	}
	// (the proxy's own goroutines, for connections made meanwhile, are not the Client's)
	if err := goleak.Find(ignore, goleak.IgnoreAnyFunction("os/exec.(*Cmd).Wait"),
		goleak.IgnoreAnyFunction("github.com/distlock/distlock/internal/faultproxy.(*link).read"),
		goleak.IgnoreAnyFunction("github.com/distlock/distlock/internal/faultproxy.(*link).write")); err != nil {
		t.Fatalf("after Close: %v", err)
	}
}

// A quorum Client holding a renewed lock keeps the holders subscription on
// every node, and a node that restarts has its locks renewed at once (a
// renewal event, 10 s before the scheduled one), without losing them.
func TestQuorumHolderRenewsWhenANodeRestarts(t *testing.T) {
	rec := &recorder{}
	servers, a, _ := quorumSetup(t, 3, distlock.WithObserver(rec))
	ctx := ctxT(t, 30*time.Second)
	l, err := a.TryLock(ctx, "q-restart", distlock.WithTTL(30*time.Second))
	must(t, err)
	for _, s := range servers {
		waitHolders(t, s.Client(t), 1)
	}
	rec.mu.Lock()
	rec.events = nil
	rec.mu.Unlock()
	servers[1].Restart(t)
	waitFor(t, 5*time.Second, "a renewal after the node restart", func() bool {
		_, ok := rec.find(distlock.EventRenewal, nil)
		return ok
	})
	if err := l.Err(); err != nil {
		t.Fatalf("lost after one node of three restarted: %v", err)
	}
	must(t, l.Release(ctx))
}

// A quorum node that does not answer within the decision wait is a timeout
// in the QuorumError, but not context.DeadlineExceeded, which the error
// matches only when the caller's context ended: a TryLock without a
// deadline, two nodes of three frozen, matched it through the node errors.
func TestQuorumNodeTimeoutIsNotTheCallersDeadline(t *testing.T) {
	servers, a, _ := quorumSetup(t, 3)
	for _, s := range servers[:2] {
		s.Signal(syscall.SIGSTOP)
		t.Cleanup(func() { s.Signal(syscall.SIGCONT) })
	}
	_, err := a.TryLock(context.Background(), "q")
	var qe *distlock.QuorumError
	var timeout interface{ Timeout() bool }
	switch {
	case !errors.As(err, &qe) || !errors.Is(err, distlock.ErrNotObtained):
		t.Fatalf("got %v, want a QuorumError", err)
	case errors.Is(err, context.DeadlineExceeded):
		t.Fatalf("%v matches context.DeadlineExceeded, with no deadline on the call", err)
	case !errors.As(err, &timeout) || !timeout.Timeout():
		t.Fatalf("%v: no node error reports a timeout", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := a.Lock(ctx, "q"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock whose deadline passed: %v, want it to match context.DeadlineExceeded", err)
	}
}
