package distlock_test

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redistest"
)

// clusterLocks is a distlock Client on a cluster client seeded with every
// node, closed when the test ends.
func clusterLocks(t *testing.T, cl *redistest.Cluster) *distlock.Client {
	t.Helper()
	c := distlock.New(cl.Client(t))
	t.Cleanup(func() { c.Close() })
	return c
}

// namesOnDistinctMasters returns one lock name per master, each served by a
// different master.
func namesOnDistinctMasters(t *testing.T, cl *redistest.Cluster, prefix string) []string {
	t.Helper()
	masters := cl.Masters(t)
	seen := map[*redistest.Server]string{}
	for i := 0; len(seen) < len(masters) && i < 1000; i++ {
		name := fmt.Sprintf("%s-%d", prefix, i)
		m := cl.MasterOf(t, distlock.DefaultPrefix+"{"+name+"}")
		if _, ok := seen[m]; !ok {
			seen[m] = name
		}
	}
	if len(seen) < len(masters) {
		t.Fatalf("found names for only %d of %d masters", len(seen), len(masters))
	}
	names := make([]string, 0, len(seen))
	for _, n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func TestClusterLocksSpreadAcrossMasters(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	c := clusterLocks(t, cl)
	ctx := ctxT(t, 30*time.Second)
	const n = 300
	locks := make([]*distlock.Lock, n)
	for i := range locks {
		l, err := c.TryLock(ctx, fmt.Sprintf("job-%d", i), distlock.WithTTL(30*time.Second))
		if err != nil {
			t.Fatalf("TryLock job-%d: %v", i, err)
		}
		if l.Fence() < 1 {
			t.Fatalf("job-%d: fence %d, want ≥ 1", i, l.Fence())
		}
		locks[i] = l
	}

	// Where each key really is: scan every master.
	where := map[string]*redistest.Server{}
	perMaster := map[*redistest.Server]int{}
	for _, m := range cl.Masters(t) {
		keys, err := m.Client(t).Keys(ctx, distlock.DefaultPrefix+"*").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if prev, dup := where[k]; dup {
				t.Fatalf("%s on both %s and %s", k, prev.Addr, m.Addr)
			}
			where[k] = m
			if !strings.HasPrefix(k, distlock.DefaultPrefix+"fence:") {
				perMaster[m]++
			}
		}
	}
	counters := map[int]string{} // slot -> its fence counter
	for k := range where {
		if strings.HasPrefix(k, distlock.DefaultPrefix+"fence:") {
			counters[cl.Slot(t, k)] = k
		}
	}
	if len(where) != n+len(counters) || len(counters) > n {
		t.Fatalf("found %d keys on the masters with %d fence counters, want %d locks and a counter per slot used", len(where), len(counters), n)
	}
	var counts []string
	for _, m := range cl.Masters(t) {
		if perMaster[m] == 0 {
			t.Fatalf("master %s holds no lock: locks are not spread", m.Addr)
		}
		counts = append(counts, fmt.Sprintf("%s=%d", m.Addr, perMaster[m]))
	}
	t.Logf("%d locks per master: %s", n, strings.Join(counts, " "))

	for i, l := range locks {
		key := distlock.DefaultPrefix + "{" + l.Key() + "}"
		fence, ok := counters[cl.Slot(t, key)]
		if !ok || where[key] == nil || where[key] != where[fence] {
			t.Fatalf("job-%d: lock on %v, no fence counter of its slot on that node", i, where[key])
		}
	}

	for _, l := range locks {
		if err := l.Release(ctx); err != nil {
			t.Fatalf("release %s: %v", l.Key(), err)
		}
	}
	// Released everywhere; the counters stay so that fences never repeat.
	// (Not always the next fence: a node that loaded the release script
	// after a first fence lifted that slot's counter to its clock.)
	for i := range 30 {
		l, err := c.TryLock(ctx, fmt.Sprintf("job-%d", i))
		if err != nil {
			t.Fatalf("TryLock after release: %v", err)
		}
		if l.Fence() <= locks[i].Fence() {
			t.Fatalf("job-%d: second fence %d, first %d: want a larger one", i, l.Fence(), locks[i].Fence())
		}
	}
}

