package main

import "fmt"

// target is one verdict, computed from the run: nothing here is written by
// hand except the limits. A target whose scenario ran but produced no value
// (the scenario failed for that row) is reported as not measured and not met.
type target struct {
	Name     string  `json:"name"`
	Row      string  `json:"row"`
	Value    float64 `json:"value"` // the judged figure
	Limit    float64 `json:"limit"`
	Spread   *spread `json:"spread,omitempty"`
	Shown    string  `json:"shown"` // as printed: value and spread
	Detail   string  `json:"detail,omitempty"`
	Measured bool    `json:"measured"`
	Met      bool    `json:"met"`
}

// pick says which figure of the per-round values a target judges.
type pick int

const (
	median   pick = iota // the median round
	worstMax             // every round: the largest value
	worstMin             // every round: the smallest value
	total                // summed over the rounds (violation counters)
)

type goal struct {
	name     string
	scenario string
	rows     func(*result) bool // which distlock rows it applies to
	metric   string
	ref      string // ratio reference, "" for a plain value
	pick     pick
	le       bool // value ≤ limit (else ≥)
	limit    float64
	detail   func(*report, *result) string
}

func allRows(*result) bool    { return true }
func fairRows(r *result) bool { return r.Lib == "distlock-fair" }
func plainRows(r *result) bool {
	return r.Lib == "distlock"
}

func goals() []goal {
	med := func(metric, unit string) func(*report, *result) string {
		return func(rep *report, r *result) string {
			s, b := r.stat(metric), rep.find("baseline", "1ms")
			if s == nil || b == nil || b.stat(metric) == nil {
				return ""
			}
			return fmt.Sprintf("medians %.1f%s vs baseline %.1f%s", s.Median, unit, b.stat(metric).Median, unit)
		}
	}
	// withFloor adds, to an uncontended figure, where the floor row (the
	// leanest fenced lock, see openFloor) stood in the same rounds: how much
	// of the gap to the baseline any script-minted fence costs.
	withFloor := func(metric string) func(*report, *result) string {
		return func(rep *report, r *result) string {
			d := med(metric, "µs")(rep, r)
			f := rep.find("floor", "fenced")
			if f == nil || f.ratio(metric, refBaseline) == nil || r.ratio(metric, refFloor) == nil {
				return d
			}
			return fmt.Sprintf("%s; the floor row %s baseline, this row %s the floor", d,
				ratioText(f.ratio(metric, refBaseline)), ratioText(r.ratio(metric, refFloor)))
		}
	}
	return []goal{
		{name: "uncontended Lock+Release p50 ≤ 1.1× baseline", scenario: "uncontended", rows: allRows, metric: mUP50, ref: refBaseline, le: true, limit: 1.1, detail: withFloor(mUP50)},
		{name: "uncontended client+server CPU per pair ≤ 1.1× baseline", scenario: "uncontended", rows: allRows, metric: mUCPU, ref: refBaseline, le: true, limit: 1.1, detail: withFloor(mUCPU)},
		{name: "PUBLISH/SPUBLISH per uncontended pair = 0 (every round)", scenario: "uncontended", rows: allRows, metric: mUPublish, pick: worstMax, le: true, limit: 0},
		{name: "hot key: server-side commands per acquisition ≤ 12 (inside scripts counted)", scenario: "hotkey", rows: allRows, metric: mHCmds, le: true, limit: 12},
		{name: "hot key: client commands per acquisition ≤ 8 (MONITOR pass)", scenario: "hotkey", rows: allRows, metric: mHClient, le: true, limit: 8},
		{name: "hot key: handoff gap p50 ≤ 0.5× rueidislock tuned", scenario: "hotkey", rows: allRows, metric: mHHandoff, ref: refRueidis, le: true, limit: 0.5},
		{name: "ping-pong: handoff p50 ≤ 0.5× rueidislock tuned", scenario: "pingpong", rows: allRows, metric: mPP50, ref: refRueidis, le: true, limit: 0.5},
		{name: "hot key: critical sections/s ≥ 1.25× best peer", scenario: "hotkey", rows: allRows, metric: mHCS, ref: refBestPeer, limit: 1.25},
		{name: "default: re-grab ≤ 20%", scenario: "hotkey", rows: plainRows, metric: mHRegrab, le: true, limit: 20},
		{name: "fair: re-grab 0% (every round)", scenario: "hotkey", rows: fairRows, metric: mHRegrab, pick: worstMax, le: true, limit: 0},
		{name: "fair: min/max acquisitions ≥ 0.8 (every round)", scenario: "hotkey", rows: fairRows, metric: mHMinMax, pick: worstMin, limit: 0.8},
		{name: "crash recovery p50 ≤ 5ms after lease expiry", scenario: "crash", rows: allRows, metric: mCrash, le: true, limit: 5},
		{name: "deadline churn: acquisitions/s ≥ 1.0× best peer", scenario: "churn", rows: allRows, metric: mChAcq, ref: refBestPeer, limit: 1.0},
		{name: "deadline churn: 0 overlaps (all rounds)", scenario: "churn", rows: allRows, metric: mChOverlap, pick: total, le: true, limit: 0},
		{name: "deadline churn: 0 error-contract violations (all rounds)", scenario: "churn", rows: allRows, metric: mChBroken, pick: total, le: true, limit: 0},
		{name: "deadline churn: 0 leases or lines left after the settle (all rounds)", scenario: "churn", rows: allRows, metric: mChKeysTTL, pick: total, le: true, limit: 0},
	}
}

