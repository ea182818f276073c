package main

import (
	"context"
	"fmt"
	"runtime"
	"time"
)

// --- 1. uncontended acquire+release ---

type uncontendedRound struct {
	lat        []time.Duration
	use        usage // of the measured pairs only (warm-up excluded)
	violations int64
}

const warmPairs = 20

// pairs times n Lock+Release pairs of a free key.
func pairs(ctx context.Context, l locker, key string, n int, ex *exclusion, lat []time.Duration) ([]time.Duration, error) {
	for i := 0; i < n; i++ {
		start := mono()
		rel, err := l.lock(ctx, key)
		if err != nil {
			return lat, fmt.Errorf("lock: %w", err)
		}
		ex.enter()
		ex.leave()
		rctx, rcancel := releaseCtx()
		err = rel(rctx)
		rcancel()
		if err != nil {
			return lat, fmt.Errorf("release: %w", err)
		}
		lat = append(lat, mono()-start)
	}
	return lat, nil
}

// runUncontended times n pairs of one contender on its own (quorum, and the
// process warm-up). ad is nil when there is no single server to read
// statistics from.
func runUncontended(c contender, addrs []string, ad *admin, n int) (*uncontendedRound, error) {
	l, err := c.open(addrs, 10*time.Second)
	if err != nil {
		return nil, err
	}
	defer l.close()
	var ex exclusion
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := pairs(ctx, l, "bench:u", warmPairs, &ex, nil); err != nil {
		return nil, err
	}
	p, err := startProbe(ad)
	if err != nil {
		return nil, err
	}
	out := &uncontendedRound{}
	if out.lat, err = pairs(ctx, l, "bench:u", n, &ex, make([]time.Duration, 0, n)); err != nil {
		return nil, err
	}
	if out.use, err = p.stop(); err != nil {
		return nil, err
	}
	out.violations = ex.violations.Load()
	return out, nil
}

// runUncontendedRound runs one round of every contender, interleaved more
// finely than the other scenarios: all lockers are opened and warmed first,
// then each contender's n pairs run in slices, the contenders taking turns
// slice by slice. A pair takes 50–300 µs, so one contender's whole round
// would last a fraction of a second and a ratio between two of them would
// compare two different moments of the machine; in slices, every
// contender's samples (and CPU and command counts, summed over its slices)
// spread over the same seconds. Contender i's result or error is out[i] or
// errs[i].
func runUncontendedRound(cs []contender, addrs []string, ad *admin, n, slices int) (out []*uncontendedRound, errs []error) {
	out, errs = make([]*uncontendedRound, len(cs)), make([]error, len(cs))
	ls := make([]locker, len(cs))
	exs := make([]exclusion, len(cs))
	defer func() {
		for _, l := range ls {
			if l != nil {
				l.close()
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	key := func(i int) string { return "bench:u:" + cs[i].lib + ":" + cs[i].cfg }
	for i, c := range cs {
		l, err := c.open(addrs, 10*time.Second)
		if err == nil {
			ls[i] = l
			_, err = pairs(ctx, l, key(i), warmPairs, &exs[i], nil)
		}
		if err != nil {
			errs[i] = err
			continue
		}
		out[i] = &uncontendedRound{lat: make([]time.Duration, 0, n), use: usage{cmds: map[string]int64{}}}
	}
	for s := 0; s < slices; s++ {
		size := n / slices
		if s < n%slices {
			size++ // the remainder goes to the first slices
		}
		for k := range cs {
			i := turn(k, s, len(cs))
			if errs[i] != nil {
				continue
			}
			runtime.GC() // the previous slice's garbage is not this one's CPU
			p, err := startProbe(ad)
			if err == nil {
				out[i].lat, err = pairs(ctx, ls[i], key(i), size, &exs[i], out[i].lat)
			}
			var u usage
			if err == nil {
				u, err = p.stop()
			}
			if err != nil {
				errs[i], out[i] = err, nil
				continue
			}
			out[i].use.add(u)
		}
	}
	for i := range cs {
		if out[i] != nil {
			out[i].violations = exs[i].violations.Load()
		}
	}
	return out, errs
}

// turn is the contender that takes the k-th turn of slice s among n. Each
// slice starts with the next contender, so that no row always runs first;
// odd slices go round the other way, so that a row does not always run
// right after the same row either (a start that moves on alone keeps the
// cyclic order: every row would follow the same row in every slice it does
// not start).
func turn(k, s, n int) int {
	if s%2 == 1 {
		return ((s-k)%n + n) % n
	}
	return (k + s) % n
}