func TestClusterMutualExclusionAndFences(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	names := namesOnDistinctMasters(t, cl, "counter")
	// Two Clients on two cluster clients: two processes' worth of state.
	clients := []*distlock.Client{clusterLocks(t, cl), clusterLocks(t, cl)}
	rdb := cl.Client(t)
	ctx := ctxT(t, 60*time.Second)
	const workers, rounds = 4, 15

	type record struct {
		mu     sync.Mutex
		fences []int64
		inside atomic.Int32
		overl  atomic.Int32
	}
	recs := map[string]*record{}
	for _, name := range names {
		recs[name] = &record{}
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(names)*workers)
	for _, name := range names {
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, rec := clients[w%2], recs[name]
				counter := "count{" + name + "}" // same slot as the lock
				for range rounds {
					l, err := c.Lock(ctx, name)
					if err != nil {
						errs <- err
						return
					}
					if rec.inside.Add(1) != 1 {
						rec.overl.Add(1)
					}
					rec.mu.Lock()
					rec.fences = append(rec.fences, l.Fence())
					rec.mu.Unlock()
					v, _ := rdb.Get(ctx, counter).Int()
					time.Sleep(200 * time.Microsecond) // widen the read-modify-write window
					rdb.Set(ctx, counter, v+1, 0)
					rec.inside.Add(-1)
					if err := l.Release(ctx); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, name := range names {
		rec := recs[name]
		if o := rec.overl.Load(); o != 0 {
			t.Errorf("%s: %d overlapping holds", name, o)
		}
		if v, _ := rdb.Get(ctx, "count{"+name+"}").Int(); v != workers*rounds {
			t.Errorf("%s: counter %d, want %d", name, v, workers*rounds)
		}
		// Recorded under the lock, so in grant order.
		for i := 1; i < len(rec.fences); i++ {
			if rec.fences[i] <= rec.fences[i-1] {
				t.Fatalf("%s: fence %d after %d", name, rec.fences[i], rec.fences[i-1])
			}
		}
		t.Logf("%s on %s: %d grants, fences %d..%d", name,
			cl.MasterOf(t, distlock.DefaultPrefix+"{"+name+"}").Addr, len(rec.fences), rec.fences[0], rec.fences[len(rec.fences)-1])
	}
}

// TestClusterWaiterOnOtherNode: the waiter's client first talks to a master
// that does not serve the lock's slot; it still gets the lock promptly once
// the holder releases it.
func TestClusterWaiterOnOtherNode(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	const name = "wake"
	home := cl.MasterOf(t, distlock.DefaultPrefix+"{"+name+"}")
	var seed *redistest.Server
	for _, m := range cl.Masters(t) {
		if m != home {
			seed = m
			break
		}
	}
	holder := clusterLocks(t, cl)
	waiter := distlock.New(cl.ClientVia(t, seed))
	t.Cleanup(func() { waiter.Close() })
	ctx := ctxT(t, 30*time.Second)
	direct := home.Client(t)
	line := distlock.DefaultPrefix + "{" + name + "}:line"

	const rounds = 5
	var lat []time.Duration
	for i := range rounds {
		l, err := holder.TryLock(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		// The waiter reports once, after its Release: when its Lock
		// returned, and the first error. (Two channels, one for the grant
		// and one for the end, raced in the select below: a waiter done
		// with both before the test looked could be read as a nil error.)
		type outcome struct {
			at  time.Time
			err error
		}
		done := make(chan outcome, 1)
		go func() {
			wl, err := waiter.Lock(ctx, name)
			at := time.Now()
			if err != nil {
				done <- outcome{err: err}
				return
			}
			err = wl.Release(ctx)
			if wl.Fence() <= l.Fence() {
				err = fmt.Errorf("waiter fence %d not above holder fence %d", wl.Fence(), l.Fence())
			}
			done <- outcome{at, err}
		}()
		// The holder works until the waiter is in line, so that the grant
		// below is a wake-up, not a first try at a free lock.
		waitFor(t, 5*time.Second, "the waiter in line", func() bool { return direct.LLen(ctx, line).Val() == 1 })
		select {
		case o := <-done:
			t.Fatalf("round %d: waiter's Lock returned while the lock was held (err %v)", i, o.err)
		default:
		}
		released := time.Now()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case o := <-done:
			if o.err != nil {
				t.Fatalf("round %d: waiter: %v", i, o.err)
			}
			lat = append(lat, o.at.Sub(released))
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d: waiter did not get the lock within 5s of the release", i)
		}
	}
	sorted := slices.Clone(lat)
	slices.Sort(sorted)
	median := sorted[len(sorted)/2]
	t.Logf("waiter via %s, lock on %s: release→grant %v (median %v)", seed.Addr, home.Addr, lat, median)
	// The handoff reaches the waiter's Client, whose subscription sits on
	// the lock's master, as one pub/sub message. A waiter that missed it
	// would ask again a second later, so a median under a fifth of that
	// proves the wake-up is event-driven; the worst case allows one missed
	// event on a busy machine.
	if median >= time.Second/5 {
		t.Fatalf("median release→grant %v, want < 200ms (event-driven wake-up)", median)
	}
	if worst := sorted[len(sorted)-1]; worst >= 2*time.Second {
		t.Fatalf("worst release→grant %v, want < 2s", worst)
	}
}

// TestClusterSlotMigrationKeepsLock: a held lock's keys move with their slot
// (MIGRATE keeps the lease), so the lock stays held and exclusive, and the
// fence counter moves too, so fences keep increasing.
func TestClusterSlotMigrationKeepsLock(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	c, other := clusterLocks(t, cl), clusterLocks(t, cl)
	ctx := ctxT(t, 30*time.Second)
	const name = "migrating"
	hash := distlock.DefaultPrefix + "{" + name + "}"
	l, err := c.TryLock(ctx, name, distlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	from := cl.MasterOf(t, hash)
	to := otherMaster(t, cl, from)
	cl.MoveSlot(t, cl.Slot(t, hash), to)
	if cl.MasterOf(t, hash) != to {
		t.Fatalf("slot did not move to %s", to.Addr)
	}
	toRDB := to.Client(t)
	if n, _ := toRDB.Exists(ctx, hash).Result(); n != 1 {
		t.Fatalf("the lock is not on the new owner %s", to.Addr)
	}
	if n, _ := toRDB.Keys(ctx, distlock.DefaultPrefix+"fence:*").Result(); len(n) != 1 {
		t.Fatalf("the slot's fence counter did not move to %s: %v", to.Addr, n)
	}
	ttl, err := l.TTL(ctx)
	if err != nil || ttl <= 0 || ttl > 10*time.Second {
		t.Fatalf("TTL after migration: %v, %v", ttl, err)
	}
	if _, err := other.TryLock(ctx, name); !errors.Is(err, distlock.ErrNotObtained) {
		t.Fatalf("second owner after migration: got %v, want ErrNotObtained", err)
	}
	if err := l.Extend(ctx, 10*time.Second); err != nil {
		t.Fatalf("Extend after migration: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release after migration: %v", err)
	}
	next, err := other.TryLock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if next.Fence() <= l.Fence() {
		t.Fatalf("fence after migration %d, before %d", next.Fence(), l.Fence())
	}
	t.Logf("slot moved %s→%s; lock kept (ttl %v), fences %d then %d", from.Addr, to.Addr, ttl, l.Fence(), next.Fence())
}

// TestClusterFailoverKeepsReplicatedLock: a coordinated failover (CLUSTER
// FAILOVER, the replica catches up first) keeps a lock and its fence
// counter. An uncoordinated failover after a master crash has no such
// guarantee: see the "Choosing a deployment" README section.
func TestClusterFailoverKeepsReplicatedLock(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 1)
	c, other := clusterLocks(t, cl), clusterLocks(t, cl)
	ctx := ctxT(t, 30*time.Second)
	const name = "failing-over"
	hash := distlock.DefaultPrefix + "{" + name + "}"
	l, err := c.TryLock(ctx, name, distlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	old := cl.MasterOf(t, hash)
	start := time.Now()
	promoted := cl.Failover(t, old)
	t.Logf("failover %s→%s in %v", old.Addr, promoted.Addr, time.Since(start))
	if cl.MasterOf(t, hash) != promoted {
		t.Fatalf("slot not served by the promoted replica %s", promoted.Addr)
	}
	if _, err := other.TryLock(ctx, name); !errors.Is(err, distlock.ErrNotObtained) {
		t.Fatalf("second owner after failover: got %v, want ErrNotObtained", err)
	}
	if _, err := l.TTL(ctx); err != nil {
		t.Fatalf("TTL after failover: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release after failover: %v", err)
	}
	next, err := other.TryLock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if next.Fence() <= l.Fence() {
		t.Fatalf("fence after failover %d, before %d", next.Fence(), l.Fence())
	}
}

// TestClusterNoticesUseShardedPubSub: on a Cluster, a waiter subscribes to
// its shard channel for the lock on the master that owns the lock's slot,
// and handoffs are announced with SPUBLISH there, never broadcast with
// PUBLISH.
func TestClusterNoticesUseShardedPubSub(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	const name = "sharded"
	home := cl.MasterOf(t, distlock.DefaultPrefix+"{"+name+"}")
	holder, waiter := clusterLocks(t, cl), clusterLocks(t, cl)
	ctx := ctxT(t, 20*time.Second)
	for _, m := range cl.Masters(t) {
		m.Client(t).ConfigResetStat(ctx)
	}
	l, err := holder.TryLock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	got := acquireAsync(ctx, waiter, name)
	// Subscribed and in line: a release before the waiter lines up would
	// leave it a free lock to take, with nothing to publish.
	waitFor(t, 5*time.Second, "the waiter's shard subscription and line entry", func() bool {
		chs, _ := home.Client(t).Do(ctx, "PUBSUB", "SHARDCHANNELS", distlock.DefaultPrefix+"{"+name+"}:*").Slice()
		return len(chs) == 1 && home.Client(t).LLen(ctx, distlock.DefaultPrefix+"{"+name+"}:line").Val() == 1
	})
	released := time.Now()
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := recv(t, got, 5*time.Second)
	t.Logf("release → waiter on the shard channel holds: %v", r.at.Sub(released))
	r.l.Release(ctx)
	for _, m := range cl.Masters(t) {
		stats, _ := m.Client(t).Info(ctx, "commandstats").Result()
		if strings.Contains(stats, "cmdstat_publish:") {
			t.Fatalf("%s saw PUBLISH: release notices were broadcast", m.Addr)
		}
		if m == home && !strings.Contains(stats, "cmdstat_spublish:") {
			t.Fatalf("the lock's master %s saw no SPUBLISH", m.Addr)
		}
	}
}

// On a Cluster, a name beginning with '}' gives its keys an empty hash tag
// ("distlock:{}x}"), so Redis hashes each key whole and they land in
// different slots. Such names used to reach Redis: a TryLock of a free lock
// (grant and counter only) succeeded, and its Release failed with
// CROSSSLOT, leaving the lock held until its lease ran out; waiting and
// every other primitive failed with an untyped CROSSSLOT error. They are
// refused with ErrInvalidKey before anything is sent, while names with
// braces elsewhere lock, wait, hand over and release as any other.
func TestClusterNamesWithBraces(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	c, other := clusterLocks(t, cl), clusterLocks(t, cl)
	rdb := cl.Client(t)
	ctx := ctxT(t, 30*time.Second)
	for _, name := range []string{"}", "}x", "}{x}"} {
		calls := map[string]func() error{
			"TryLock":      func() error { _, err := c.TryLock(ctx, name); return err },
			"Lock":         func() error { _, err := c.Lock(ctx, name); return err },
			"NewMutex":     func() error { _, err := c.NewMutex(name); return err },
			"NewRWMutex":   func() error { _, err := c.NewRWMutex(name); return err },
			"NewSemaphore": func() error { _, err := c.NewSemaphore(name, 2); return err },
			"NewElection":  func() error { _, err := c.NewElection(name); return err },
			"LockAll":      func() error { _, err := c.LockAll(ctx, []string{"a", name}); return err },
			"TryLockAll":   func() error { _, err := c.TryLockAll(ctx, []string{"a", name}); return err },
			"Inspect":      func() error { _, err := c.Inspect(ctx, name); return err },
			"ForceRelease": func() error { _, err := c.ForceRelease(ctx, name, 0); return err },
		}
		for call, f := range calls {
			if err := f(); !errors.Is(err, distlock.ErrInvalidKey) {
				t.Errorf("%s(%q) on a Cluster: %v, want ErrInvalidKey", call, name, err)
			}
		}
	}
	keys := func() []string {
		var left []string
		for _, m := range cl.Masters(t) {
			for _, k := range m.Client(t).Keys(ctx, "*").Val() {
				if !strings.HasPrefix(k, "distlock:fence") {
					left = append(left, k)
				}
			}
		}
		return left
	}
	if left := keys(); len(left) != 0 {
		t.Fatalf("refused names left keys: %q", left)
	}
	for _, name := range []string{"a}b", "{x}", "x{", "{}", "a{b}c"} {
		l, err := c.Lock(ctx, name)
		if err != nil {
			t.Fatalf("Lock(%q): %v", name, err)
		}
		waiter := acquireAsync(ctx, other, name)
		waitFor(t, 5*time.Second, "the waiter to line up", func() bool {
			return rdb.LLen(ctx, "distlock:{"+name+"}:line").Val() == 1
		})
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release(%q): %v", name, err)
		}
		got := recv(t, waiter, 5*time.Second)
		if err := got.l.Release(ctx); err != nil {
			t.Fatalf("Release(%q) after the handoff: %v", name, err)
		}
	}
	waitFor(t, 2*time.Second, "nothing left but fence counters", func() bool { return len(keys()) == 0 })
}

// A key prefix whose braces would split a lock's keys across slots is
// refused on a Cluster with ErrInvalidOption, before anything is sent; one
// with a whole tag (every lock in its slot) or a lone '}' works.
func TestClusterKeyPrefixes(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	ctx := ctxT(t, 30*time.Second)
	for _, prefix := range []string{"app{", "a{b", "a{}", "a{}b{x}"} {
		c := distlock.New(cl.Client(t), distlock.WithKeyPrefix(prefix))
		t.Cleanup(func() { c.Close() })
		if _, err := c.TryLock(ctx, "k"); !errors.Is(err, distlock.ErrInvalidOption) {
			t.Errorf("prefix %q: TryLock: %v, want ErrInvalidOption", prefix, err)
		}
		if _, err := c.NewSemaphore("k", 2); !errors.Is(err, distlock.ErrInvalidOption) {
			t.Errorf("prefix %q: NewSemaphore: %v, want ErrInvalidOption", prefix, err)
		}
	}
	for _, prefix := range []string{"app{locks}:", "a}", "x{y}{z}"} {
		c := distlock.New(cl.Client(t), distlock.WithKeyPrefix(prefix))
		t.Cleanup(func() { c.Close() })
		other := distlock.New(cl.Client(t), distlock.WithKeyPrefix(prefix))
		t.Cleanup(func() { other.Close() })
		first, err := c.Lock(ctx, "k")
		if err != nil {
			t.Fatalf("prefix %q: Lock: %v", prefix, err)
		}
		waiter := acquireAsync(ctx, other, "k")
		waitFor(t, 5*time.Second, "the waiter to line up", func() bool {
			info, err := c.Inspect(ctx, "k")
			return err == nil && info.Queued == 1
		})
		if err := first.Release(ctx); err != nil {
			t.Fatalf("prefix %q: Release: %v", prefix, err)
		}
		got := recv(t, waiter, 5*time.Second)
		if got.l.Fence() <= first.Fence() {
			t.Fatalf("prefix %q: fences %d then %d", prefix, first.Fence(), got.l.Fence())
		}
		if err := got.l.Release(ctx); err != nil {
			t.Fatalf("prefix %q: Release after the handoff: %v", prefix, err)
		}
	}
}

// When a waiter's slot moves, its Client subscribes its channel again on
// the new owner (deployments.md), though its map of the Cluster still
// names the old one for a while: that node answered the new SSUBSCRIBE with
// MOVED, which passed for a broken connection, and the channel stayed off
// until the Client's channels were pruned, every handoff unheard.
func TestClusterSlotMigrationResubscribesOnTheNewOwner(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	holder, waiter := clusterLocks(t, cl), clusterLocks(t, cl)
	ctx := ctxT(t, 40*time.Second)
	const name = "mig-sub"
	hash := distlock.DefaultPrefix + "{" + name + "}"
	from := cl.MasterOf(t, hash)
	to := otherMaster(t, cl, from)
	l, err := holder.TryLock(ctx, name, distlock.WithTTL(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := acquireAsync(ctx, waiter, name)
	subscribed := func(s *redistest.Server) bool {
		chs, _ := s.Client(t).Do(ctx, "PUBSUB", "SHARDCHANNELS", hash+":*").Slice()
		return len(chs) == 1
	}
	waitFor(t, 5*time.Second, "the waiter to listen and line up", func() bool {
		return subscribed(from) && from.Client(t).LLen(ctx, hash+":line").Val() == 1
	})
	cl.MoveSlot(t, cl.Slot(t, hash), to)
	waitFor(t, 5*time.Second, "the waiter's channel on the slot's new owner", func() bool { return subscribed(to) })
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := recv(t, got, 5*time.Second)
	if err := r.l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// otherMaster is a master of cl other than from.
func otherMaster(t *testing.T, cl *redistest.Cluster, from *redistest.Server) *redistest.Server {
	t.Helper()
	for _, m := range cl.Masters(t) {
		if m != from {
			return m
		}
	}
	t.Fatal("no other master")
	return nil
}

// TestClusterDownRefusesEverySlot: while a failed master's slots are not
// served (here: no replica takes over), Redis's default
// cluster-require-full-coverage puts the whole Cluster in
// cluster_state:fail, and every master answers CLUSTERDOWN, for every
// slot: an acquire on a master that never failed is refused, and a lock
// held there is lost (ErrUnreachable) once its lease could have run out
// without a renewal. docs/deployments.md said that other slots were
// unaffected and that only the affected slots refused locks.
func TestClusterDownRefusesEverySlot(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	c := clusterLocks(t, cl)
	ctx := ctxT(t, 60*time.Second)
	names := namesOnDistinctMasters(t, cl, "down")
	victim := cl.MasterOf(t, distlock.DefaultPrefix+"{"+names[0]+"}")
	name := names[1]
	survivor := cl.MasterOf(t, distlock.DefaultPrefix+"{"+name+"}")
	free := ""
	for i := 0; free == ""; i++ {
		if n := fmt.Sprintf("free-%d", i); cl.MasterOf(t, distlock.DefaultPrefix+"{"+n+"}") == survivor {
			free = n
		}
	}
	const ttl = 2 * time.Second
	held, err := c.TryLock(ctx, name, distlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	victim.Kill()
	admin := failoverEdgeAdmin(t, survivor)
	waitFor(t, 30*time.Second, "the survivor to see the Cluster down", func() bool {
		return strings.Contains(admin.ClusterInfo(ctx).Val(), "cluster_state:fail")
	})
	if _, err := c.TryLock(ctx, free); err == nil || !strings.Contains(err.Error(), "CLUSTERDOWN") {
		t.Errorf("acquire on a master that never failed, Cluster down: %v, want CLUSTERDOWN", err)
	}
	select {
	case <-held.Lost():
		if !errors.Is(held.Err(), distlock.ErrUnreachable) {
			t.Errorf("lost with %v, want ErrUnreachable", held.Err())
		}
	case <-time.After(2 * ttl):
		t.Errorf("a lock whose renewals are all refused was not lost within %v: %v", 2*ttl, held.Err())
	}
}
