package main

import (
	"fmt"
	"slices"
	"strings"
)

// cell prints a row's median value of metric, "–" if it has none.
func (r *result) cell(metric string) string {
	if s := r.stat(metric); s != nil {
		return num(s.Median)
	}
	return "–"
}

// ratioCell prints "1.25× [1.10–1.40]": the median of per-round ratios and
// their interquartile range.
func (r *result) ratioCell(metric, ref string) string {
	rs := r.ratio(metric, ref)
	if rs == nil {
		return "–"
	}
	return ratioText(rs)
}

func ratioText(rs *ratioStat) string {
	if rs.N == 1 {
		return num(rs.Median) + "×"
	}
	return fmt.Sprintf("%s× [%s–%s]", num(rs.Median), num(rs.P25), num(rs.P75))
}

func rounds(n int) string {
	if n == 1 {
		return "1 round"
	}
	return fmt.Sprintf("%d rounds", n)
}

func (r *result) sumCell(metric string) string {
	if s := r.stat(metric); s != nil {
		return fmt.Sprintf("%.0f", s.Sum)
	}
	return "–"
}

func (r *result) label() string {
	if r.Violations > 0 {
		return "**EXCLUSION VIOLATED** " + r.name()
	}
	return r.name()
}

// table writes one markdown table of the rows that have metric.
func (rep *report) table(b *strings.Builder, title, key string, header []string, cells func(r *result) []string) {
	var lines []string
	for _, r := range rep.Rows {
		if r.stat(key) == nil && r.Errors[strings.SplitN(key, ".", 2)[0]] == "" {
			continue
		}
		lines = append(lines, "| "+strings.Join(append([]string{r.label()}, cells(r)...), " | ")+" |")
	}
	if len(lines) == 0 {
		return
	}
	fmt.Fprintf(b, "\n#### %s\n\n| row | %s |\n|---%s|\n", title, strings.Join(header, " | "), strings.Repeat("|---", len(header)))
	b.WriteString(strings.Join(lines, "\n") + "\n")
}

