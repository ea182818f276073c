package distlock_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// failoverEdgeAdmin is a short-lived plain client for s.
func failoverEdgeAdmin(t *testing.T, s *redistest.Server) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, DialTimeout: time.Second, ReadTimeout: 2 * time.Second, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// failoverEdgeChannels counts the subscribers s has on name's classic
// pub/sub channels.
func failoverEdgeChannels(ctx context.Context, c *redis.Client, name string) int64 {
	chs, _ := c.PubSubChannels(ctx, distlock.DefaultPrefix+"{"+name+"}:*").Result()
	var total int64
	for _, ch := range chs {
		n, _ := c.PubSubNumSub(ctx, ch).Result()
		total += n[ch]
	}
	return total
}

// failoverEdgeShardSubs counts the subscribers c's server has on name's
// shard channels.
func failoverEdgeShardSubs(ctx context.Context, c *redis.Client, name string) int64 {
	chs, _ := c.Do(ctx, "PUBSUB", "SHARDCHANNELS", distlock.DefaultPrefix+"{"+name+"}:*").StringSlice()
	var total int64
	for _, ch := range chs {
		v, _ := c.Do(ctx, "PUBSUB", "SHARDNUMSUB", ch).Slice()
		if len(v) == 2 {
			n, _ := v[1].(int64)
			total += n
		}
	}
	return total
}

