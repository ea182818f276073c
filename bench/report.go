package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// result is one contender's row; exported fields go to results.json.
type result struct {
	Lib         string            `json:"lib"`
	Cfg         string            `json:"cfg"`
	Desc        string            `json:"desc"`
	Peer        bool              `json:"peer"`
	Violations  int64             `json:"mutual_exclusion_violations"`
	Errors      map[string]string `json:"errors,omitempty"`
	Uncontended *latency          `json:"uncontended,omitempty"`
	Distinct    *distinctStats    `json:"distinct_keys,omitempty"`
	Hot         *hotStats         `json:"hot_key,omitempty"`
	PingPong    *latency          `json:"ping_pong,omitempty"`
	Crash       *latency          `json:"crash_recovery,omitempty"`

	uncontended             []time.Duration
	distinctOps             int64
	distinctDur             time.Duration
	hot                     []*hotRound
	monitorCmds, monitorAcq int64
	ping                    []time.Duration
	pingDropped             int
	crash                   []time.Duration
}

type latency struct {
	N       int     `json:"n"`
	P50us   float64 `json:"p50_us"`
	P99us   float64 `json:"p99_us"`
	MaxUs   float64 `json:"max_us"`
	Ratio   float64 `json:"p50_ratio,omitempty"` // to the reference named in RatioTo
	RatioTo string  `json:"p50_ratio_to,omitempty"`
	Dropped int     `json:"dropped,omitempty"`
}

type distinctStats struct {
	OpsPerSec float64 `json:"ops_per_sec"`
	Ratio     float64 `json:"ratio_to_baseline"`
}

type hotStats struct {
	Acquisitions  int     `json:"acquisitions"`
	CSPerSec      float64 `json:"critical_sections_per_sec"`
	RatioBestPeer float64 `json:"ratio_to_best_peer"`
	GapP50us      float64 `json:"gap_p50_us"`
	GapP99us      float64 `json:"gap_p99_us"`
	HandoffP50us  float64 `json:"handoff_gap_p50_us"`
	CallsPerAcq   float64 `json:"redis_calls_per_acq_incl_scripts"`
	CmdsPerAcq    float64 `json:"client_cmds_per_acq"`
	RegrabPct     float64 `json:"regrab_pct"`
	MinAcq        int     `json:"min_acq_per_contender"`
	MaxAcq        int     `json:"max_acq_per_contender"`
	MinMax        float64 `json:"min_over_max"`
	WorstWaitMs   float64 `json:"worst_wait_ms"`
}

type quorumResult struct {
	Lib        string   `json:"lib"`
	Desc       string   `json:"desc"`
	Violations int64    `json:"mutual_exclusion_violations"`
	Errors     []string `json:"errors,omitempty"`
	Latency    *latency `json:"acquire_release,omitempty"`
	lat        []time.Duration
}

type target struct {
	Name     string  `json:"name"`
	Row      string  `json:"row"`
	Value    float64 `json:"value"`
	Limit    float64 `json:"limit"`
	Met      bool    `json:"met"`
	Detail   string  `json:"detail"`
	Measured bool    `json:"measured"`
}

type report struct {
	Date    string          `json:"date"`
	Redis   string          `json:"redis_version"`
	Cores   int             `json:"cores"`
	Go      string          `json:"go"`
	Rounds  int             `json:"rounds"`
	Quick   bool            `json:"quick"`
	Elapsed string          `json:"elapsed"`
	Setup   map[string]any  `json:"setup"`
	Rows    []*result       `json:"rows"`
	Quorum  []*quorumResult `json:"quorum,omitempty"`
	Targets []target        `json:"targets"`
	Notes   []string        `json:"notes,omitempty"`
	bench   config
}

