package distlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// exercise runs every primitive through a grant, a wait with handoff and a
// release on c, and checks that nothing is left in Redis afterwards but
// fence counters (keys counts the other keys there).
func exercise(t *testing.T, c, other *distlock.Client, rdb redis.UniversalClient, keys func() int) {
	t.Helper()
	ctx := ctxT(t, 20*time.Second)
	if n := keys(); n != 0 {
		t.Fatalf("%d keys before the primitives ran", n)
	}

	rw, err := c.NewRWMutex("doc")
	if err != nil {
		t.Fatal(err)
	}
	orw, _ := other.NewRWMutex("doc")
	r, err := rw.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w := make(chan error, 1)
	go func() {
		l, err := orw.Lock(ctx)
		if err == nil {
			err = l.Release(ctx)
		}
		w <- err
	}()
	waitFor(t, 2*time.Second, "the writer to line up", func() bool { return rdb.LLen(ctx, "distlock:rw{doc}:line").Val() == 1 })
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-w; err != nil {
		t.Fatalf("writer: %v", err)
	}

	sem, _ := c.NewSemaphore("pool", 1)
	osem, _ := other.NewSemaphore("pool", 1)
	p, err := sem.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		l, err := osem.Acquire(ctx)
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	waitFor(t, 2*time.Second, "the waiter to line up", func() bool { return rdb.LLen(ctx, "distlock:sem{pool}:line").Val() == 1 })
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("permit waiter: %v", err)
	}

	e, _ := c.NewElection("leader")
	lead, err := e.Campaign(ctx, "me")
	if err != nil {
		t.Fatal(err)
	}
	if l, err := e.Leader(ctx); err != nil || l.Value != "me" {
		t.Fatalf("Leader: %+v %v", l, err)
	}
	if err := lead.Resign(ctx); err != nil {
		t.Fatal(err)
	}

	m, err := c.LockAll(ctx, []string{"alpha", "beta", "gamma", "delta"})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// (waitFor: a waiter's line entry goes with its own last call)
	waitFor(t, 2*time.Second, "nothing left but fence counters", func() bool { return keys() == 0 })
}

// nonFenceKeys counts the keys on nodes that are not fence counters.
func nonFenceKeys(nodes ...*redis.Client) int {
	n := 0
	for _, rdb := range nodes {
		for _, k := range rdb.Keys(context.Background(), "*").Val() {
			if !strings.HasPrefix(k, distlock.DefaultPrefix+"fence") {
				n++
			}
		}
	}
	return n
}

func TestPrimitivesOnCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	c, other := clusterLocks(t, cl), clusterLocks(t, cl)
	var masters []*redis.Client
	for _, m := range cl.Masters(t) {
		masters = append(masters, m.Client(t))
	}
	exercise(t, c, other, cl.Client(t), func() int { return nonFenceKeys(masters...) })
}

func TestPrimitivesWithReplicaAck(t *testing.T) {
	rs := redistest.StartReplicaSet(t)
	c := newLocks(t, rs.Master, distlock.WithReplicaAck(1, time.Second))
	other := newLocks(t, rs.Master, distlock.WithReplicaAck(1, time.Second))
	rdb := rs.Admin(rs.Master)
	exercise(t, c, other, rdb, func() int { return nonFenceKeys(rdb) })
}

// A quorum Client refuses the primitives whose state lives on one node,
// and runs LockAll, which is made of ordinary locks.
func TestPrimitivesOnQuorum(t *testing.T) {
	_, c, _ := quorumSetup(t, 3)
	ctx := ctxT(t, 10*time.Second)
	if _, err := c.NewRWMutex("x"); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("NewRWMutex on a quorum: %v", err)
	}
	if _, err := c.NewSemaphore("x", 2); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("NewSemaphore on a quorum: %v", err)
	}
	if _, err := c.NewElection("x"); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("NewElection on a quorum: %v", err)
	}
	m, err := c.LockAll(ctx, []string{"b", "a"})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// Many distinct names of every primitive leave only the fence counter.
