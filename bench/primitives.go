package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distlock/distlock"
	"github.com/redis/go-redis/v9"
)

// The primitives scenarios (issue 13) compare distlock's read hold, permit
// and leadership with distlock's own mutex, in the same round. They are
// distlock-only: none of the peer libraries has a read-write lock, a
// semaphore or an election, so there is no peer row to put beside them.

// Row names (contender cfg) of the primitives scenarios.
const (
	primMutex  = "mutex"
	primRead   = "rlock"
	primPermit = "permit"
	primLeader = "election"
)

// semLimit is the permits of the semaphore in both scenarios: the issue's
// throughput target is for N=4, and the uncontended permit row uses the same
// semaphore so that its commands per operation are those of that semaphore.
const semLimit = 4

// primitiveContenders are the rows of the primitives scenarios, the mutex
// (the reference) first. Each opens a locker whose lock(key) takes one hold
// of the primitive named key.
func primitiveContenders() []contender {
	return []contender{
		{lib: "distlock", cfg: primMutex, desc: "Client.Lock + Lock.Release (the reference)", open: openDistlock(false)},
		{lib: "distlock", cfg: primRead, desc: "NewRWMutex(name).RLock + Lock.Release", open: openPrimitive(func(c *distlock.Client, name string) (holder, error) {
			rw, err := c.NewRWMutex(name)
			if err != nil {
				return nil, err
			}
			return func(ctx context.Context, o []distlock.Option) (func(context.Context) error, error) {
				l, err := rw.RLock(ctx, o...)
				if err != nil {
					return nil, err
				}
				return l.Release, nil
			}, nil
		})},
		{lib: "distlock", cfg: primPermit, desc: fmt.Sprintf("NewSemaphore(name, %d).Acquire + Lock.Release", semLimit), open: openPrimitive(func(c *distlock.Client, name string) (holder, error) {
			s, err := c.NewSemaphore(name, semLimit)
			if err != nil {
				return nil, err
			}
			return func(ctx context.Context, o []distlock.Option) (func(context.Context) error, error) {
				l, err := s.Acquire(ctx, o...)
				if err != nil {
					return nil, err
				}
				return l.Release, nil
			}, nil
		})},
		{lib: "distlock", cfg: primLeader, desc: "NewElection(name).Campaign + Leadership.Resign", open: openPrimitive(func(c *distlock.Client, name string) (holder, error) {
			e, err := c.NewElection(name)
			if err != nil {
				return nil, err
			}
			value := "bench-" + newToken()[:8]
			return func(ctx context.Context, o []distlock.Option) (func(context.Context) error, error) {
				l, err := e.Campaign(ctx, value, o...)
				if err != nil {
					return nil, err
				}
				return l.Resign, nil
			}, nil
		})},
	}
}

// selectedPrimitives: the rows -only selects ("distlock" selects all of
// them, "distlock/rlock" one), with the mutex always, as the baseline is in
// the other scenarios; none when -only names no distlock row.
func selectedPrimitives(cfg config) []contender {
	all := primitiveContenders()
	var cs []contender
	for _, c := range all {
		if len(cfg.only) == 0 || contains(cfg.only, c.lib) || contains(cfg.only, c.lib+"/"+c.cfg) {
			cs = append(cs, c)
		}
	}
	if len(cs) > 0 && cs[0].cfg != primMutex {
		cs = append([]contender{all[0]}, cs...)
	}
	return cs
}

// holder takes one hold of a primitive made for one name.
type holder func(ctx context.Context, opts []distlock.Option) (release func(context.Context) error, err error)

// primitiveLocker adapts a primitive to the locker interface, so that the
// uncontended machinery (slices, warm-up, CPU and command probes) runs it
// as it runs a mutex. The primitive for a name is made once and kept.
type primitiveLocker struct {
	rdb  *redis.Client
	c    *distlock.Client
	opts []distlock.Option
	make func(*distlock.Client, string) (holder, error)
	mu   sync.Mutex
	by   map[string]holder
}

func openPrimitive(mk func(*distlock.Client, string) (holder, error)) func([]string, time.Duration) (locker, error) {
	return func(addrs []string, ttl time.Duration) (locker, error) {
		rdb := goredisClient(addrs[0])
		return &primitiveLocker{rdb: rdb, c: distlock.New(rdb), opts: []distlock.Option{distlock.WithTTL(ttl)},
			make: mk, by: map[string]holder{}}, nil
	}
}

func (p *primitiveLocker) lock(ctx context.Context, key string) (func(context.Context) error, error) {
	p.mu.Lock()
	h, ok := p.by[key]
	if !ok {
		var err error
		if h, err = p.make(p.c, key); err != nil {
			p.mu.Unlock()
			return nil, err
		}
		p.by[key] = h
	}
	p.mu.Unlock()
	return h(ctx, p.opts)
}

func (p *primitiveLocker) close() {
	_ = p.c.Close()
	_ = p.rdb.Close()
}

// gauge counts the holders of one primitive in this process: more than
// limit at once is a broken primitive and fails the run. peak shows that the
// limit was reached (a semaphore whose permits never all filled measured
// something else than the target asks).
type gauge struct {
	limit      int32
	holders    atomic.Int32
	peak       atomic.Int32
	violations atomic.Int64
}

func (g *gauge) enter() {
	n := g.holders.Add(1)
	if n > g.limit {
		g.violations.Add(1)
	}
	for {
		p := g.peak.Load()
		if n <= p || g.peak.CompareAndSwap(p, n) {
			return
		}
	}
}

func (g *gauge) leave() { g.holders.Add(-1) }