func newReport(cs []contender, cfg config) *report {
	r := &report{
		Date: time.Now().UTC().Format("2006-01-02 15:04 MST"), Cores: runtime.NumCPU(), Go: runtime.Version(),
		Rounds: cfg.rounds, Quick: cfg.quick, bench: cfg,
		Setup: map[string]any{
			"uncontended_ops_per_round": cfg.uncontendedN,
			"distinct_goroutines":       cfg.distinctWorkers,
			"distinct_round":            cfg.distinctDur.String(),
			"hot_contenders":            cfg.hotN,
			"hot_hold":                  cfg.hotHold.String(),
			"hot_round":                 cfg.hotDur.String(),
			"pingpong_round":            cfg.pingDur.String(),
			"pingpong_hold":             pingHold.String(),
			"crash_waiters":             cfg.crashWaiters,
			"crash_ttl":                 cfg.crashTTL.String(),
			"quorum_ops_per_round":      cfg.quorumN,
			"lease_ttl_other_scenarios": "10s",
			"tuned_retry_delay":         tunedDelay.String(),
		},
	}
	for _, c := range cs {
		r.Rows = append(r.Rows, &result{Lib: c.lib, Cfg: c.cfg, Desc: c.desc, Peer: c.peer})
	}
	return r
}

func (rep *report) row(c contender) *result {
	for _, r := range rep.Rows {
		if r.Lib == c.lib && r.Cfg == c.cfg {
			return r
		}
	}
	panic("bench: no row for " + c.name()) // rows are made from the same list
}

func (rep *report) quorumRow(c contender) *quorumResult {
	name := c.lib + " (5 nodes)"
	for _, q := range rep.Quorum {
		if q.Lib == name {
			return q
		}
	}
	desc := "distlock.NewQuorum(5 clients), Client.Lock"
	if c.lib == "redsync" {
		desc = "redsync.New(5 goredis v9 pools)"
	}
	q := &quorumResult{Lib: name, Desc: desc}
	rep.Quorum = append(rep.Quorum, q)
	return q
}

func (r *result) fail(scenario string, err error) {
	if r.Errors == nil {
		r.Errors = map[string]string{}
	}
	if _, dup := r.Errors[scenario]; !dup {
		r.Errors[scenario] = err.Error()
	}
	fmt.Fprintf(os.Stderr, "bench: %s %s %s: %v\n", r.Lib, r.Cfg, scenario, err)
}

func (r *result) name() string { return r.Lib + " " + r.Cfg }

func lat(d []time.Duration, dropped int) *latency {
	if len(d) == 0 {
		return nil
	}
	return &latency{N: len(d), P50us: us(pct(d, 50)), P99us: us(pct(d, 99)), MaxUs: us(maxDur(d)), Dropped: dropped}
}

func (rep *report) find(lib, cfg string) *result {
	for _, r := range rep.Rows {
		if r.Lib == lib && r.Cfg == cfg {
			return r
		}
	}
	return nil
}