func (rep *report) judge() {
	hasPeer := false
	for _, r := range rep.Rows {
		hasPeer = hasPeer || r.Peer
	}
	for _, g := range goals() {
		// A target is left out when its scenario or its reference row was not
		// part of this run (-scenarios, -only), never when a run failed.
		if !rep.bench.scenarios[g.scenario] ||
			(g.ref == refRueidis && rep.find("rueidislock", "tuned") == nil) ||
			(g.ref == refBestPeer && !hasPeer) {
			continue
		}
		for _, r := range rep.Rows {
			if !r.isDistlock() || !g.rows(r) {
				continue
			}
			rep.Targets = append(rep.Targets, g.judge(rep, r))
		}
	}
}

func (g goal) judge(rep *report, r *result) target {
	t := target{Name: g.name, Row: r.name(), Limit: g.limit}
	var s *spread
	if g.ref != "" {
		if rs := r.ratio(g.metric, g.ref); rs != nil {
			s = &rs.spread
		}
	} else {
		s = r.stat(g.metric)
	}
	if s == nil {
		t.Shown = "not measured"
		if e, ok := r.Errors[g.scenario]; ok {
			t.Detail = "scenario failed: " + e
		}
		return t
	}
	t.Spread, t.Measured = s, true
	switch g.pick {
	case median:
		t.Value = s.Median
	case worstMax:
		t.Value = s.Max
	case worstMin:
		t.Value = s.Min
	case total:
		t.Value = s.Sum
	}
	t.Met = (g.le && t.Value <= g.limit) || (!g.le && t.Value >= g.limit)
	t.Shown = showStat(s, g.pick, g.ref != "")
	if g.detail != nil {
		t.Detail = g.detail(rep, r)
	}
	return t
}

// showStat prints the judged figure with its spread: "1.25× [1.10–1.40] n=9"
// (the median and interquartile range of per-round values).
func showStat(s *spread, p pick, isRatio bool) string {
	x := ""
	if isRatio {
		x = "×"
	}
	switch p {
	case worstMax:
		return fmt.Sprintf("max %s%s over %d rounds (median %s)", num(s.Max), x, s.N, num(s.Median))
	case worstMin:
		return fmt.Sprintf("min %s%s over %d rounds (median %s)", num(s.Min), x, s.N, num(s.Median))
	case total:
		return fmt.Sprintf("%.0f in %d rounds", s.Sum, s.N)
	}
	if s.N == 1 {
		return fmt.Sprintf("%s%s (1 round)", num(s.Median), x)
	}
	return fmt.Sprintf("%s%s [%s–%s] n=%d", num(s.Median), x, num(s.P25), num(s.P75), s.N)
}

// num prints a figure with about three significant digits.
func num(v float64) string {
	switch a := max(v, -v); {
	case a == 0:
		return "0"
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}