func (rep *report) markdown() string {
	var b strings.Builder
	quick := ""
	if rep.Quick {
		quick = ", -quick"
	}
	fmt.Fprintf(&b, "\n### Results (%s, Redis %s, %d cores, %s, %d rounds for uncontended, %d for hot key/churn/semaphore, %d for the others%s, %s)\n\n",
		rep.Date, rep.Redis, rep.Cores, rep.Go, rep.uncontendedRounds(), rep.Rounds, rep.SlowRounds, quick, rep.Elapsed)
	b.WriteString("Values are medians over rounds. Ratios (×) are medians of per-round ratios, each taken between runs of the same round; " +
		"[a–b] is their interquartile range (p25–p75) over the rounds. CPU is client (getrusage of the bench process, and of the child for ping-pong) " +
		"plus server (INFO cpu) per operation; server commands are INFO commandstats deltas, calls made inside scripts included.\n")

	rep.table(&b, fmt.Sprintf("Uncontended Lock+Release (one goroutine, free key; %d pairs per round in %d slices, contenders taking turns, each slice starting with the next one)", rep.bench.uncontendedN, rep.bench.uncontendedSlices), mUP50,
		[]string{"p50 µs", "p99 µs", "p50 × baseline", "CPU µs/pair (client + server)", "CPU × baseline", "server cmds/pair", "PUBLISH/pair"},
		func(r *result) []string {
			cpu := "–"
			if s := r.stat(mUCPU); s != nil {
				cpu = fmt.Sprintf("%s (%s + %s)", num(s.Median), r.cell(mUCPUCli), r.cell(mUCPUSrv))
			}
			return []string{r.cell(mUP50), r.cell(mUP99), r.ratioCell(mUP50, refBaseline), cpu, r.ratioCell(mUCPU, refBaseline), r.cell(mUCmds), r.cell(mUPublish)}
		})
	rep.table(&b, "Hot key (16 contenders, 200 µs critical section)", mHCS,
		[]string{"CS/s", "× best peer", "handoff gap p50 µs", "× rueidislock tuned", "gap p50 / p99 µs", "server cmds/acq", "client cmds/acq", "CPU µs/acq", "re-grab", "min/max acq (worst round)", "worst wait ms"},
		func(r *result) []string {
			mm := "–"
			if r.worstMinMax != nil {
				mm = fmt.Sprintf("%d/%d", r.worstMinMax[0], r.worstMinMax[1])
			}
			worst := "–"
			if s := r.stat(mHWorst); s != nil {
				worst = num(s.Max)
			}
			return []string{r.cell(mHCS), r.ratioCell(mHCS, refBestPeer), r.cell(mHHandoff), r.ratioCell(mHHandoff, refRueidis),
				r.cell(mHGap50) + " / " + r.cell(mHGap99), r.cell(mHCmds), r.cell(mHClient), r.cell(mHCPU), r.cell(mHRegrab) + "%", mm, worst}
		})
	rep.table(&b, fmt.Sprintf("Deadline churn (%d clients × %d goroutines, %d keys, deadlines %v–%v)",
		rep.bench.churn.clients, rep.bench.churn.goroutines, rep.bench.churn.keys, rep.bench.churn.minDeadline, rep.bench.churn.maxDeadline), mChAcq,
		[]string{"acq/s", "× best peer", "× baseline", "overlaps", "contract violations", "failed at deadline", "failed early", "release errors", "late p99 / max ms", "keys left: TTL / none (worst round)", "CPU µs/acq"},
		func(r *result) []string {
			contract := "n/a"
			if r.contract {
				contract = r.sumCell(mChBroken)
			}
			late := "–"
			if s := r.stat(mChLateMax); s != nil {
				late = r.cell(mChLate99) + " / " + num(s.Max)
			}
			keys := "–"
			if s := r.stat(mChKeysTTL); s != nil {
				keys = fmt.Sprintf("%.0f / %.0f", s.Max, r.stat(mChKeysOth).Max)
			}
			return []string{r.cell(mChAcq), r.ratioCell(mChAcq, refBestPeer), r.ratioCell(mChAcq, refBaseline), r.sumCell(mChOverlap), contract,
				r.cell(mChFailed), r.cell(mChEarly), r.sumCell(mChRelErr), late, keys, r.cell(mChCPU)}
		})
	rep.otherTable(&b)
	rep.quorumTable(&b)
	rep.primTables(&b)
	rep.notes(&b)
	rep.targetTable(&b)
	return b.String()
}

// otherTable: the scenarios run with fewer rounds.
func (rep *report) otherTable(b *strings.Builder) {
	var lines []string
	for _, r := range rep.Rows {
		if r.stat(mDOps) == nil && r.stat(mPP50) == nil && r.stat(mCrash) == nil {
			continue
		}
		crash := "–"
		if s := r.stat(mCrash); s != nil {
			crash = num(s.Median) + " / " + num(s.Max)
		}
		lines = append(lines, "| "+strings.Join([]string{r.label(),
			r.cell(mDOps) + " (" + r.ratioCell(mDOps, refBaseline) + ")",
			r.cell(mPP50), r.ratioCell(mPP50, refRueidis), r.cell(mPP99), r.cell(mPCPU), crash}, " | ")+" |")
	}
	if len(lines) == 0 {
		return
	}
	fmt.Fprintf(b, "\n#### Other scenarios (%s)\n\n| row | 32 keys ops/s (× baseline) | ping-pong handoff p50 µs | × rueidislock tuned | p99 µs | CPU µs/hold (both processes + server) | crash: expiry→acquire median / max ms |\n|---|---|---|---|---|---|---|\n", rounds(rep.SlowRounds))
	b.WriteString(strings.Join(lines, "\n") + "\n")
}