// failoverEdgeReplicated waits until master's replica has name's grant: a
// write on the same master after the grant, acknowledged by the replica
// (WAIT), follows it in the replication stream.
func failoverEdgeReplicated(t *testing.T, ctx context.Context, master *redis.Client, name string) {
	t.Helper()
	if err := master.Set(ctx, "{"+name+"}:sync", 1, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := master.Do(ctx, "WAIT", 1, 5000).Int(); err != nil || n != 1 {
		t.Fatalf("WAIT: %d replicas, %v", n, err)
	}
}

// failoverEdgeKillAndTakeOver kills master (SIGKILL) and has replica
// take over its slots at once (CLUSTER FAILOVER TAKEOVER, as an operator
// does rather than wait for the automatic failover), then waits until every
// live node reports cluster_state:ok and sees slot on replica.
func failoverEdgeKillAndTakeOver(t *testing.T, cl *redistest.Cluster, master, replica *redistest.Server, slot int) {
	t.Helper()
	master.Kill()
	failoverEdgeTakeOver(t, cl, replica, slot)
}

// failoverEdgeTakeOver is failoverEdgeKillAndTakeOver once the master is
// dead.
func failoverEdgeTakeOver(t *testing.T, cl *redistest.Cluster, replica *redistest.Server, slot int) {
	t.Helper()
	ctx := ctxT(t, 60*time.Second)
	if err := failoverEdgeAdmin(t, replica).Do(ctx, "CLUSTER", "FAILOVER", "TAKEOVER").Err(); err != nil {
		t.Fatalf("CLUSTER FAILOVER TAKEOVER: %v", err)
	}
	admins := map[*redistest.Server]*redis.Client{}
	for _, s := range cl.Nodes {
		if s.Alive() {
			admins[s] = failoverEdgeAdmin(t, s)
		}
	}
	waitFor(t, 30*time.Second, "every live node to see the slot on the promoted replica", func() bool {
		for _, c := range admins {
			info, _ := c.ClusterInfo(ctx).Result()
			slots, err := c.ClusterSlots(ctx).Result()
			if err != nil || !strings.Contains(info, "cluster_state:ok") {
				return false
			}
			found := false
			for _, r := range slots {
				if slot >= int(r.Start) && slot <= int(r.End) && len(r.Nodes) > 0 && r.Nodes[0].Addr == replica.Addr {
					found = true
				}
			}
			if !found {
				return false
			}
		}
		return true
	})
}

// failoverEdgeWaitOnce has waiter wait once for name, which holder holds,
// so that waiter's Client subscribes on the lock's master (master: a
// client of it).
func failoverEdgeWaitOnce(t *testing.T, ctx context.Context, holder, waiter *distlock.Client, master *redis.Client, name string) {
	t.Helper()
	l, err := holder.TryLock(ctx, name, distlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := acquireAsync(ctx, waiter, name)
	waitFor(t, 5*time.Second, "the waiter subscribed on the master and in line", func() bool {
		return failoverEdgeShardSubs(ctx, master, name) == 1 &&
			master.LLen(ctx, distlock.DefaultPrefix+"{"+name+"}:line").Val() == 1
	})
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, got, 5*time.Second).l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// failoverEdgeClusterClient is a distlock Client on its own cluster
// client, both closed when the test ends.
func failoverEdgeClusterClient(t *testing.T, cl *redistest.Cluster) (*distlock.Client, *redis.ClusterClient) {
	t.Helper()
	cc := cl.Client(t)
	c := distlock.New(cc)
	t.Cleanup(func() { c.Close() })
	return c, cc
}

// failoverEdgeSentinelWaiting has holder take name and waiter wait for it,
// subscribed on the master and in line, then fails the master over
// (SENTINEL FAILOVER). It returns the holder's Lock, the waiter's result
// and clients of the old master (now a replica) and of the new one.
func failoverEdgeSentinelWaiting(t *testing.T, ctx context.Context, s *redistest.Sentinel, holder, waiter *distlock.Client, name string) (*distlock.Lock, <-chan lockResult, *redis.Client, *redis.Client) {
	t.Helper()
	l, err := holder.TryLock(ctx, name, distlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := acquireAsync(ctx, waiter, name)
	oldAdmin := failoverEdgeAdmin(t, s.Master)
	waitFor(t, 5*time.Second, "the waiter subscribed and in line", func() bool {
		return failoverEdgeChannels(ctx, oldAdmin, name) == 1 &&
			oldAdmin.LLen(ctx, distlock.DefaultPrefix+"{"+name+"}:line").Val() == 1
	})
	return l, got, oldAdmin, failoverEdgeAdmin(t, s.Failover(t))
}

// TestFailoverSentinelWaiterTakesNoPhantomGrant: after a coordinated
// SENTINEL FAILOVER (nothing lost; the old master re-attached as a replica,
// as Sentinel itself does), a waiter's subscription stays on the old
// master, now a replica. The release on the new master hands the lock to
// the waiter: PUBLISH counts nobody there, so the script skips the waiter
// and frees the lock; but the replica receives the PUBLISH by replication,
// and the waiter's Client takes it for a grant. Its Lock returns while
// Redis holds the lock for nobody, and a third Client takes it: two
// holders.
func TestFailoverSentinelWaiterTakesNoPhantomGrant(t *testing.T) {
	s := redistest.StartSentinel(t)
	ctx := ctxT(t, 60*time.Second)
	newClient := func() *distlock.Client {
		c := distlock.New(s.FailoverClient(t))
		t.Cleanup(func() { c.Close() })
		return c
	}
	holder, waiter, third := newClient(), newClient(), newClient()
	const name = "review-failover-sentinel"
	l, got, oldAdmin, nmAdmin := failoverEdgeSentinelWaiting(t, ctx, s, holder, waiter, name)
	t.Logf("after SENTINEL FAILOVER %s→%s: the waiter's subscribers on the old master (now a replica) %d, on the new master %d",
		oldAdmin.Options().Addr, nmAdmin.Options().Addr, failoverEdgeChannels(ctx, oldAdmin, name), failoverEdgeChannels(ctx, nmAdmin, name))
	failoverEdgeNoPhantom(t, ctx, l, got, distlock.New(nmAdmin), third, name)
}

// TestFailoverClusterRejoinedMasterNoPhantomGrant: a Cluster master
// is killed and its replica takes over; the killed master is restarted and
// rejoins as a replica of the new one. The waiter's Client's shard
// subscription for the old master reconnects to that address and
// subscribes there again: on a replica, where SSUBSCRIBE is allowed. A
// release on the new master hands the lock to the waiter: SPUBLISH counts
// nobody on the master, the script skips the waiter and frees the lock,
// and the message, propagated to the shard's replica, reaches the waiter,
// whose Lock returns for a grant Redis never made: a third Client takes
// the lock too.
func TestFailoverClusterRejoinedMasterNoPhantomGrant(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 1)
	holder, hc := failoverEdgeClusterClient(t, cl)
	waiter, wc := failoverEdgeClusterClient(t, cl)
	third, _ := failoverEdgeClusterClient(t, cl)
	ctx := ctxT(t, 120*time.Second)
	const name = "review-failover-rejoin"
	hash := distlock.DefaultPrefix + "{" + name + "}"
	home := cl.MasterOf(t, hash)
	rep := cl.ReplicasOf(t, home)[0]
	homeAdmin, repAdmin := failoverEdgeAdmin(t, home), failoverEdgeAdmin(t, rep)
	failoverEdgeWaitOnce(t, ctx, holder, waiter, homeAdmin, name)

	failoverEdgeKillAndTakeOver(t, cl, home, rep, cl.Slot(t, hash))
	// go-redis refreshes its map of the Cluster on its own within 10 s;
	// done at once here, so that only distlock's behaviour is measured.
	hc.ReloadState(ctx)
	wc.ReloadState(ctx)
	home.Restart(t)
	waitFor(t, 30*time.Second, "the killed master to rejoin as a replica of the new one", func() bool {
		info, _ := homeAdmin.Info(ctx, "replication").Result()
		return strings.Contains(info, "role:slave") && strings.Contains(info, "master_link_status:up")
	})

	l, err := holder.TryLock(ctx, name, distlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := acquireAsync(ctx, waiter, name)
	waitFor(t, 10*time.Second, "the waiter in line on the new master and subscribed somewhere", func() bool {
		return repAdmin.LLen(ctx, hash+":line").Val() == 1 &&
			failoverEdgeShardSubs(ctx, homeAdmin, name)+failoverEdgeShardSubs(ctx, repAdmin, name) > 0
	})
	t.Logf("the waiter's shard subscribers: on the rejoined replica %s %d, on the new master %s %d",
		home.Addr, failoverEdgeShardSubs(ctx, homeAdmin, name), rep.Addr, failoverEdgeShardSubs(ctx, repAdmin, name))
	failoverEdgeNoPhantom(t, ctx, l, got, third, third, name)
}

// TestFailoverClusterKilledMasterKeepsReplicatedLock: a lock whose
// grant its master's replica already has, the master killed and the
// replica taking over within milliseconds. docs/deployments.md: Redis
// Cluster "Survives: loss of a master *only* for locks already
// replicated". The holder's Client keeps sending the renewals to the dead
// address: go-redis reloads its map of the Cluster on a MOVED (which a
// dead node never answers) or every ClusterStateReloadInterval (60 s by
// default), and distlock never asks it to, so the lock is declared lost at
// its validity deadline while the new master holds it.
func TestFailoverClusterKilledMasterKeepsReplicatedLock(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 1)
	holder, _ := failoverEdgeClusterClient(t, cl)
	ctx := ctxT(t, 90*time.Second)
	const name = "review-failover-renew"
	const ttl = 9 * time.Second
	hash := distlock.DefaultPrefix + "{" + name + "}"
	home := cl.MasterOf(t, hash)
	rep := cl.ReplicasOf(t, home)[0]
	homeAdmin, repAdmin := failoverEdgeAdmin(t, home), failoverEdgeAdmin(t, rep)
	l, err := holder.TryLock(ctx, name, distlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the replica to have the grant", func() bool {
		m, _ := homeAdmin.Info(ctx, "replication").Result()
		r, _ := repAdmin.Info(ctx, "replication").Result()
		off := func(info, field string) string {
			for _, line := range strings.Split(info, "\n") {
				if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
					return v
				}
			}
			return "?"
		}
		return off(m, "master_repl_offset") != "?" && off(m, "master_repl_offset") == off(r, "slave_repl_offset")
	})
	killed := time.Now()
	failoverEdgeKillAndTakeOver(t, cl, home, rep, cl.Slot(t, hash))
	t.Logf("the replica took over %v after the kill", time.Since(killed))
	pttl := func() time.Duration {
		ro := redis.NewClient(&redis.Options{Addr: rep.Addr, DialTimeout: time.Second, MaxRetries: -1})
		defer ro.Close()
		return ro.PTTL(ctx, hash).Val()
	}
	t.Logf("the new master has the lock, lease left %v", pttl())
	select {
	case <-l.Lost():
		t.Errorf("the replicated lock was lost %v after its master was killed (the replica took over at once; the new master's lease left: %v): %v",
			time.Since(killed), pttl(), l.Err())
	case <-time.After(2 * ttl):
		t.Logf("held %v after the kill; the new master's lease left: %v", 2*ttl, pttl())
	}
}