// finish turns samples into statistics, ratios and target verdicts.
func (rep *report) finish() {
	for _, r := range rep.Rows {
		r.Uncontended = lat(r.uncontended, 0)
		if r.distinctDur > 0 {
			r.Distinct = &distinctStats{OpsPerSec: float64(r.distinctOps) / r.distinctDur.Seconds()}
		}
		r.PingPong = lat(r.ping, r.pingDropped)
		r.Crash = lat(r.crash, 0)
		if len(r.hot) > 0 {
			h := &hotStats{MinMax: math.Inf(1)}
			var gaps, handoffs []time.Duration
			var regrabs, pairs int
			var dur time.Duration
			var calls int64
			for _, hr := range r.hot {
				g, ho, rg := hr.gaps()
				gaps = append(gaps, g...)
				handoffs = append(handoffs, ho...)
				regrabs += rg
				pairs += len(g)
				h.Acquisitions += len(hr.grants)
				dur += hr.dur
				calls += hr.calls
				mn, mx := minMax(hr.counts)
				ratio := 0.0
				if mx > 0 {
					ratio = float64(mn) / float64(mx)
				}
				if ratio < h.MinMax {
					h.MinMax, h.MinAcq, h.MaxAcq = ratio, mn, mx
				}
				h.WorstWaitMs = max(h.WorstWaitMs, float64(hr.worstWait.Microseconds())/1e3)
			}
			h.CSPerSec = float64(h.Acquisitions) / dur.Seconds()
			h.GapP50us, h.GapP99us = us(pct(gaps, 50)), us(pct(gaps, 99))
			h.HandoffP50us = us(pct(handoffs, 50))
			if h.Acquisitions > 0 {
				h.CallsPerAcq = float64(calls) / float64(h.Acquisitions)
			}
			if r.monitorAcq > 0 {
				h.CmdsPerAcq = float64(r.monitorCmds) / float64(r.monitorAcq)
			}
			if pairs > 0 {
				h.RegrabPct = 100 * float64(regrabs) / float64(pairs)
			}
			r.Hot = h
		}
	}
	for _, q := range rep.Quorum {
		q.Latency = lat(q.lat, 0)
	}
	if len(rep.Quorum) == 2 && rep.Quorum[0].Latency != nil && rep.Quorum[1].Latency != nil {
		rep.Quorum[0].Latency.Ratio = rep.Quorum[0].Latency.P50us / rep.Quorum[1].Latency.P50us
		rep.Quorum[0].Latency.RatioTo = rep.Quorum[1].Lib
	}

	// Ratios side by side.
	base := rep.find("baseline", "1ms")
	rueTuned := rep.find("rueidislock", "tuned")
	var bestPeer *result
	for _, r := range rep.Rows {
		if r.Peer && r.Hot != nil && (bestPeer == nil || r.Hot.CSPerSec > bestPeer.Hot.CSPerSec) {
			bestPeer = r
		}
	}
	for _, r := range rep.Rows {
		if base != nil && base.Uncontended != nil && r.Uncontended != nil {
			r.Uncontended.Ratio, r.Uncontended.RatioTo = r.Uncontended.P50us/base.Uncontended.P50us, "baseline"
		}
		if base != nil && base.Distinct != nil && r.Distinct != nil {
			r.Distinct.Ratio = r.Distinct.OpsPerSec / base.Distinct.OpsPerSec
		}
		if bestPeer != nil && r.Hot != nil {
			r.Hot.RatioBestPeer = r.Hot.CSPerSec / bestPeer.Hot.CSPerSec
		}
		if rueTuned != nil && rueTuned.PingPong != nil && r.PingPong != nil {
			r.PingPong.Ratio, r.PingPong.RatioTo = r.PingPong.P50us/rueTuned.PingPong.P50us, "rueidislock tuned"
		}
	}
	rep.targets(bestPeer, rueTuned)
}

