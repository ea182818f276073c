package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// --- deadline churn ---
//
// Many processes, each with many goroutines, take locks on a few keys with
// short, random deadlines: the load of an API whose requests carry deadlines.
// It finds grants made to callers that already gave up (the key then stays
// blocked by nobody), errors that do not say the deadline passed, and calls
// that return long after their deadline.

type churnConfig struct {
	clients, goroutines, keys int
	minDeadline, maxDeadline  time.Duration
	dur                       time.Duration
	settle                    time.Duration // before counting the keys left behind
}

type churnRound struct {
	acquired   int64 // Lock calls that returned the lock before the end of the run
	dur        time.Duration
	overlaps   int64 // two holders of a key at once, or a lost counter update
	failed     int64 // Lock calls that failed after their ctx ended
	early      int64 // Lock calls that failed before their ctx ended
	contract   int64 // failures after the ctx ended that break the error contract
	releaseErr int64
	late       []time.Duration // failed calls: return time minus deadline
	keysTTL    int             // keys with a TTL left after the settle: leases or lines of nobody
	keysOther  int             // keys without a TTL (bookkeeping such as fence counters)
	use        usage
	examples   []string
}

// churnKey is one key's in-process state. count is incremented by a load and
// a store, not an atomic add, so two holders at once lose an update and the
// total no longer matches the number of acquisitions.
type churnKey struct {
	holders atomic.Int32
	count   atomic.Int64
}

// examples keeps the first few messages of each kind.
type examples struct {
	mu   sync.Mutex
	seen map[string]int
	list []string
}

func (e *examples) add(kind, msg string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.seen == nil {
		e.seen = map[string]int{}
	}
	if e.seen[kind] < 3 {
		e.seen[kind]++
		e.list = append(e.list, kind+": "+msg)
	}
}

func runChurn(c contender, addrs []string, ad *admin, cfg churnConfig) (*churnRound, error) {
	ls := make([]locker, cfg.clients)
	defer func() {
		for _, l := range ls {
			if l != nil {
				l.close()
			}
		}
	}()
	// Connections are set up outside the measurement.
	if err := openWarm(c, addrs, ls, "bench:warm"); err != nil {
		return nil, err
	}
	names := make([]string, cfg.keys)
	for k := range names {
		names[k] = fmt.Sprintf("bench:churn:%d", k)
	}
	state := make([]churnKey, cfg.keys)
	var (
		acquired, all, overlaps, failed, early, contract, releaseErr atomic.Int64
		ex                                                           examples
		lateMu                                                       sync.Mutex
		late                                                         []time.Duration
		wg                                                           sync.WaitGroup
	)
	p, err := startProbe(ad)
	if err != nil {
		return nil, err
	}
	end := mono() + cfg.dur
	span := int64(cfg.maxDeadline - cfg.minDeadline)
	for _, l := range ls {
		for g := 0; g < cfg.goroutines; g++ {
			wg.Add(1)
			go func(l locker) {
				defer wg.Done()
				var myLate []time.Duration
				defer func() { lateMu.Lock(); late = append(late, myLate...); lateMu.Unlock() }()
				for mono() < end {
					k := rand.IntN(cfg.keys)
					// Lock ctx is not derived from the run: every failure is a
					// deadline, and the deadline is the only thing that ends it.
					ctx, cancel := context.WithTimeout(context.Background(), cfg.minDeadline+time.Duration(rand.Int64N(span+1)))
					deadline, _ := ctx.Deadline()
					rel, err := l.lock(ctx, names[k])
					if err != nil {
						returned := time.Now()
						ctxErr := ctx.Err()
						if ctxErr == nil && !returned.Before(deadline) {
							// The deadline has passed but the context's timer
							// has not fired yet (on a loaded machine go-redis's
							// socket deadline can beat it): for the caller the
							// deadline is over all the same.
							ctxErr = context.DeadlineExceeded
						}
						cancel()
						if ctxErr == nil {
							early.Add(1)
							ex.add("failed before its deadline", err.Error())
							continue
						}
						failed.Add(1)
						myLate = append(myLate, returned.Sub(deadline))
						if c.contract != nil && !c.contract(err, ctxErr) {
							contract.Add(1)
							ex.add("error contract broken", fmt.Sprintf("%q (ctx: %v)", err.Error(), ctxErr))
						}
						continue
					}
					if mono() <= end {
						acquired.Add(1)
					}
					all.Add(1)
					st := &state[k]
					if st.holders.Add(1) != 1 {
						overlaps.Add(1)
					}
					v := st.count.Load()
					runtime.Gosched() // widen the window a second holder would need
					st.count.Store(v + 1)
					st.holders.Add(-1)
					rctx, rcancel := releaseCtx()
					err = rel(rctx)
					rcancel()
					cancel()
					if err != nil {
						releaseErr.Add(1)
						ex.add("release failed", err.Error())
					}
				}
			}(l)
		}
	}
	if err := waitGroup(&wg, cfg.dur+cfg.maxDeadline+30*time.Second); err != nil {
		return nil, err
	}
	r := &churnRound{
		acquired: acquired.Load(), dur: cfg.dur, failed: failed.Load(), early: early.Load(),
		contract: contract.Load(), releaseErr: releaseErr.Load(), late: late,
	}
	if r.use, err = p.stop(); err != nil {
		return nil, err
	}
	var counted int64
	for k := range state {
		counted += state[k].count.Load()
	}
	r.overlaps = overlaps.Load()
	if lost := all.Load() - counted; lost > 0 {
		r.overlaps += lost
		ex.add("lost counter updates", fmt.Sprintf("%d acquisitions, %d counted", all.Load(), counted))
	}
	time.Sleep(cfg.settle)
	if r.keysTTL, r.keysOther, err = ad.keyCounts(); err != nil {
		return nil, err
	}
	r.examples = slices.Clone(ex.list)
	return r, nil
}