func TestPrimitivesLeaveNothingBehind(t *testing.T) {
	c, rdb, _ := setup(t)
	ctx := ctxT(t, 60*time.Second)
	for i := range 300 {
		name := fmt.Sprintf("n%d", i)
		rw, err := c.NewRWMutex(name)
		must(t, err)
		r, err := rw.RLock(ctx)
		must(t, err)
		must(t, r.Release(ctx))
		w, err := rw.Lock(ctx)
		must(t, err)
		must(t, w.Release(ctx))
		s, err := c.NewSemaphore(name, 3)
		must(t, err)
		p, err := s.Acquire(ctx)
		must(t, err)
		must(t, p.Release(ctx))
		e, err := c.NewElection(name)
		must(t, err)
		l, err := e.Campaign(ctx, "v")
		must(t, err)
		must(t, l.Resign(ctx))
	}
	if keys := rdb.Keys(ctx, "*").Val(); len(keys) != 1 {
		t.Fatalf("left in Redis: %.10v (%d keys)", keys, len(keys))
	}
}

// Campaign adds the value to the caller's options without writing into
// the caller's slice: campaigns sharing one options slice with spare
// capacity (a package-level default, say) raced on its backing array.
func TestCampaignLeavesCallersOptionsAlone(t *testing.T) {
	c, _, _ := setup(t)
	ctx := ctxT(t, 10*time.Second)
	opts := make([]distlock.Option, 1, 2)
	opts[0] = distlock.WithTTL(5 * time.Second)
	var wg sync.WaitGroup
	for _, name := range []string{"e1", "e2"} {
		e, err := c.NewElection(name)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := e.Campaign(ctx, name, opts...); err != nil {
				t.Errorf("Campaign %s: %v", name, err)
			}
		}()
	}
	wg.Wait()
	if spare := opts[:2][1]; spare != nil {
		t.Fatal("Campaign wrote its value option into the spare capacity of the caller's options slice")
	}
}

