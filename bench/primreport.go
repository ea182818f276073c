package main

import (
	"fmt"
	"slices"
	"strings"
)

// Metrics of the primitives scenarios; the prefix is the scenario, as for
// the others.
const (
	mPrP50      = "prim-uncontended.p50_us"
	mPrP99      = "prim-uncontended.p99_us"
	mPrCPU      = "prim-uncontended.cpu_us_per_op" // client + server
	mPrCPUCli   = "prim-uncontended.client_cpu_us_per_op"
	mPrCPUSrv   = "prim-uncontended.server_cpu_us_per_op"
	mPrCmds     = "prim-uncontended.server_cmds_per_op"
	mPrPublish  = "prim-uncontended.publish_per_op"
	mSemOps     = "sem-throughput.acq_per_s"
	mSemCPU     = "sem-throughput.cpu_us_per_acq"
	mSemCmds    = "sem-throughput.server_cmds_per_acq"
	mSemHolders = "sem-throughput.mean_holders" // hold time inside the slices ÷ slice time
	mSemPeak    = "sem-throughput.peak_holders"
)

// refMutex names distlock's mutex row of the primitives scenarios, the
// reference of their ratios.
const refMutex = "distlock mutex"

// operation is what one primitives row times, for the tables.
var operation = map[string]string{
	primMutex:  "Lock+Release",
	primRead:   "RLock+Release",
	primPermit: fmt.Sprintf("Acquire+Release (n=%d)", semLimit),
	primLeader: "Campaign+Resign",
}

func (rep *report) primRow(c contender) *result {
	for _, r := range rep.Primitives {
		if r.Cfg == c.cfg {
			return r
		}
	}
	r := &result{Lib: c.lib, Cfg: c.cfg, Desc: c.desc, m: metrics{}}
	rep.Primitives = append(rep.Primitives, r)
	return r
}

func (r *result) recordPrimUncontended(round int, u *uncontendedRound) {
	r.recordPairs(round, u, pairMetrics{mPrP50, mPrP99, mPrCPU, mPrCPUCli, mPrCPUSrv, mPrCmds, mPrPublish})
}

func (r *result) recordSem(round int, s *semRound) {
	r.Violations += s.violations
	if s.dur == 0 {
		return // only violations to report: the row failed
	}
	r.put(mSemOps, round, float64(s.acquired)/s.dur.Seconds())
	r.put(mSemCPU, round, perOp(s.use.cpu(), s.acquired))
	if s.acquired > 0 {
		r.put(mSemCmds, round, float64(s.use.commands())/float64(s.acquired))
	}
	r.put(mSemHolders, round, s.held.Seconds()/s.dur.Seconds())
	r.put(mSemPeak, round, float64(s.peak))
}

// finishPrimitives summarizes the primitives rows and takes their per-round
// ratios to the mutex row of the same round.
func (rep *report) finishPrimitives() {
	var mutex *result
	for _, r := range rep.Primitives {
		if r.Cfg == primMutex {
			mutex = r
		}
	}
	ref := reference{name: refMutex, at: func(metric string, round int) (float64, bool) {
		if mutex == nil {
			return 0, false
		}
		return mutex.m.get(metric, round)
	}}
	for _, r := range rep.Primitives {
		r.Metrics, r.Ratios = map[string]*spread{}, map[string]*ratioStat{}
		for name := range r.m {
			r.Metrics[name] = summarize(r.m.values(name))
		}
		for _, metric := range []string{mPrP50, mPrCPU, mSemOps} {
			if sp := summarize(ratioOver(r.m, metric, ref)); sp != nil {
				r.Ratios[metric+"/"+refMutex] = &ratioStat{To: refMutex, spread: *sp}
			}
		}
		if r.uPairs > 0 {
			r.UncontendedCommands = map[string]float64{}
			for name, n := range r.uCmds {
				r.UncontendedCommands[name] = float64(n) / float64(r.uPairs)
			}
		}
	}
}

// primGoals are issue 13's performance targets.
func primGoals(sc semConfig) []goal {
	is := func(cfg string) func(*result) bool { return func(r *result) bool { return r.Cfg == cfg } }
	vsMutex := func(metric, unit string) func(*report, *result) string {
		return func(rep *report, r *result) string {
			s, m := r.stat(metric), rep.primFind(primMutex)
			if s == nil || m == nil || m.stat(metric) == nil {
				return ""
			}
			return fmt.Sprintf("medians %s%s vs mutex %s%s", num(s.Median), unit, num(m.stat(metric).Median), unit)
		}
	}
	uncontended := func(cfg string) goal {
		return goal{name: "uncontended " + operation[cfg] + " p50 ≤ 1.3× mutex Lock+Release", scenario: "prim-uncontended",
			rows: is(cfg), metric: mPrP50, ref: refMutex, le: true, limit: 1.3, detail: vsMutex(mPrP50, "µs")}
	}
	return []goal{
		uncontended(primRead), uncontended(primPermit), uncontended(primLeader),
		{name: fmt.Sprintf("semaphore n=%d, %d contenders, %v hold: acquisitions/s ≥ 3× mutex", semLimit, sc.contenders, sc.hold),
			scenario: "sem-throughput", rows: is(primPermit), metric: mSemOps, ref: refMutex, limit: 3, detail: vsMutex(mSemOps, "/s")},
	}
}