// failoverEdgeNoPhantom releases l, which the waiter behind got waits for,
// and checks that the Lock the waiter gets is the grant the master holds
// (as inspect, a Client on the master, sees it) and that third cannot take
// the lock alongside it.
func failoverEdgeNoPhantom(t *testing.T, ctx context.Context, l *distlock.Lock, got <-chan lockResult, inspect, third *distlock.Client, name string) {
	t.Helper()
	released := time.Now()
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := recv(t, got, 10*time.Second)
	t.Logf("waiter's Lock returned %v after the release (fence %d)", r.at.Sub(released), r.l.Fence())
	info, err := inspect.Inspect(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if info.Owner != r.l.Token() {
		t.Errorf("the waiter's Lock returned, but the new master holds the lock for %q (fence %d), not for the waiter's token %q",
			info.Owner, info.Fence, r.l.Token())
	}
	if l3, err := third.TryLock(ctx, name); err == nil {
		t.Errorf("a third Client took the lock (fence %d) while the waiter's Lock (fence %d) counts itself held (Err %v): two holders",
			l3.Fence(), r.l.Fence(), r.l.Err())
	} else if !errors.Is(err, distlock.ErrNotObtained) {
		t.Fatal(err)
	}
}

// TestFailoverClusterKilledMasterWaiterKeepsItsTurn: a Cluster master is
// killed and its replica takes over. The waiter's Client had the lock's
// shard channel subscribed on the dead master; a killed master ends no
// subscription, so the Client must move the channel to the new master on
// its own. Until it does, every handoff skips the waiter (nobody hears it
// there) and a fair waiter loses its turn to one that lined up after it.
func TestFailoverClusterKilledMasterWaiterKeepsItsTurn(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 1)
	holder, hc := failoverEdgeClusterClient(t, cl)
	first, fc := failoverEdgeClusterClient(t, cl)
	second, sc := failoverEdgeClusterClient(t, cl)
	ctx := ctxT(t, 120*time.Second)
	const name = "failover-killed-turn"
	hash := distlock.DefaultPrefix + "{" + name + "}"
	home := cl.MasterOf(t, hash)
	rep := cl.ReplicasOf(t, home)[0]
	homeAdmin, repAdmin := failoverEdgeAdmin(t, home), failoverEdgeAdmin(t, rep)
	failoverEdgeWaitOnce(t, ctx, holder, first, homeAdmin, name)

	failoverEdgeKillAndTakeOver(t, cl, home, rep, cl.Slot(t, hash))
	// go-redis refreshes its map of the Cluster on its own within a minute;
	// done at once here for the commands, so that only the subscription is
	// left to distlock.
	for _, c := range []*redis.ClusterClient{hc, fc, sc} {
		c.ReloadState(ctx)
	}
	l, err := holder.TryLock(ctx, name, distlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got1 := acquireAsync(ctx, first, name, distlock.WithFair())
	waitFor(t, 10*time.Second, "first in line on the new master, its channel subscribed there", func() bool {
		return repAdmin.LLen(ctx, hash+":line").Val() == 1 && failoverEdgeShardSubs(ctx, repAdmin, name) == 1
	})
	got2 := acquireAsync(ctx, second, name, distlock.WithFair())
	waitFor(t, 10*time.Second, "second in line behind first", func() bool {
		return repAdmin.LLen(ctx, hash+":line").Val() == 2
	})
	released := time.Now()
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got1:
		if r.err != nil {
			t.Fatal(r.err)
		}
		t.Logf("first got the lock %v after the release", r.at.Sub(released))
		if err := r.l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		recv(t, got2, 10*time.Second)
	case r := <-got2:
		t.Errorf("second, which lined up after first, got the lock first (%v after the release, err %v)", r.at.Sub(released), r.err)
	case <-time.After(10 * time.Second):
		t.Fatal("no waiter got the lock within 10s of its release")
	}
}