func (rep *report) targets(bestPeer, rueTuned *result) {
	add := func(name, row string, value, limit float64, le bool, detail string, measured bool) {
		met := measured && ((le && value <= limit) || (!le && value >= limit))
		rep.Targets = append(rep.Targets, target{Name: name, Row: row, Value: value, Limit: limit, Met: met, Detail: detail, Measured: measured})
	}
	for _, lib := range []string{"distlock", "distlock-fair"} {
		for _, cfg := range []string{"default", "tuned"} {
			r := rep.find(lib, cfg)
			if r == nil {
				continue
			}
			n := r.name()
			if rueTuned != nil && r.PingPong != nil && rueTuned.PingPong != nil {
				add("ping-pong handoff p50 ≤ 0.5× rueidislock tuned", n, r.PingPong.Ratio, 0.5, true,
					fmt.Sprintf("%.0fµs vs %.0fµs", r.PingPong.P50us, rueTuned.PingPong.P50us), true)
			}
			if r.Hot != nil && rueTuned != nil && rueTuned.Hot != nil && rueTuned.Hot.HandoffP50us > 0 {
				add("hot-key handoff gap p50 ≤ 0.5× rueidislock tuned", n, r.Hot.HandoffP50us/rueTuned.Hot.HandoffP50us, 0.5, true,
					fmt.Sprintf("%.0fµs vs %.0fµs", r.Hot.HandoffP50us, rueTuned.Hot.HandoffP50us), true)
			}
			if r.Hot != nil && bestPeer != nil {
				add("hot-key CS/s ≥ 1.25× best peer", n, r.Hot.RatioBestPeer, 1.25, false,
					fmt.Sprintf("%.0f vs %.0f (%s)", r.Hot.CSPerSec, bestPeer.Hot.CSPerSec, bestPeer.name()), true)
			}
			if r.Hot != nil {
				add("client commands per contended acquisition ≤ 8", n, r.Hot.CmdsPerAcq, 8, true,
					fmt.Sprintf("%.1f client cmds (%.1f calls incl. inside scripts)", r.Hot.CmdsPerAcq, r.Hot.CallsPerAcq), r.Hot.CmdsPerAcq > 0)
				if lib == "distlock-fair" {
					add("fair: re-grab 0%", n, r.Hot.RegrabPct, 0, true, fmt.Sprintf("%.1f%%", r.Hot.RegrabPct), true)
					add("fair: min/max acquisitions ≥ 0.8", n, r.Hot.MinMax, 0.8, false, fmt.Sprintf("%d/%d (worst round)", r.Hot.MinAcq, r.Hot.MaxAcq), true)
				} else {
					add("default: re-grab ≤ 20%", n, r.Hot.RegrabPct, 20, true, fmt.Sprintf("%.1f%%", r.Hot.RegrabPct), true)
				}
			}
			if r.Crash != nil {
				add("crash recovery p50 ≤ 5ms after expiry", n, r.Crash.P50us/1e3, 5, true,
					fmt.Sprintf("p50 %.1fms, max %.1fms over %d kills", r.Crash.P50us/1e3, r.Crash.MaxUs/1e3, r.Crash.N), true)
			}
			if r.Uncontended != nil && r.Uncontended.Ratio > 0 {
				add("uncontended p50 ≤ 1.1× baseline", n, r.Uncontended.Ratio, 1.1, true,
					fmt.Sprintf("%.0fµs vs %.0fµs", r.Uncontended.P50us, r.Uncontended.P50us/r.Uncontended.Ratio), true)
			}
		}
	}
}

func (rep *report) broken() []string {
	var bad []string
	for _, r := range rep.Rows {
		if r.Violations > 0 {
			bad = append(bad, fmt.Sprintf("%s (%d)", r.name(), r.Violations))
		}
	}
	for _, q := range rep.Quorum {
		if q.Violations > 0 {
			bad = append(bad, fmt.Sprintf("%s (%d)", q.Lib, q.Violations))
		}
	}
	return bad
}

// failed lists distlock and baseline rows with errors; a peer's error (such
// as a waiter that never woke) is a finding reported in the table, not a
// failure of the bench.
func (rep *report) failed() []string {
	var bad []string
	for _, r := range rep.Rows {
		if len(r.Errors) > 0 && !r.Peer {
			bad = append(bad, r.name())
		}
	}
	for _, q := range rep.Quorum {
		if len(q.Errors) > 0 && strings.HasPrefix(q.Lib, "distlock") {
			bad = append(bad, q.Lib)
		}
	}
	return bad
}

func f0(v float64) string {
	if v == 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f", v)
}

func ratio(v float64) string {
	if v == 0 {
		return ""
	}
	return fmt.Sprintf(" (%.2f×)", v)
}

