package main

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"
)

func logf(format string, a ...any) { fmt.Fprintf(os.Stderr, format+"\n", a...) }

// run measures every selected scenario, rounds interleaved: round 1 of every
// contender, then round 2, … so that a noisy minute on the shared machine
// hits every row of a round alike and a ratio taken inside a round cancels it.
func run(cfg config) (*report, error) {
	addrs, stop, err := servers(1)
	if err != nil {
		return nil, err
	}
	defer stop()
	ad := newAdmin(addrs[0])
	defer ad.rdb.Close()
	cs := selected(cfg)
	rep := newReport(cs, cfg)
	rep.Redis = ad.version()
	logf("bench: redis %s on %s, %d cores, %s, %d rows, %d rounds (uncontended) / %d (hot key, churn, semaphore) / %d (others)",
		rep.Redis, addrs[0], runtime.NumCPU(), runtime.Version(), len(cs), cfg.uncontendedRounds, cfg.rounds, cfg.slowRounds)
	if fairOption == nil {
		logf("bench: distlock has no WithFair yet: fair rows left out")
	}
	started := time.Now()
	// The process's first Redis round trips (heap growth, page faults,
	// connection setup) are paid here, unrecorded, not by round 1's first row.
	if _, err := runUncontended(cs[0], addrs, nil, 200); err != nil {
		return nil, fmt.Errorf("warm-up: %w", err)
	}
	timed := func(name string, t0 time.Time) {
		line := fmt.Sprintf("%-12s %6.1fs", name, time.Since(t0).Seconds())
		rep.Timings = append(rep.Timings, line)
		logf("bench: %s", line)
	}

	// each runs one measurement for every contender per round.
	each := func(scenario string, rounds int, f func(c contender, r *result, round int) error) {
		if !cfg.scenarios[scenario] {
			return
		}
		t0 := time.Now()
		for round := 1; round <= rounds; round++ {
			for _, c := range rotated(cs, round) {
				if !c.runsIn(scenario) {
					continue
				}
				r := rep.row(c)
				if err := ad.flush(); err != nil {
					r.fail(scenario, err)
					continue
				}
				// The previous contender's garbage is collected now, not on
				// this one's CPU bill.
				runtime.GC()
				var err error
				for try := 0; try < 3; try++ {
					if err = f(c, r, round); !errors.Is(err, errRetryRound) {
						break
					}
				}
				if err != nil {
					r.fail(scenario, err)
				}
			}
		}
		timed(scenario, t0)
	}

	if cfg.scenarios["uncontended"] {
		t0 := time.Now()
		for round := 1; round <= cfg.uncontendedRounds; round++ {
			order := rotated(cs, round)
			if err := ad.flush(); err != nil {
				return nil, err
			}
			out, errs := runUncontendedRound(order, addrs, ad, cfg.uncontendedN, cfg.uncontendedSlices)
			for i, c := range order {
				if errs[i] != nil {
					rep.row(c).fail("uncontended", errs[i])
				} else {
					rep.row(c).recordUncontended(round, out[i])
				}
			}
		}
		timed("uncontended", t0)
	}
	prims := selectedPrimitives(cfg)
	runPrimUncontended(cfg, rep, prims, addrs, ad, timed)
	each("distinct", cfg.slowRounds, func(c contender, r *result, round int) error {
		ops, v, err := runDistinct(c, addrs, cfg.distinctWorkers, cfg.distinctDur)
		r.Violations += v
		if err == nil {
			r.put(mDOps, round, float64(ops)/cfg.distinctDur.Seconds())
		}
		return err
	})
	each("hotkey", cfg.rounds, measureHot(cfg, addrs, ad))
	if cfg.scenarios["hotkey"] {
		t0 := time.Now()
		monitorPass(cfg, cs, rep, addrs, ad)
		timed("cmd count", t0)
	}
	runSemThroughput(cfg, rep, prims, addrs, ad, timed)
	each("pingpong", cfg.slowRounds, measurePing(cfg, addrs, ad))
	each("crash", cfg.slowRounds, func(c contender, r *result, round int) error {
		cr, err := runCrash(c, addrs[0], ad, cfg.crashWaiters, cfg.crashTTL)
		if err == nil {
			r.recordCrash(round, cr)
		}
		return err
	})
	// Deadline churn runs after the others: it leaves libraries with state
	// that outlives a run (go-zero's process-wide circuit breaker).
	each("churn", cfg.rounds, func(c contender, r *result, round int) error {
		ch, err := runChurn(c, addrs, ad, cfg.churn)
		if err == nil {
			r.recordChurn(round, ch)
		}
		return err
	})
	if cfg.scenarios["quorum"] {
		t0 := time.Now()
		if err := runQuorumScenario(cfg, rep); err != nil {
			rep.Notes = append(rep.Notes, "quorum: "+err.Error())
		}
		timed("quorum", t0)
	}
	rep.Elapsed = time.Since(started).Round(time.Second).String()
	rep.finish()
	fmt.Print(rep.markdown())
	if bad := rep.broken(); len(bad) > 0 {
		return rep, fmt.Errorf("MUTUAL EXCLUSION VIOLATED in %s", strings.Join(bad, ", "))
	}
	if failed := rep.failed(); len(failed) > 0 {
		return rep, fmt.Errorf("errors in %s (see the report)", strings.Join(failed, ", "))
	}
	return rep, nil
}

// rotated is the order of one round: each round starts one contender
// later, so that no row always runs first (right after the previous
// scenario) or last.
func rotated(cs []contender, round int) []contender {
	k := (round - 1) % len(cs)
	return append(cs[k:len(cs):len(cs)], cs[:k]...)
}

