package main

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// --- 3. hot key ---

// grant is one acquisition of the hot key.
type grant struct {
	who           int
	asked, got    time.Duration // Lock called, Lock returned
	releaseCalled time.Duration // critical section over, Release called
}

type hotRound struct {
	grants     []grant       // those of the measured window, in order
	dur        time.Duration // the measured window
	acquired   int64         // every grant of the round, settle included
	counts     []int
	worstWait  time.Duration
	violations int64
	use        usage // timed pass only: CPU and server commands (commandstats)
	topLevel   int64 // client-issued commands (MONITOR pass only)
}

// runHot runs one hot-key round of c: n contenders, each its own locker,
// on one key for d. On an error it still returns the round's exclusion
// violations (only those).
func runHot(c contender, addrs []string, ad *admin, n int, hold, d time.Duration, mon bool) (*hotRound, error) {
	ls := make([]locker, n)
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
	var m *monitor
	var p *probe
	var err error
	if mon {
		if m, err = startMonitor(addrs[0]); err != nil {
			return nil, err
		}
		defer m.close()
	} else if p, err = startProbe(ad); err != nil {
		return nil, err
	}

	var (
		mu     sync.Mutex
		grants []grant
		ex     exclusion
		wg     sync.WaitGroup
		errMu  sync.Mutex
		runErr error
		asking = make([]atomic.Int64, n) // Lock call start of a waiting contender, 0 when not waiting
	)
	// The first d/20 of a round is not measured: 16 new clients connect,
	// and a distlock waiter lines up only once its Client's subscription to
	// the lock is confirmed (the first wait of a Client on a key), so a
	// releaser may meet an empty line and take the lock again before the
	// others have lined up. Per-acquisition usage is over the whole round.
	start := mono()
	end := start + d
	from := start + d/20
	// The round ends by cancellation at end. The contenders' deadline lies
	// a second beyond it, so that no waiter has a deadline inside the
	// round: with one at end, distlock's handoffs skip the waiters in its
	// last 5 ms (they would give up before a grant reached them) and the
	// releaser takes the lock again, which measures the deadline-churn
	// behaviour, not the fairness this scenario is about.
	ctx, cancel := context.WithTimeout(context.Background(), d+time.Second)
	defer cancel()
	stop := time.AfterFunc(d, cancel)
	defer stop.Stop()
	for i := range ls {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for ctx.Err() == nil {
				asked := mono()
				asking[i].Store(int64(asked))
				rel, err := ls[i].lock(ctx, "bench:hot")
				got := mono()
				asking[i].Store(0)
				if err != nil {
					if ctx.Err() == nil {
						errMu.Lock()
						runErr = fmt.Errorf("contender %d: %w", i, err)
						errMu.Unlock()
					}
					return
				}
				ex.enter()
				mu.Lock()
				idx := len(grants)
				grants = append(grants, grant{who: i, asked: asked, got: got})
				mu.Unlock()
				work(hold)
				mu.Lock()
				grants[idx].releaseCalled = mono()
				mu.Unlock()
				ex.leave()
				rctx, rcancel := releaseCtx()
				err = rel(rctx)
				rcancel()
				if err != nil {
					errMu.Lock()
					runErr = fmt.Errorf("contender %d release: %w", i, err)
					errMu.Unlock()
					return
				}
			}
		}(i)
	}
	<-ctx.Done()
	// Waiters still waiting at the end count with their wait so far.
	var starved time.Duration
	for i := range asking {
		if a := time.Duration(asking[i].Load()); a > 0 {
			starved = max(starved, end-a)
		}
	}
	err = waitGroup(&wg, 30*time.Second)
	if err == nil {
		errMu.Lock()
		err = runErr
		errMu.Unlock()
	}
	if err != nil {
		// A lock that lets two holders in typically fails a release next
		// ("not held"): the round is unusable, but what it broke is reported.
		return &hotRound{violations: ex.violations.Load()}, err
	}
	r := &hotRound{dur: end - from, counts: make([]int, n), violations: ex.violations.Load(), worstWait: starved}
	for _, g := range grants {
		if g.got <= end {
			r.acquired++
		}
		if g.got >= from && g.got <= end {
			r.grants = append(r.grants, g)
			r.counts[g.who]++
			r.worstWait = max(r.worstWait, g.got-g.asked)
		}
	}
	if mon {
		if r.topLevel, err = m.stop(); err != nil {
			return nil, err
		}
	} else if r.use, err = p.stop(); err != nil {
		return nil, err
	}
	return r, nil
}

// gaps returns release→next-acquire gaps, the subset where the lock passed
// to another contender (handoffs), and how many grants went to the contender
// that had just released.
func (r *hotRound) gaps() (gaps, handoffs []time.Duration, regrabs int) {
	for k := 1; k < len(r.grants); k++ {
		prev, cur := r.grants[k-1], r.grants[k]
		gap := cur.got - prev.releaseCalled
		gaps = append(gaps, gap)
		if cur.who == prev.who {
			regrabs++
		} else {
			handoffs = append(handoffs, gap)
		}
	}
	return gaps, handoffs, regrabs
}

// work simulates a critical section of d. It spins (yielding) rather than
// sleeping because Go's timers round sub-millisecond sleeps up to about 1ms
// on Linux, which would turn a 200µs hold into 1ms.
func work(d time.Duration) {
	until := mono() + d
	for mono() < until {
		runtime.Gosched()
	}
}

func minMax(counts []int) (int, int) {
	if len(counts) == 0 {
		return 0, 0
	}
	return slices.Min(counts), slices.Max(counts)
}