func (rep *report) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n### Results (%s, Redis %s, %d cores, %s, %d round(s)%s, %s)\n\n",
		rep.Date, rep.Redis, rep.Cores, rep.Go, rep.Rounds, map[bool]string{true: ", -quick", false: ""}[rep.Quick], rep.Elapsed)
	b.WriteString("| row | uncontended p50 µs (× baseline) | p99 µs | 32 keys ops/s (× baseline) | hot key CS/s (× best peer) | gap p50 / p99 µs | handoff gap p50 µs | client cmds / acq | re-grab | min/max acq | worst wait ms | ping-pong p50 µs (× rueidislock tuned) | p99 µs | crash: expiry→acquire p50 / max ms |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rep.Rows {
		if r.Uncontended == nil && r.Distinct == nil && r.Hot == nil && r.PingPong == nil && r.Crash == nil {
			continue // scenarios not selected
		}
		name := r.name()
		if r.Violations > 0 {
			name = "**EXCLUSION VIOLATED** " + name
		}
		cells := []string{name}
		if u := r.Uncontended; u != nil {
			cells = append(cells, f0(u.P50us)+ratio(u.Ratio), f0(u.P99us))
		} else {
			cells = append(cells, "–", "–")
		}
		if d := r.Distinct; d != nil {
			cells = append(cells, f0(d.OpsPerSec)+ratio(d.Ratio))
		} else {
			cells = append(cells, "–")
		}
		if h := r.Hot; h != nil {
			cells = append(cells, f0(h.CSPerSec)+ratio(h.RatioBestPeer),
				f0(h.GapP50us)+" / "+f0(h.GapP99us),
				f0(h.HandoffP50us),
				fmt.Sprintf("%.1f (%.1f)", h.CmdsPerAcq, h.CallsPerAcq),
				fmt.Sprintf("%.0f%%", h.RegrabPct),
				fmt.Sprintf("%d/%d", h.MinAcq, h.MaxAcq),
				fmt.Sprintf("%.0f", h.WorstWaitMs))
		} else {
			cells = append(cells, "–", "–", "–", "–", "–", "–", "–")
		}
		if p := r.PingPong; p != nil {
			cells = append(cells, f0(p.P50us)+ratio(p.Ratio), f0(p.P99us))
		} else {
			cells = append(cells, "–", "–")
		}
		if c := r.Crash; c != nil {
			cells = append(cells, fmt.Sprintf("%.1f / %.1f", c.P50us/1e3, c.MaxUs/1e3))
		} else {
			cells = append(cells, "–")
		}
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
	b.WriteString("\nclient cmds / acq: commands clients sent per hot-key acquisition, counted with MONITOR in a separate untimed pass; in brackets all Redis calls including those inside scripts (INFO commandstats, timed rounds). min/max acq: fewest/most acquisitions of one of the 16 contenders in the least fair round. Gap: from the holder calling Release to the next holder's Lock returning (all grants; handoff gap: only grants to another contender). Crash: from the dead holder's lease expiry (PEXPIRETIME, ms resolution; Redis treats a key as expired only after that millisecond) to the first waiter's Lock returning.\n")
	if len(rep.Quorum) > 0 {
		b.WriteString("\n| quorum row (5 redis-servers) | acquire+release p50 µs | p99 µs |\n|---|---|---|\n")
		for _, q := range rep.Quorum {
			if q.Latency == nil {
				fmt.Fprintf(&b, "| %s | error | %s |\n", q.Lib, strings.Join(q.Errors, "; "))
				continue
			}
			r := ""
			if q.Latency.Ratio > 0 {
				r = fmt.Sprintf(" (%.2f× %s)", q.Latency.Ratio, q.Latency.RatioTo)
			}
			fmt.Fprintf(&b, "| %s | %s%s | %s |\n", q.Lib, f0(q.Latency.P50us), r, f0(q.Latency.P99us))
		}
	}
	if len(rep.Targets) > 0 {
		b.WriteString("\n| target | row | measured | met |\n|---|---|---|---|\n")
		for _, t := range rep.Targets {
			v := fmt.Sprintf("%.2f", t.Value)
			if !t.Measured {
				v = "not measured"
			}
			met := map[bool]string{true: "yes", false: "**no**"}[t.Met]
			fmt.Fprintf(&b, "| %s | %s | %s — %s | %s |\n", t.Name, t.Row, v, t.Detail, met)
		}
	}
	for _, r := range rep.Rows {
		for s, e := range r.Errors {
			fmt.Fprintf(&b, "\nerror: %s %s: %s\n", r.name(), s, e)
		}
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(&b, "\nnote: %s\n", n)
	}
	return b.String()
}

func (rep *report) write(dir string) error {
	j, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(j, '\n'), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "results.md"), []byte(rep.markdown()), 0o644)
}
