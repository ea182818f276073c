package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// result is one contender's row; exported fields go to results.json.
type result struct {
	Lib        string            `json:"lib"`
	Cfg        string            `json:"cfg"`
	Desc       string            `json:"desc"`
	Peer       bool              `json:"peer"`
	Violations int64             `json:"mutual_exclusion_violations"`
	Errors     map[string]string `json:"errors,omitempty"`
	// Metrics: per-round values summarized (median, IQR, min, max, sum).
	Metrics map[string]*spread `json:"metrics,omitempty"`
	// Ratios: medians of per-round ratios, keyed metric + "/" + reference.
	Ratios map[string]*ratioStat `json:"ratios,omitempty"`
	// UncontendedCommands: server commands per uncontended pair, by name.
	UncontendedCommands map[string]float64 `json:"uncontended_server_cmds_per_pair_by_name,omitempty"`
	PingDropped         int                `json:"pingpong_samples_dropped,omitempty"`
	ChurnExamples       []string           `json:"churn_examples,omitempty"`

	m                       metrics
	contract                bool // the library has an error contract to check
	uCmds                   map[string]int64
	uPairs                  int64
	monitorCmds, monitorAcq int64
	worstMinMax             []int // fewest/most grants in the least fair hot-key round
	pingDropped             int
	exampleKinds            map[string]int
}

type quorumResult struct {
	Lib        string                `json:"lib"`
	Desc       string                `json:"desc"`
	Violations int64                 `json:"mutual_exclusion_violations"`
	Errors     []string              `json:"errors,omitempty"`
	Metrics    map[string]*spread    `json:"metrics,omitempty"`
	Ratios     map[string]*ratioStat `json:"ratios,omitempty"`
	m          metrics
}

type report struct {
	Date       string          `json:"date"`
	Redis      string          `json:"redis_version"`
	Cores      int             `json:"cores"`
	Go         string          `json:"go"`
	Rounds     int             `json:"rounds_headline"`
	UncRounds  int             `json:"rounds_uncontended"`
	SlowRounds int             `json:"rounds_other"`
	Quick      bool            `json:"quick"`
	Elapsed    string          `json:"elapsed"`
	Timings    []string        `json:"scenario_timings"`
	Setup      map[string]any  `json:"setup"`
	Rows       []*result       `json:"rows"`
	Quorum     []*quorumResult `json:"quorum,omitempty"`
	// Primitives: distlock's read hold, permit and leadership against its
	// own mutex (prim-uncontended, sem-throughput).
	Primitives []*result `json:"primitives,omitempty"`
	Targets    []target  `json:"targets"`
	Notes      []string  `json:"notes,omitempty"`
	bench      config
}

// uncontendedRounds is the uncontended scenarios' count of rounds; a
// results.json written before it had its own is read as the headline's.
func (r *report) uncontendedRounds() int {
	if r.UncRounds == 0 {
		return r.Rounds
	}
	return r.UncRounds
}

func newReport(cs []contender, cfg config) *report {
	r := &report{
		Date: time.Now().UTC().Format("2006-01-02 15:04 MST"), Cores: runtime.NumCPU(), Go: runtime.Version(),
		Rounds: cfg.rounds, UncRounds: cfg.uncontendedRounds, SlowRounds: cfg.slowRounds, Quick: cfg.quick, bench: cfg,
		Setup: map[string]any{
			"uncontended_pairs_per_round": cfg.uncontendedN,
			"distinct_goroutines":         cfg.distinctWorkers,
			"distinct_round":              cfg.distinctDur.String(),
			"hot_contenders":              cfg.hotN,
			"hot_hold":                    cfg.hotHold.String(),
			"hot_round":                   cfg.hotDur.String(),
			"pingpong_round":              cfg.pingDur.String(),
			"pingpong_hold":               pingHold.String(),
			"crash_waiters":               cfg.crashWaiters,
			"crash_ttl":                   cfg.crashTTL.String(),
			"quorum_pairs_per_round":      cfg.quorumN,
			"churn_clients":               cfg.churn.clients,
			"churn_goroutines_per_client": cfg.churn.goroutines,
			"churn_keys":                  cfg.churn.keys,
			"churn_deadlines":             cfg.churn.minDeadline.String() + "–" + cfg.churn.maxDeadline.String(),
			"churn_round":                 cfg.churn.dur.String(),
			"churn_settle":                cfg.churn.settle.String(),
			"lease_ttl_other_scenarios":   "10s",
			"tuned_retry_delay":           tunedDelay.String(),
			"sem_contenders":              cfg.sem.contenders,
			"sem_permits":                 semLimit,
			"sem_hold":                    cfg.sem.hold.String(),
			"sem_round":                   cfg.sem.dur.String(),
			"sem_slices":                  cfg.sem.slices,
			"spread":                      "p25–p75 of per-round values (linear interpolation); min/max in the JSON",
		},
	}
	for _, c := range cs {
		r.Rows = append(r.Rows, &result{Lib: c.lib, Cfg: c.cfg, Desc: c.desc, Peer: c.peer, m: metrics{}, contract: c.contract != nil})
	}
	return r
}