func (rep *report) quorumTable(b *strings.Builder) {
	if len(rep.Quorum) == 0 {
		return
	}
	fmt.Fprintf(b, "\n#### Quorum (5 redis-servers, %s)\n\n| row | acquire+release p50 µs | ratio | p99 µs |\n|---|---|---|---|\n", rounds(rep.SlowRounds))
	for _, q := range rep.Quorum {
		s := q.Metrics[mQP50]
		if s == nil {
			fmt.Fprintf(b, "| %s | error | | %s |\n", q.Lib, strings.Join(q.Errors, "; "))
			continue
		}
		ratio := ""
		for _, rs := range q.Ratios {
			ratio = ratioText(rs) + " " + rs.To
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s |\n", q.Lib, num(s.Median), ratio, num(q.Metrics[mQP99].Median))
	}
}

func (rep *report) notes(b *strings.Builder) {
	b.WriteString("\nHot key: gap = from the holder calling Release to the next holder's Lock returning (handoff gap: only grants to another contender); " +
		"client cmds/acq counted with MONITOR in a separate untimed pass. Deadline churn: overlaps = two holders of a key at once or a lost counter update; " +
		"contract = a Lock that failed after its deadline without wrapping ctx.Err() and ErrNotObtained (or ErrNoAnswer) (distlock rows only, summed over rounds, as are overlaps and release errors); failed at deadline / early = failed Lock calls per round whose ctx had / had not ended; late = how long after its deadline a failed Lock returned; " +
		"keys left = after the run and a settle, keys with a TTL (leases or waiting lines held by nobody) / without (bookkeeping such as fence counters). " +
		"Crash: from the dead holder's lease expiry (PEXPIRETIME, ms resolution) to the first waiter's Lock returning.\n")
	for _, r := range rep.Rows {
		if r.isDistlock() && len(r.UncontendedCommands) > 0 {
			var names []string
			for n := range r.UncontendedCommands {
				names = append(names, n)
			}
			slices.Sort(names)
			var parts []string
			for _, n := range names {
				parts = append(parts, fmt.Sprintf("%s %s", n, num(r.UncontendedCommands[n])))
			}
			fmt.Fprintf(b, "\nServer commands per uncontended pair, %s: %s\n", r.name(), strings.Join(parts, ", "))
		}
	}
	for _, r := range rep.Rows {
		if len(r.ChurnExamples) > 0 {
			fmt.Fprintf(b, "\nDeadline churn, %s, examples:\n", r.name())
			for _, e := range r.ChurnExamples {
				fmt.Fprintf(b, "- %s\n", e)
			}
		}
	}
	for _, r := range rep.Rows {
		keys := make([]string, 0, len(r.Errors))
		for s := range r.Errors {
			keys = append(keys, s)
		}
		slices.Sort(keys)
		for _, s := range keys {
			fmt.Fprintf(b, "\nerror: %s %s: %s\n", r.name(), s, r.Errors[s])
		}
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(b, "\nnote: %s\n", n)
	}
	if len(rep.Timings) > 0 {
		fmt.Fprintf(b, "\nTime per scenario (all rounds): %s; total %s.\n", strings.Join(strings.Fields(strings.Join(rep.Timings, ", ")), " "), rep.Elapsed)
	}
}

func (rep *report) targetTable(b *strings.Builder) {
	if len(rep.Targets) == 0 {
		return
	}
	met := 0
	for _, t := range rep.Targets {
		if t.Met {
			met++
		}
	}
	fmt.Fprintf(b, "\n#### Targets (%d of %d met)\n\nJudged on the median of per-round values or ratios unless the target says \"every round\" or \"all rounds\"; [a–b] is p25–p75 over the rounds.\n\n| target | row | measured | detail | met |\n|---|---|---|---|---|\n", met, len(rep.Targets))
	for _, t := range rep.Targets {
		verdict := "**no**"
		if t.Met {
			verdict = "yes"
		}
		if !t.Measured {
			verdict = "**not measured**"
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s |\n", t.Name, t.Row, t.Shown, t.Detail, verdict)
	}
}
