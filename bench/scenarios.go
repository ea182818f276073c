package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// epoch is the in-process monotonic clock every timestamp is taken from.
var epoch = time.Now()

func mono() time.Duration { return time.Since(epoch) }

// exclusion counts holders of one key in this process; more than one at a
// time is a broken lock and fails the row.
type exclusion struct {
	holders    atomic.Int32
	violations atomic.Int64
}

func (e *exclusion) enter() {
	if e.holders.Add(1) != 1 {
		e.violations.Add(1)
	}
}

func (e *exclusion) leave() { e.holders.Add(-1) }

func releaseCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 5*time.Second)
}

// --- 2. 32 goroutines on distinct keys, one client ---

func runDistinct(c contender, addrs []string, workers int, d time.Duration) (ops int64, viol int64, err error) {
	l, err := c.open(addrs, 10*time.Second)
	if err != nil {
		return 0, 0, err
	}
	defer l.close()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var wg sync.WaitGroup
	var total, violations atomic.Int64
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			var ex exclusion
			key := fmt.Sprintf("bench:d:%d", w)
			for ctx.Err() == nil {
				rel, err := l.lock(ctx, key)
				if err != nil {
					if ctx.Err() == nil {
						errs <- err
					}
					break
				}
				ex.enter()
				ex.leave()
				rctx, rcancel := releaseCtx()
				err = rel(rctx)
				rcancel()
				if err != nil {
					errs <- err
					break
				}
				total.Add(1)
			}
			violations.Add(ex.violations.Load())
		}(w)
	}
	if err := waitGroup(&wg, d+30*time.Second); err != nil {
		return 0, 0, err
	}
	close(errs)
	if err := <-errs; err != nil {
		return 0, 0, err
	}
	return total.Load(), violations.Load(), nil
}

// waitGroup waits for wg at most limit, so a hung library fails the run
// instead of hanging it.
func waitGroup(wg *sync.WaitGroup, limit time.Duration) error {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-time.After(limit):
		return fmt.Errorf("workers still running after %v", limit)
	}
}
