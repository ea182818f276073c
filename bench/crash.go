package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// --- 5. crash recovery ---

// errRetryRound marks a round whose measurement is unusable because the
// machine stalled; the round is run again.
var errRetryRound = errors.New("round disturbed by a stall; retrying")

type crashResult struct {
	afterExpiry time.Duration // first waiter's acquire - lease expiry
	violations  int
}

func runCrash(c contender, addr string, ad *admin, waiters int, ttl time.Duration) (*crashResult, error) {
	const key = "bench:crash"
	ch, err := startChild("hold", c, addr, key, ttl)
	if err != nil {
		return nil, err
	}
	defer ch.kill()
	line, err := ch.next(30 * time.Second)
	var holderGot int64
	if err == nil {
		_, err = fmt.Sscanf(line, "H %d", &holderGot)
	}
	if err != nil {
		return nil, fmt.Errorf("holder did not report the lock: %q %v", line, err)
	}
	// Before any waiter exists, the keys with a TTL are the holder's lease
	// (fair-mode waiters add expiring keys of their own later).
	leaseKeys, err := ad.leases()
	if err != nil {
		return nil, err
	}
	if len(leaseKeys) == 0 {
		return nil, fmt.Errorf("holder's lock has no key with a TTL")
	}
	ls := make([]locker, waiters)
	defer func() {
		for _, l := range ls {
			if l != nil {
				l.close()
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*ttl+5*time.Second)
	defer cancel()
	type got struct {
		at  int64
		err error
	}
	first := make(chan got, waiters)
	var ex exclusion
	var wg sync.WaitGroup
	for i := range ls {
		if ls[i], err = c.open([]string{addr}, ttl); err != nil {
			return nil, err
		}
		wg.Add(1)
		go func(l locker) {
			defer wg.Done()
			rel, err := l.lock(ctx, key)
			if err != nil {
				first <- got{err: err}
				return
			}
			at := wall()
			ex.enter()
			first <- got{at: at}
			ex.leave()
			rctx, rcancel := releaseCtx()
			_ = rel(rctx)
			rcancel()
		}(ls[i])
	}
	time.Sleep(ttl / 10) // let the waiters start waiting on the live holder
	killAt := wall()
	ch.kill()
	// The dead holder renews nothing more: its lease ends at the keys' expiry.
	exp, err := ad.expiry(leaseKeys)
	snapAt := wall()
	if err != nil {
		return nil, err
	}
	g := <-first
	cancel() // the other waiters are not measured
	if err := waitGroup(&wg, 30*time.Second); err != nil {
		return nil, err
	}
	if g.err != nil {
		return nil, fmt.Errorf("waiter: %w", g.err)
	}
	if killAt >= exp*int64(time.Millisecond) || time.Duration(killAt-holderGot) > ttl/2 {
		return nil, errRetryRound // the machine stalled: the lease may have run out before the kill
	}
	r := &crashResult{afterExpiry: time.Duration(g.at - exp*int64(time.Millisecond)), violations: int(ex.violations.Load())}
	switch {
	case g.at < killAt:
		r.violations++ // taken while the holder was alive and its lease on
	case g.at < snapAt:
		return nil, errRetryRound // the expiry read may be the new holder's
	case r.afterExpiry < 0:
		r.violations++ // taken while the dead holder's lease was still on
	}
	return r, nil
}
