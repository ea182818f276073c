package main

import (
	"math"
	"strings"
	"time"
)

// Metric names: one value per row and round. The prefix is the scenario.
const (
	mUP50      = "uncontended.p50_us"
	mUP99      = "uncontended.p99_us"
	mUCPU      = "uncontended.cpu_us_per_pair" // client + server
	mUCPUCli   = "uncontended.client_cpu_us_per_pair"
	mUCPUSrv   = "uncontended.server_cpu_us_per_pair"
	mUCmds     = "uncontended.server_cmds_per_pair"
	mUPublish  = "uncontended.publish_per_pair"
	mDOps      = "distinct.ops_per_s"
	mHCS       = "hotkey.cs_per_s"
	mHGap50    = "hotkey.gap_p50_us"
	mHGap99    = "hotkey.gap_p99_us"
	mHHandoff  = "hotkey.handoff_p50_us"
	mHCmds     = "hotkey.server_cmds_per_acq"
	mHClient   = "hotkey.client_cmds_per_acq" // MONITOR pass, one value
	mHCPU      = "hotkey.cpu_us_per_acq"
	mHRegrab   = "hotkey.regrab_pct"
	mHMinMax   = "hotkey.min_over_max"
	mHWorst    = "hotkey.worst_wait_ms"
	mPP50      = "pingpong.handoff_p50_us"
	mPP99      = "pingpong.handoff_p99_us"
	mPCPU      = "pingpong.cpu_us_per_hold"
	mCrash     = "crash.expiry_to_acquire_ms"
	mChAcq     = "churn.acq_per_s"
	mChOverlap = "churn.overlaps"
	mChFailed  = "churn.failed_at_deadline"
	mChEarly   = "churn.failed_before_deadline"
	mChBroken  = "churn.contract_violations"
	mChRelErr  = "churn.release_errors"
	mChLate99  = "churn.late_p99_ms"
	mChLateMax = "churn.late_max_ms"
	mChKeysTTL = "churn.keys_left_with_ttl"
	mChKeysOth = "churn.keys_left_without_ttl"
	mChCPU     = "churn.cpu_us_per_acq"
	mChSrvCPU  = "churn.server_cpu_us_per_acq"
	mChSrvCmds = "churn.server_cmds_per_acq"
	mQP50      = "quorum.p50_us"
	mQP99      = "quorum.p99_us"
)

func perOp(d time.Duration, n int64) float64 {
	if n == 0 {
		return math.NaN()
	}
	return us(d) / float64(n)
}

// put records v unless it is undefined (an operation count of zero).
func (r *result) put(name string, round int, v float64) {
	if !math.IsNaN(v) && !math.IsInf(v, 0) {
		r.m.put(name, round, v)
	}
}

func (r *result) recordUncontended(round int, u *uncontendedRound) {
	r.recordPairs(round, u, pairMetrics{mUP50, mUP99, mUCPU, mUCPUCli, mUCPUSrv, mUCmds, mUPublish})
}

// pairMetrics names the metrics of a scenario of one-at-a-time operations
// (uncontended, primitives uncontended).
type pairMetrics struct{ p50, p99, cpu, cpuClient, cpuServer, cmds, publish string }

func (r *result) recordPairs(round int, u *uncontendedRound, m pairMetrics) {
	n := int64(len(u.lat))
	r.Violations += u.violations
	r.put(m.p50, round, us(pct(u.lat, 50)))
	r.put(m.p99, round, us(pct(u.lat, 99)))
	r.put(m.cpu, round, perOp(u.use.cpu(), n))
	r.put(m.cpuClient, round, perOp(u.use.client, n))
	r.put(m.cpuServer, round, perOp(u.use.server, n))
	r.put(m.cmds, round, float64(u.use.commands())/float64(n))
	r.put(m.publish, round, float64(u.use.publishes())/float64(n))
	if r.uCmds == nil {
		r.uCmds = map[string]int64{}
	}
	for name, c := range u.use.cmds {
		if name != "info" {
			r.uCmds[name] += c
		}
	}
	r.uPairs += n
}

func (r *result) recordHot(round int, h *hotRound) {
	r.Violations += h.violations
	n := int64(len(h.grants))
	gaps, handoffs, regrabs := h.gaps()
	r.put(mHCS, round, float64(n)/h.dur.Seconds())
	if len(gaps) > 0 {
		r.put(mHGap50, round, us(pct(gaps, 50)))
		r.put(mHGap99, round, us(pct(gaps, 99)))
		r.put(mHRegrab, round, 100*float64(regrabs)/float64(len(gaps)))
	}
	if len(handoffs) > 0 {
		r.put(mHHandoff, round, us(pct(handoffs, 50)))
	}
	r.put(mHCmds, round, float64(h.use.commands())/float64(h.acquired))
	r.put(mHCPU, round, perOp(h.use.cpu(), h.acquired))
	if mn, mx := minMax(h.counts); mx > 0 {
		r.put(mHMinMax, round, float64(mn)/float64(mx))
		if r.worstMinMax == nil || float64(mn)/float64(mx) < float64(r.worstMinMax[0])/float64(r.worstMinMax[1]) {
			r.worstMinMax = []int{mn, mx}
		}
	}
	r.put(mHWorst, round, float64(h.worstWait.Microseconds())/1e3)
}

func (r *result) recordPing(round int, p *pingResult) {
	r.Violations += int64(p.violations)
	r.pingDropped += p.notWaiting
	if len(p.handoffs) > 0 {
		r.put(mPP50, round, us(pct(p.handoffs, 50)))
		r.put(mPP99, round, us(pct(p.handoffs, 99)))
	}
	r.put(mPCPU, round, perOp(p.use.cpu(), int64(p.holds)))
}

func (r *result) recordCrash(round int, c *crashResult) {
	r.Violations += int64(c.violations)
	r.put(mCrash, round, float64(c.afterExpiry.Microseconds())/1e3)
}

func (r *result) recordChurn(round int, c *churnRound) {
	r.Violations += c.overlaps
	r.put(mChAcq, round, float64(c.acquired)/c.dur.Seconds())
	r.put(mChOverlap, round, float64(c.overlaps))
	r.put(mChFailed, round, float64(c.failed))
	r.put(mChEarly, round, float64(c.early))
	r.put(mChRelErr, round, float64(c.releaseErr))
	if r.contract {
		r.put(mChBroken, round, float64(c.contract))
	}
	if len(c.late) > 0 {
		r.put(mChLate99, round, float64(pct(c.late, 99).Microseconds())/1e3)
		r.put(mChLateMax, round, float64(maxDur(c.late).Microseconds())/1e3)
	}
	r.put(mChKeysTTL, round, float64(c.keysTTL))
	r.put(mChKeysOth, round, float64(c.keysOther))
	r.put(mChCPU, round, perOp(c.use.cpu(), c.acquired))
	r.put(mChSrvCPU, round, perOp(c.use.server, c.acquired))
	r.put(mChSrvCmds, round, float64(c.use.commands())/float64(max(c.acquired, 1)))
	// A few examples of each kind for the whole run, not per round.
	for _, e := range c.examples {
		kind, _, _ := strings.Cut(e, ": ")
		if r.exampleKinds == nil {
			r.exampleKinds = map[string]int{}
		}
		if r.exampleKinds[kind] < 3 {
			r.exampleKinds[kind]++
			r.ChurnExamples = append(r.ChurnExamples, e)
		}
	}
}