func (rep *report) primFind(cfg string) *result {
	for _, r := range rep.Primitives {
		if r.Cfg == cfg {
			return r
		}
	}
	return nil
}

// judgePrimitives adds the primitives' targets: left out when the scenario
// or the mutex row did not run, not measured when the row failed.
func (rep *report) judgePrimitives() {
	if rep.primFind(primMutex) == nil {
		return
	}
	for _, g := range primGoals(rep.bench.sem) {
		if !rep.bench.scenarios[g.scenario] {
			continue
		}
		for _, r := range rep.Primitives {
			if g.rows(r) {
				rep.Targets = append(rep.Targets, g.judge(rep, r))
			}
		}
	}
}

// primTables writes the primitives tables and their notes.
func (rep *report) primTables(b *strings.Builder) {
	var un, sem []string
	for _, r := range rep.Primitives {
		if r.stat(mPrP50) != nil || r.Errors["prim-uncontended"] != "" {
			cpu := "–"
			if s := r.stat(mPrCPU); s != nil {
				cpu = fmt.Sprintf("%s (%s + %s)", num(s.Median), r.cell(mPrCPUCli), r.cell(mPrCPUSrv))
			}
			un = append(un, "| "+strings.Join([]string{r.label(), operation[r.Cfg], r.cell(mPrP50), r.cell(mPrP99),
				r.ratioCell(mPrP50, refMutex), cpu, r.ratioCell(mPrCPU, refMutex), r.cell(mPrCmds), r.cell(mPrPublish)}, " | ")+" |")
		}
		if r.stat(mSemOps) != nil || r.Errors["sem-throughput"] != "" {
			limit := 1
			if r.Cfg == primPermit {
				limit = semLimit
			}
			peak := "–"
			if s := r.stat(mSemPeak); s != nil {
				peak = fmt.Sprintf("%.0f (%d)", s.Max, limit)
			}
			sem = append(sem, "| "+strings.Join([]string{r.label(), r.cell(mSemOps), r.ratioCell(mSemOps, refMutex),
				r.cell(mSemHolders), peak, r.cell(mSemCPU), r.cell(mSemCmds)}, " | ")+" |")
		}
	}
	if len(un) > 0 {
		fmt.Fprintf(b, "\n#### Primitives, uncontended (distlock only: the peers have no such primitives; one goroutine, free name; %d operations per round in %d slices, rows taking turns)\n\n"+
			"| row | operation | p50 µs | p99 µs | p50 × mutex | CPU µs/op (client + server) | CPU × mutex | server cmds/op | PUBLISH/op |\n|---|---|---|---|---|---|---|---|---|\n",
			rep.bench.uncontendedN, rep.bench.uncontendedSlices)
		b.WriteString(strings.Join(un, "\n") + "\n")
	}
	if len(sem) > 0 {
		sc := rep.bench.sem
		fmt.Fprintf(b, "\n#### Semaphore throughput (distlock only; %d contenders, each its own Client, on one name; %v slept inside each hold; %v per row and round in %d slices, rows taking turns)\n\n"+
			"| row | acq/s | × mutex | mean holders | peak holders (limit) | CPU µs/acq | server cmds/acq |\n|---|---|---|---|---|---|---|\n",
			sc.contenders, sc.hold, sc.dur, sc.slices)
		b.WriteString(strings.Join(sem, "\n") + "\n")
		b.WriteString("\nSemaphore throughput: acq/s counts Lock/Acquire calls that returned inside the slices; mean holders = hold time inside the slices, " +
			"summed over contenders, ÷ the slices' time (at most 1 for the mutex and 4 for the semaphore: the rest is lost between a release and the next grant); " +
			"peak holders = the most seen at once by the in-process gauge over all rounds (more than the limit fails the run).\n")
	}
	for _, r := range rep.Primitives {
		if len(r.UncontendedCommands) > 0 {
			names := make([]string, 0, len(r.UncontendedCommands))
			for n := range r.UncontendedCommands {
				names = append(names, n)
			}
			slices.Sort(names)
			var parts []string
			for _, n := range names {
				parts = append(parts, fmt.Sprintf("%s %s", n, num(r.UncontendedCommands[n])))
			}
			fmt.Fprintf(b, "\nServer commands per uncontended %s, %s: %s\n", operation[r.Cfg], r.name(), strings.Join(parts, ", "))
		}
	}
	for _, r := range rep.Primitives {
		keys := make([]string, 0, len(r.Errors))
		for s := range r.Errors {
			keys = append(keys, s)
		}
		slices.Sort(keys)
		for _, s := range keys {
			fmt.Fprintf(b, "\nerror: %s %s: %s\n", r.name(), s, r.Errors[s])
		}
	}
}