// TestFailoverSentinelWaiterFollowsTheMaster: after a coordinated
// SENTINEL FAILOVER the waiter's subscription stays on the old master, now
// a replica, where nobody publishes: the first handoff skips it, and its
// next ask finds itself gone from the line. Its Client then subscribes
// again, on the new master, and later handoffs reach it at once.
func TestFailoverSentinelWaiterFollowsTheMaster(t *testing.T) {
	s := redistest.StartSentinel(t)
	ctx := ctxT(t, 90*time.Second)
	rec := &recorder{}
	newClient := func(opts ...distlock.ClientOption) *distlock.Client {
		c := distlock.New(s.FailoverClient(t), opts...)
		t.Cleanup(func() { c.Close() })
		return c
	}
	holder, waiter := newClient(), newClient(distlock.WithObserver(rec))
	const name = "failover-sentinel-follow"
	l, got, _, nmAdmin := failoverEdgeSentinelWaiting(t, ctx, s, holder, waiter, name)
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := recv(t, got, 10*time.Second)
	waitFor(t, 10*time.Second, "the waiter's channel subscribed on the new master", func() bool {
		return failoverEdgeChannels(ctx, nmAdmin, name) == 1
	})
	if err := r.l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Now a handoff reaches the waiter by its notice, not by its once-a-
	// second ask: its Lock returns before the holder's ask would have.
	for i := 0; i < 3; i++ {
		l, err := holder.TryLock(ctx, name, distlock.WithTTL(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		got := acquireAsync(ctx, waiter, name)
		waitFor(t, 5*time.Second, "the waiter in line", func() bool {
			return nmAdmin.LLen(ctx, distlock.DefaultPrefix+"{"+name+"}:line").Val() == 1
		})
		released := time.Now()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		r := recv(t, got, 10*time.Second)
		// Unheard, the handoff would skip the waiter and free the lock, and
		// the waiter's next ask would take it free (HowAfterWait).
		e, ok := rec.find(distlock.EventAcquire, func(e distlock.Event) bool { return e.Fence == r.l.Fence() })
		if !ok || e.How != distlock.HowHandedOver {
			t.Errorf("acquisition %d after the failover (%v after the release) came %+v, not by a handoff", i, r.at.Sub(released), e)
		}
		if err := r.l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// failoverEdgeHang listens on addr, a dead node's, and accepts connections
// that it never answers: a host that hangs, or a paused process (the
// kernel still completes the handshake). Closed when the test ends.
func failoverEdgeHang(t *testing.T, addr string) {
	t.Helper()
	var ln net.Listener
	waitFor(t, 5*time.Second, "the dead node's port free", func() bool {
		var err error
		ln, err = net.Listen("tcp", addr)
		return err == nil
	})
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
}

// TestFailoverClusterHungMasterHoldsUpNoOtherShard: a Cluster master dies
// and its address hangs. Moving its shard's channels must not redial that
// address once per channel (SUNSUBSCRIBE on the dead subscription, each
// waiting for a dial or read timeout in the Client's one subscriber
// goroutine): a waiter on a healthy shard subscribed only after all of
// them (40 s with 6 channels), unheard meanwhile, its turn lost.
func TestFailoverClusterHungMasterHoldsUpNoOtherShard(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 1)
	holder, _ := failoverEdgeClusterClient(t, cl)
	waiter, wc := failoverEdgeClusterClient(t, cl)
	ctx := ctxT(t, 150*time.Second)
	const k = 6
	var names []string
	var home *redistest.Server
	var other string
	for i := 0; len(names) < k || other == ""; i++ {
		name := fmt.Sprintf("failover-hung-%d", i)
		switch m := cl.MasterOf(t, distlock.DefaultPrefix+"{"+name+"}"); {
		case home == nil || m == home && len(names) < k:
			home, names = m, append(names, name)
		case m != home && other == "":
			other = name
		}
	}
	rep := cl.ReplicasOf(t, home)[0]
	homeAdmin, repAdmin := failoverEdgeAdmin(t, home), failoverEdgeAdmin(t, rep)
	otherAdmin := failoverEdgeAdmin(t, cl.MasterOf(t, distlock.DefaultPrefix+"{"+other+"}"))
	for _, name := range names {
		failoverEdgeWaitOnce(t, ctx, holder, waiter, homeAdmin, name)
	}

	home.Kill()
	failoverEdgeHang(t, home.Addr)
	failoverEdgeTakeOver(t, cl, rep, cl.Slot(t, distlock.DefaultPrefix+"{"+names[0]+"}"))
	wc.ReloadState(ctx)
	tookOver := time.Now()
	moved := func() int {
		n := 0
		for _, name := range names {
			if failoverEdgeShardSubs(ctx, repAdmin, name) == 1 {
				n++
			}
		}
		return n
	}
	waitFor(t, 60*time.Second, "a first channel moved to the new master", func() bool { return moved() > 0 })

	l, err := holder.TryLock(ctx, other, distlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	asked := time.Now()
	got := acquireAsync(ctx, waiter, other)
	waitFor(t, 90*time.Second, "the healthy shard's waiter subscribed", func() bool {
		return failoverEdgeShardSubs(ctx, otherAdmin, other) == 1
	})
	healthy := time.Since(asked)
	waitFor(t, 90*time.Second, "every channel moved to the new master", func() bool { return moved() == k })
	all := time.Since(tookOver)
	t.Logf("a waiter on a healthy shard subscribed %v after it asked; the dead shard's %d channels moved within %v of the takeover", healthy, k, all)
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, got, 10*time.Second).l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if healthy > 4*time.Second {
		t.Errorf("after a hung master's failover, a waiter on a healthy shard waited %v for its subscription (want well under the dial timeouts of the dead shard's channels)", healthy)
	}
}

// clusterListeners counts the goroutines that read a subscription of a
// notifier (subscriber.listen).
func clusterListeners() int {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	return strings.Count(string(buf), "distlock.(*subscriber).listen.func")
}

// docs/deployments.md, Redis Cluster: "A master that was *killed* ends no
// subscription: when a shard subscription's connection fails, the Client
// reloads its map of the Cluster and moves that subscription's channels to
// their slots' new master, trying again on every failure of its redial ...
// until all have moved, then closes it in the background." And
// subscribe.go closeIfUnused: "one left on a node that is no longer a
// master (killed, or demoted) would redial it, or listen there, for as long
// as the Client lives".
//
// A master's shard subscription whose channels were all pruned (idle
// beyond maxIdleChannels) stays open with no channel: the prune path
// (applySharded with on=false) never calls closeIfUnused. When that master
// is then killed, rehomeAll finds no channel to move, so nothing ever
// closes the subscription: its listener redials the dead address (at most a
// second apart) for as long as the Client lives.
func TestClusterDeadMastersEmptySubscriptionIsClosed(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 1)
	ctx := ctxT(t, 3*time.Minute)
	const name = "dead-empty"
	m := cl.MasterOf(t, name)
	reps := cl.ReplicasOf(t, m)
	if len(reps) == 0 {
		t.Fatal("no replica")
	}
	slot := cl.Slot(t, name)

	// Seeds without the doomed master; count dials to its address.
	var seeds []string
	for _, s := range cl.Nodes {
		if s != m {
			seeds = append(seeds, s.Addr)
		}
	}
	var deadDials atomic.Int64
	cc := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: seeds, ContextTimeoutEnabled: true, DialTimeout: time.Second,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr == m.Addr {
				deadDials.Add(1)
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	})
	t.Cleanup(func() { _ = cc.Close() })
	c := distlock.New(cc)
	t.Cleanup(func() { c.Close() })
	holder := clusterLocks(t, cl)

	mAdmin := redis.NewClient(&redis.Options{Addr: m.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = mAdmin.Close() })
	failoverEdgeWaitOnce(t, ctx, holder, c, mAdmin, name)

	// 257 more idle channels, none on m: name's channel is the oldest
	// idle one and is pruned, leaving m's subscription without channels.
	var others []string
	for i := 0; len(others) < 257; i++ {
		n := fmt.Sprintf("pruned-%d", i)
		if cl.MasterOf(t, n) != m {
			others = append(others, n)
		}
	}
	for _, n := range others {
		if _, err := holder.TryLock(ctx, n, distlock.WithTTL(time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for _, n := range others {
		wg.Go(func() {
			wctx, cancel := context.WithTimeout(ctx, 4*time.Second)
			defer cancel()
			_, _ = c.Lock(wctx, n)
		})
	}
	wg.Wait()
	waitFor(t, 10*time.Second, "the pruned channel to leave m", func() bool {
		return failoverEdgeShardSubs(ctx, mAdmin, name) == 0
	})
	before := clusterListeners() // (3: one per master)

	failoverEdgeKillAndTakeOver(t, cl, m, reps[0], slot)
	// The listener fails and redials, at most a second apart, until its
	// subscription is closed: wait for 2 s without a dial of the dead
	// address.
	last, quietSince := deadDials.Load(), time.Now()
	for deadline := time.Now().Add(20 * time.Second); time.Since(quietSince) < 2*time.Second; time.Sleep(100 * time.Millisecond) { // polling a dial count
		if d := deadDials.Load(); d != last {
			last, quietSince = d, time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("the dead master's shard subscription (no channels on it) still redials its address 20 s after its slots were taken over "+
				"(%d dials; %d listener goroutines, %d with the master alive): want it closed, as a subscription whose channels have all moved is",
				last, clusterListeners(), before)
		}
	}
}

// TestFailoverClusterKilledMasterReleaseReachesNewMaster: a lock whose
// master was killed after its replica had the grant, the replica taking
// over; the holder then releases it. docs/deployments.md: "After a call
// fails at the network level the Client has go-redis reload its map of
// the Cluster". A Release did not: it went to the dead address only,
// failed (connection refused), and the new master kept the lock for
// nobody until its lease ran out, refusing everyone else.
func TestFailoverClusterKilledMasterReleaseReachesNewMaster(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 1)
	holder, _ := failoverEdgeClusterClient(t, cl)
	other, _ := failoverEdgeClusterClient(t, cl)
	ctx := ctxT(t, 90*time.Second)
	const name = "review-failover-release"
	hash := distlock.DefaultPrefix + "{" + name + "}"
	home := cl.MasterOf(t, hash)
	rep := cl.ReplicasOf(t, home)[0]
	homeAdmin, repAdmin := failoverEdgeAdmin(t, home), failoverEdgeAdmin(t, rep)
	l, err := holder.TryLock(ctx, name, distlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	failoverEdgeReplicated(t, ctx, homeAdmin, name)
	failoverEdgeKillAndTakeOver(t, cl, home, rep, cl.Slot(t, hash))
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	start := time.Now()
	if err := l.Release(rctx); err != nil {
		t.Errorf("Release after the failover (%v): %v", time.Since(start), err)
	}
	if n := repAdmin.Exists(ctx, hash).Val(); n != 0 {
		t.Errorf("the new master still holds the released lock")
	}
	if _, err := other.TryLock(ctx, name); err != nil {
		t.Errorf("the released lock after the failover: %v", err)
	}
}

// TestFailoverClusterKilledMasterExtendReachesNewMaster: a lock whose
// master was killed after its replica had the grant, the replica taking
// over; the holder then extends it. deployments.md: "After a call fails at
// the network level the Client has go-redis reload its map of the
// Cluster". Extend did not: it failed against the dead master until a
// renewal, which reloads the map, had failed too (6 s, three Extends).
func TestFailoverClusterKilledMasterExtendReachesNewMaster(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 1)
	holder, _ := failoverEdgeClusterClient(t, cl)
	ctx := ctxT(t, 90*time.Second)
	const name = "review-failover-extend"
	const ttl = time.Minute // its first renewal is 20 s away
	hash := distlock.DefaultPrefix + "{" + name + "}"
	home := cl.MasterOf(t, hash)
	rep := cl.ReplicasOf(t, home)[0]
	homeAdmin := failoverEdgeAdmin(t, home)
	l, err := holder.TryLock(ctx, name, distlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	failoverEdgeReplicated(t, ctx, homeAdmin, name)
	failoverEdgeKillAndTakeOver(t, cl, home, rep, cl.Slot(t, hash))
	start := time.Now()
	for i := 0; ; i++ {
		ectx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := l.Extend(ectx, ttl)
		cancel()
		if err == nil {
			t.Logf("Extend after the failover succeeded at try %d, %v", i+1, time.Since(start))
			return
		}
		if i > 0 {
			t.Fatalf("Extend %d after the failover (%v): %v, want the map reloaded after the first failed", i+1, time.Since(start), err)
		}
		time.Sleep(300 * time.Millisecond) // past reloadMap's 200 ms rate limit
	}
}

// TestFailoverClusterKilledMasterInspectReachesNewMaster: as
// TestFailoverClusterKilledMasterExtendReachesNewMaster, for Inspect and
// ForceRelease, which an operator retries: each kept failing against the
// dead master, their failures reloading nothing.
func TestFailoverClusterKilledMasterInspectReachesNewMaster(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 1)
	holder, _ := failoverEdgeClusterClient(t, cl)
	admin, _ := failoverEdgeClusterClient(t, cl)
	ctx := ctxT(t, 90*time.Second)
	const name = "review-failover-inspect"
	hash := distlock.DefaultPrefix + "{" + name + "}"
	home := cl.MasterOf(t, hash)
	rep := cl.ReplicasOf(t, home)[0]
	homeAdmin := failoverEdgeAdmin(t, home)
	l, err := holder.TryLock(ctx, name, distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Inspect(ctx, name); err != nil { // admin's map names home
		t.Fatal(err)
	}
	failoverEdgeReplicated(t, ctx, homeAdmin, name)
	failoverEdgeKillAndTakeOver(t, cl, home, rep, cl.Slot(t, hash))
	for _, call := range []struct {
		what string
		run  func(context.Context) error
	}{
		{"Inspect", func(ctx context.Context) error { _, err := admin.Inspect(ctx, name); return err }},
		{"ForceRelease", func(ctx context.Context) error { _, err := admin.ForceRelease(ctx, name, l.Fence()); return err }},
	} {
		for i := 0; ; i++ {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := call.run(cctx)
			cancel()
			if err == nil {
				break
			}
			if i > 0 {
				t.Fatalf("%s %d after the failover: %v, want the map reloaded after the first failed", call.what, i+1, err)
			}
			time.Sleep(300 * time.Millisecond) // past reloadMap's 200 ms rate limit
		}
	}
}