// Bad input to the primitives gets typed errors.
func TestPrimitivesBadInput(t *testing.T) {
	c, _, _ := setup(t)
	ctx := ctxT(t, 5*time.Second)
	if _, err := c.NewSemaphore("s", 0); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("limit 0: %v", err)
	}
	if _, err := c.NewRWMutex(""); !errors.Is(err, distlock.ErrInvalidKey) {
		t.Errorf("empty name: %v", err)
	}
	s, _ := c.NewSemaphore("s", 2)
	if _, err := s.Acquire(ctx, distlock.WithOwner("o")); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("WithOwner on a permit: %v", err)
	}
	// WithOwner would make a second hold under the same owner a second
	// leader of the same term (or an uncounted reader or permit).
	rw, _ := c.NewRWMutex("rw")
	e, _ := c.NewElection("e")
	for name, take := range map[string]func(distlock.Option) (*distlock.Lock, error){
		"RLock":      func(o distlock.Option) (*distlock.Lock, error) { return rw.RLock(ctx, o) },
		"Lock":       func(o distlock.Option) (*distlock.Lock, error) { return rw.Lock(ctx, o) },
		"TryAcquire": func(o distlock.Option) (*distlock.Lock, error) { return s.TryAcquire(ctx, o) },
		"Campaign": func(o distlock.Option) (*distlock.Lock, error) {
			l, err := e.Campaign(ctx, "v", o)
			if l == nil {
				return nil, err
			}
			return l.Lock, err
		},
	} {
		if _, err := take(distlock.WithOwner("x")); !errors.Is(err, distlock.ErrInvalidOption) {
			t.Errorf("WithOwner on %s: %v", name, err)
		}
	}
	if who, err := e.Leader(ctx); !errors.Is(err, distlock.ErrNoLeader) {
		t.Errorf("a refused campaign leads: %+v, %v", who, err)
	}
	p, _ := s.Acquire(ctx)
	defer p.Release(ctx)
	s3, _ := c.NewSemaphore("s", 3)
	if _, err := s3.TryAcquire(ctx); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("another limit while in use: %v", err)
	}

	// A nil context: ErrNilContext, nothing taken; Observe's channel is
	// closed at once instead of its goroutine panicking.
	var nilCtx context.Context
	for name, call := range map[string]func() error{
		"RLock":      func() error { _, err := rw.RLock(nilCtx); return err },
		"TryRLock":   func() error { _, err := rw.TryRLock(nilCtx); return err },
		"Lock":       func() error { _, err := rw.Lock(nilCtx); return err },
		"TryLock":    func() error { _, err := rw.TryLock(nilCtx); return err },
		"Acquire":    func() error { _, err := s.Acquire(nilCtx); return err },
		"TryAcquire": func() error { _, err := s.TryAcquire(nilCtx); return err },
		"Campaign":   func() error { _, err := e.Campaign(nilCtx, "v"); return err },
		"Leader":     func() error { _, err := e.Leader(nilCtx); return err },
	} {
		if err := unpanicked(call); !errors.Is(err, distlock.ErrNilContext) {
			t.Errorf("%s(nil ctx): %v, want ErrNilContext", name, err)
		}
	}
	select {
	case _, open := <-e.Observe(nilCtx):
		if open {
			t.Error("Observe(nil) sent a leader")
		}
	case <-time.After(5 * time.Second):
		t.Error("Observe(nil): channel not closed after 5s")
	}
	lead, err := e.Campaign(ctx, "v")
	if err != nil {
		t.Fatal(err)
	}
	if err := lead.Proclaim(nilCtx, "w"); !errors.Is(err, distlock.ErrNilContext) {
		t.Errorf("Proclaim(nil ctx): %v", err)
	}
	if err := lead.Resign(nilCtx); !errors.Is(err, distlock.ErrNilContext) {
		t.Errorf("Resign(nil ctx): %v", err)
	}
	if who, err := e.Leader(ctx); !errors.Is(err, distlock.ErrNoLeader) {
		t.Errorf("after Resign(nil ctx): %+v, %v; want no leader", who, err)
	}
	if infos, err := c.List(ctx, "*"); err != nil || len(infos) != 1 || infos[0].Key != "s" {
		t.Errorf("after calls with a nil ctx: %+v, %v; want s's one permit", infos, err)
	}

	var nilRDB *redis.Client
	if _, err := distlock.New(nilRDB).NewElection("e"); !errors.Is(err, distlock.ErrNilClient) {
		t.Errorf("nil client: %v", err)
	}
}

// List shows every kind of hold: locks, leaders, write and read holds,
// permits.
func TestListShowsEveryKind(t *testing.T) {
	c, _, _ := setup(t)
	ctx := ctxT(t, 10*time.Second)
	l, _ := c.Lock(ctx, "k:lock")
	defer l.Release(ctx)
	e, _ := c.NewElection("k:elect")
	lead, _ := e.Campaign(ctx, "me")
	defer lead.Resign(ctx)
	rw, _ := c.NewRWMutex("k:rw")
	r1, _ := rw.RLock(ctx)
	r2, _ := rw.RLock(ctx)
	defer r1.Release(ctx)
	defer r2.Release(ctx)
	wr, _ := c.NewRWMutex("k:w")
	w, _ := wr.Lock(ctx)
	defer w.Release(ctx)
	s, _ := c.NewSemaphore("k:sem", 3)
	p, _ := s.Acquire(ctx)
	defer p.Release(ctx)
	infos, err := c.List(ctx, "k:*")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, in := range infos {
		got = append(got, in.Key+"/"+in.Kind)
		if in.Fence == 0 || in.TTL <= 0 || (in.Kind == "permit" && in.Limit != 3) {
			t.Errorf("hold %+v", in)
		}
	}
	want := "k:elect/leader k:lock/lock k:rw/read k:rw/read k:sem/permit k:w/write"
	if strings.Join(got, " ") != want {
		t.Fatalf("List: %s, want %s", strings.Join(got, " "), want)
	}
}