func (rep *report) row(c contender) *result {
	if r := rep.find(c.lib, c.cfg); r != nil {
		return r
	}
	panic("bench: no row for " + c.name()) // rows are made from the same list
}

func (rep *report) find(lib, cfg string) *result {
	for _, r := range rep.Rows {
		if r.Lib == lib && r.Cfg == cfg {
			return r
		}
	}
	return nil
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
	q := &quorumResult{Lib: name, Desc: desc, m: metrics{}}
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

// isDistlock: the rows the targets are about.
func (r *result) isDistlock() bool { return strings.HasPrefix(r.Lib, "distlock") }

func (r *result) stat(metric string) *spread { return r.Metrics[metric] }

func (r *result) ratio(metric, ref string) *ratioStat { return r.Ratios[metric+"/"+ref] }

// Reference names used in ratio keys.
const (
	refBaseline = "baseline"
	refBestPeer = "best peer"
	refRueidis  = "rueidislock tuned"
	refFloor    = "floor"
)

// finish summarizes every row's per-round values and takes the per-round
// ratios, then judges the targets.
func (rep *report) finish() {
	for _, r := range rep.Rows {
		r.Metrics = map[string]*spread{}
		for name := range r.m {
			r.Metrics[name] = summarize(r.m.values(name))
		}
		if r.monitorAcq > 0 {
			r.Metrics[mHClient] = summarize([]float64{float64(r.monitorCmds) / float64(r.monitorAcq)})
		}
		if r.uPairs > 0 {
			r.UncontendedCommands = map[string]float64{}
			for name, n := range r.uCmds {
				r.UncontendedCommands[name] = float64(n) / float64(r.uPairs)
			}
		}
		r.PingDropped = r.pingDropped
	}
	base := rep.rowRef(refBaseline, "baseline", "1ms")
	rue := rep.rowRef(refRueidis, "rueidislock", "tuned")
	floor := rep.rowRef(refFloor, "floor", "fenced")
	ratios := []struct {
		metric string
		ref    reference
	}{
		{mUP50, base}, {mUCPU, base}, {mUP50, floor}, {mUCPU, floor}, {mDOps, base},
		{mHCS, base}, {mHCS, rep.bestPeer(true)},
		{mHHandoff, base}, {mHHandoff, rue},
		{mPP50, rue},
		{mChAcq, base}, {mChAcq, rep.bestPeer(true)}, {mChCPU, base},
	}
	for _, r := range rep.Rows {
		r.Ratios = map[string]*ratioStat{}
		for _, x := range ratios {
			if sp := summarize(ratioOver(r.m, x.metric, x.ref)); sp != nil {
				r.Ratios[x.metric+"/"+x.ref.name] = &ratioStat{To: x.ref.name, spread: *sp}
			}
		}
	}
	for _, q := range rep.Quorum {
		q.Metrics = map[string]*spread{}
		for name := range q.m {
			q.Metrics[name] = summarize(q.m.values(name))
		}
	}
	if len(rep.Quorum) == 2 {
		ref := rep.Quorum[1]
		q := rep.Quorum[0]
		at := func(metric string, round int) (float64, bool) { return ref.m.get(metric, round) }
		if sp := summarize(ratioOver(q.m, mQP50, reference{name: ref.Lib, at: at})); sp != nil {
			q.Ratios = map[string]*ratioStat{mQP50 + "/" + ref.Lib: {To: ref.Lib, spread: *sp}}
		}
	}
	rep.finishPrimitives()
	rep.judge()
	rep.judgePrimitives()
}

// rowRef compares with one row's value in the same round.
func (rep *report) rowRef(name, lib, cfg string) reference {
	row := rep.find(lib, cfg)
	return reference{name: name, at: func(metric string, round int) (float64, bool) {
		if row == nil {
			return 0, false
		}
		return row.m.get(metric, round)
	}}
}

// bestPeer compares with the best peer row in the same round (highest value
// if higher is better, else lowest).
func (rep *report) bestPeer(higher bool) reference {
	return reference{name: refBestPeer, at: func(m string, round int) (float64, bool) {
		best, found := 0.0, false
		for _, r := range rep.Rows {
			if !r.Peer {
				continue
			}
			v, ok := r.m.get(m, round)
			if ok && (!found || (higher && v > best) || (!higher && v < best)) {
				best, found = v, true
			}
		}
		return best, found
	}}
}

// broken lists rows whose mutual exclusion failed, peers included.
func (rep *report) broken() []string {
	var bad []string
	for _, r := range rep.Rows {
		if r.Violations > 0 {
			bad = append(bad, fmt.Sprintf("%s (%d)", r.name(), r.Violations))
		}
	}
	for _, r := range rep.Primitives {
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
	for _, r := range rep.Primitives {
		if len(r.Errors) > 0 {
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

func (rep *report) write(dir string) error {
	j, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(j, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.md"), []byte(rep.markdown()), 0o644); err != nil {
		return err
	}
	if err := rep.writeChart(dir); err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	return nil
}
