package main

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// --- semaphore throughput: n contenders on one semaphore vs one mutex ---

type semConfig struct {
	contenders int           // each with its own Client, as separate processes would
	hold       time.Duration // slept inside every hold
	dur        time.Duration // per contender and round, over all slices
	slices     int
}

type semRound struct {
	acquired   int64         // Lock calls that returned before their slice ended
	dur        time.Duration // measured time, all slices
	held       time.Duration // hold time inside the slices, summed over holders
	use        usage
	peak       int32
	violations int64
}

// semKey is the one name every contender of a row asks for.
func semKey(c contender) string { return "bench:sem:" + c.cfg }

// runSemRound runs one round of the throughput rows (the mutex and the
// semaphore), interleaved in slices like the uncontended scenario: every
// row's contenders are opened and warmed first, then the rows take turns
// slice by slice, so that a per-round ratio compares the same seconds of the
// machine. limit(c) is how many holders row c may have at once.
func runSemRound(cs []contender, addrs []string, ad *admin, sc semConfig, limit func(contender) int32) (out []*semRound, errs []error) {
	out, errs = make([]*semRound, len(cs)), make([]error, len(cs))
	ls := make([][]locker, len(cs))
	gs := make([]gauge, len(cs))
	defer func() {
		for _, row := range ls {
			for _, l := range row {
				if l != nil {
					l.close()
				}
			}
		}
	}()
	for i, c := range cs {
		gs[i].limit = limit(c)
		ls[i] = make([]locker, sc.contenders)
		if errs[i] = openWarm(c, addrs, ls[i], semKey(c)); errs[i] == nil {
			out[i] = &semRound{use: usage{cmds: map[string]int64{}}}
		}
	}
	slice := sc.dur / time.Duration(sc.slices)
	for s := 0; s < sc.slices; s++ {
		for i, c := range cs {
			if errs[i] != nil {
				continue
			}
			runtime.GC() // the previous slice's garbage is not this one's CPU
			p, err := startProbe(ad)
			var acq int64
			var held time.Duration
			if err == nil {
				acq, held, err = semSlice(ls[i], semKey(c), sc.hold, slice, &gs[i])
			}
			var u usage
			if err == nil {
				u, err = p.stop()
			}
			if err != nil {
				errs[i], out[i] = err, nil
				continue
			}
			out[i].acquired += acq
			out[i].held += held
			out[i].dur += slice
			out[i].use.add(u)
		}
	}
	for i := range cs {
		if out[i] != nil {
			out[i].peak, out[i].violations = gs[i].peak.Load(), gs[i].violations.Load()
		} else if v := gs[i].violations.Load(); v > 0 {
			// A row that failed later must still report what it broke.
			out[i], errs[i] = &semRound{violations: v}, fmt.Errorf("%w (after %d exclusion violations)", errs[i], v)
		}
	}
	return out, errs
}

// openWarm opens one locker per contender (its own Client) and takes and
// releases key once with each, so that connections and subscriptions are
// set up outside the measurement.
func openWarm(c contender, addrs []string, ls []locker, key string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for j := range ls {
		var err error
		if ls[j], err = c.open(addrs, 10*time.Second); err != nil {
			return err
		}
		rel, err := ls[j].lock(ctx, key)
		if err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
		rctx, rcancel := releaseCtx()
		err = rel(rctx)
		rcancel()
		if err != nil {
			return fmt.Errorf("warm-up release: %w", err)
		}
	}
	return nil
}

// semSlice runs every locker in a loop on key for d: wait, hold for hold
// (a sleep: the holder does no work, so throughput is bounded by the
// permits and the handoffs, not by the 2 CPUs), release. It counts the
// acquisitions made before the end and the hold time inside the slice.
func semSlice(ls []locker, key string, hold, d time.Duration, g *gauge) (acquired int64, held time.Duration, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	end := mono() + d
	var (
		wg     sync.WaitGroup
		acq    atomic.Int64
		heldNs atomic.Int64
		errMu  sync.Mutex
		runErr error
	)
	fail := func(e error) {
		errMu.Lock()
		if runErr == nil {
			runErr = e
		}
		errMu.Unlock()
	}
	for j, l := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				rel, err := l.lock(ctx, key)
				got := mono()
				if err != nil {
					if ctx.Err() == nil { // not the end of the slice
						fail(fmt.Errorf("contender %d: %w", j, err))
					}
					return
				}
				g.enter()
				time.Sleep(hold)
				left := mono()
				g.leave()
				if got < end {
					acq.Add(1)
					heldNs.Add(int64(min(left, end) - got))
				}
				rctx, rcancel := releaseCtx()
				err = rel(rctx)
				rcancel()
				if err != nil {
					fail(fmt.Errorf("contender %d release: %w", j, err))
					return
				}
			}
		}()
	}
	if err := waitGroup(&wg, d+30*time.Second); err != nil {
		return 0, 0, err
	}
	if runErr != nil {
		return 0, 0, runErr
	}
	return acq.Load(), time.Duration(heldNs.Load()), nil
}