// measureHot runs one hot-key round of a contender and records it.
func measureHot(cfg config, addrs []string, ad *admin) func(c contender, r *result, round int) error {
	return func(c contender, r *result, round int) error {
		h, err := runHot(c, addrs, ad, cfg.hotN, cfg.hotHold, cfg.hotDur, false)
		switch {
		case err == nil:
			r.recordHot(round, h)
		case h != nil:
			r.Violations += h.violations // a failed round still reports what it broke
		}
		return err
	}
}

// measurePing runs one ping-pong round of a contender and records it.
func measurePing(cfg config, addrs []string, ad *admin) func(c contender, r *result, round int) error {
	return func(c contender, r *result, round int) error {
		p, err := runPingPong(c, addrs[0], ad, cfg.pingDur)
		switch {
		case err == nil:
			r.recordPing(round, p)
		case p != nil:
			r.Violations += int64(p.violations) // a failed round still reports what it broke
		}
		return err
	}
}

// monitorPass counts client-issued hot-key commands through MONITOR, once
// per contender and untimed, because MONITOR slows the server.
func monitorPass(cfg config, cs []contender, rep *report, addrs []string, ad *admin) {
	for _, c := range cs {
		if !c.runsIn("hotkey") {
			continue
		}
		r := rep.row(c)
		if err := ad.flush(); err != nil {
			r.fail("hotkey", err)
			continue
		}
		h, err := runHot(c, addrs, ad, cfg.hotN, cfg.hotHold, cfg.monitorDur, true)
		if err != nil {
			if h != nil {
				r.Violations += h.violations
			}
			r.fail("hotkey", fmt.Errorf("MONITOR pass: %w", err))
			continue
		}
		r.Violations += h.violations
		r.monitorCmds += h.topLevel
		r.monitorAcq += h.acquired
	}
}

// runQuorumScenario compares Redlock on five independent servers.
func runQuorumScenario(cfg config, rep *report) error {
	if newQuorum == nil {
		return errors.New("distlock has no NewQuorum yet: row left out")
	}
	addrs, stop, err := servers(5)
	if err != nil {
		return err
	}
	defer stop()
	var qs []contender
	for _, c := range contenders() {
		if (c.lib == "distlock" || c.lib == "redsync") && c.cfg == "default" {
			qs = append(qs, c)
		}
	}
	admins := make([]*admin, len(addrs))
	for i, a := range addrs {
		admins[i] = newAdmin(a)
		defer admins[i].rdb.Close()
	}
	for _, c := range qs {
		rep.quorumRow(c) // in qs's order: finish reads distlock's row first
	}
	for round := 1; round <= cfg.slowRounds; round++ {
		for _, c := range rotated(qs, round) {
			q := rep.quorumRow(c)
			for _, a := range admins {
				if err := a.flush(); err != nil {
					return err
				}
			}
			runtime.GC() // as each does: the last row's garbage is not this one's
			u, err := runUncontended(c, addrs, nil, cfg.quorumN)
			if err != nil {
				q.Errors = append(q.Errors, err.Error())
				continue
			}
			q.Violations += u.violations
			q.m.put(mQP50, round, us(pct(u.lat, 50)))
			q.m.put(mQP99, round, us(pct(u.lat, 99)))
		}
	}
	return nil
}

// runPrimUncontended times the primitives' uncontended acquire+release with
// the uncontended scenario's machinery (slices, warm-up, probes); each row
// is one goroutine on a name of its own.
func runPrimUncontended(cfg config, rep *report, prims []contender, addrs []string, ad *admin, timed func(string, time.Time)) {
	if !cfg.scenarios["prim-uncontended"] || len(prims) == 0 {
		return
	}
	t0 := time.Now()
	for round := 1; round <= cfg.uncontendedRounds; round++ {
		order := rotated(prims, round)
		if err := ad.flush(); err != nil {
			for _, c := range order {
				rep.primRow(c).fail("prim-uncontended", err)
			}
			continue
		}
		out, errs := runUncontendedRound(order, addrs, ad, cfg.uncontendedN, cfg.uncontendedSlices)
		for i, c := range order {
			if errs[i] != nil {
				rep.primRow(c).fail("prim-uncontended", errs[i])
			} else {
				rep.primRow(c).recordPrimUncontended(round, out[i])
			}
		}
	}
	timed("prim-uncontended", t0)
}

// runSemThroughput runs the semaphore against the mutex, when the permit
// row is selected (without it there is nothing to compare).
func runSemThroughput(cfg config, rep *report, prims []contender, addrs []string, ad *admin, timed func(string, time.Time)) {
	var cs []contender
	for _, c := range prims {
		if c.cfg == primMutex || c.cfg == primPermit {
			cs = append(cs, c)
		}
	}
	if !cfg.scenarios["sem-throughput"] || len(cs) != 2 {
		return
	}
	limit := func(c contender) int32 {
		if c.cfg == primPermit {
			return semLimit
		}
		return 1
	}
	t0 := time.Now()
	for round := 1; round <= cfg.rounds; round++ {
		order := rotated(cs, round)
		if err := ad.flush(); err != nil {
			for _, c := range order {
				rep.primRow(c).fail("sem-throughput", err)
			}
			continue
		}
		out, errs := runSemRound(order, addrs, ad, cfg.sem, limit)
		for i, c := range order {
			r := rep.primRow(c)
			if out[i] != nil {
				r.recordSem(round, out[i])
			}
			if errs[i] != nil {
				r.fail("sem-throughput", errs[i])
			}
		}
	}
	timed("sem-throughput", t0)
}
