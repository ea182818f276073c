package main

import (
	"math"
	"slices"
	"testing"
	"time"
)

// The statistics behind every table and verdict, checked without Redis.

func TestQuantileType7(t *testing.T) {
	s := []float64{1, 2, 3, 4}
	for _, c := range []struct{ q, want float64 }{
		{0, 1}, {0.25, 1.75}, {0.5, 2.5}, {0.75, 3.25}, {1, 4},
	} {
		if got := quantile(s, c.q); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("quantile(%v, %v) = %v, want %v", s, c.q, got, c.want)
		}
	}
	if got := quantile([]float64{7}, 0.5); got != 7 {
		t.Errorf("quantile of one value = %v, want 7", got)
	}
}

func TestSummarize(t *testing.T) {
	if summarize(nil) != nil {
		t.Fatal("summarize(nil) is not nil")
	}
	in := []float64{5, 1, 4, 2, 3}
	sp := summarize(in)
	want := spread{N: 5, Median: 3, P25: 2, P75: 4, Min: 1, Max: 5, Sum: 15}
	if *sp != want {
		t.Errorf("summarize(%v) = %+v, want %+v", in, *sp, want)
	}
	if !slices.Equal(in, []float64{5, 1, 4, 2, 3}) {
		t.Errorf("summarize sorted its input in place: %v", in)
	}
}

func TestPctNearestRank(t *testing.T) {
	var d []time.Duration
	for i := 100; i >= 1; i-- { // unsorted on purpose
		d = append(d, time.Duration(i))
	}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{50, 50}, {99, 99}, {100, 100}, {0, 1}, {1, 1}} {
		if got := pct(d, c.p); got != c.want {
			t.Errorf("pct(1..100, %v) = %v, want %v", c.p, got, c.want)
		}
	}
	if pct(nil, 50) != 0 {
		t.Error("pct of nothing is not 0")
	}
	if d[0] != 100 {
		t.Error("pct sorted its input in place")
	}
}

// The ratios are taken round by round, between values of the same round;
// a round the reference lacks (it failed) gives no ratio rather than one
// against another round.
func TestRatioOverPairsRounds(t *testing.T) {
	row, ref := metrics{}, metrics{}
	row.put("x", 1, 10)
	row.put("x", 2, 30)
	row.put("x", 3, 50)
	ref.put("x", 1, 5)
	ref.put("x", 3, 25) // round 2 of the reference failed
	ref.put("x", 4, 1)  // the row failed round 4
	got := ratioOver(row, "x", reference{name: "ref", at: ref.get})
	if !slices.Equal(got, []float64{2, 2}) {
		t.Errorf("ratioOver = %v, want [2 2] (rounds 1 and 3)", got)
	}
}

func TestBestPeerPerRound(t *testing.T) {
	rep := &report{}
	for _, p := range []struct {
		peer bool
		r1   float64
		r2   float64
	}{{false, 100, 100}, {true, 10, 30}, {true, 20, 5}} {
		r := &result{Peer: p.peer, m: metrics{}}
		r.m.put("x", 1, p.r1)
		r.m.put("x", 2, p.r2)
		rep.Rows = append(rep.Rows, r)
	}
	hi, lo := rep.bestPeer(true), rep.bestPeer(false)
	for _, c := range []struct {
		ref   reference
		round int
		want  float64
	}{{hi, 1, 20}, {hi, 2, 30}, {lo, 1, 10}, {lo, 2, 5}} {
		if v, ok := c.ref.at("x", c.round); !ok || v != c.want {
			t.Errorf("best peer round %d = %v %v, want %v (distlock rows are no peers)", c.round, v, ok, c.want)
		}
	}
	if _, ok := hi.at("x", 3); ok {
		t.Error("best peer of a round no peer ran reported a value")
	}
}

// Each round starts one contender later, every row starts a round once in
// len(cs) rounds, and the list the rounds are cut from is left alone.
func TestRotatedStartsEachRowOnce(t *testing.T) {
	cs := []contender{{lib: "a"}, {lib: "b"}, {lib: "c"}, {lib: "d"}}
	orig := slices.Clone(cs)
	firsts := map[string]int{}
	for round := 1; round <= 2*len(cs); round++ {
		o := rotated(cs, round)
		if len(o) != len(cs) {
			t.Fatalf("round %d: %d contenders, want %d", round, len(o), len(cs))
		}
		seen := map[string]bool{}
		for _, c := range o {
			seen[c.lib] = true
		}
		if len(seen) != len(cs) {
			t.Fatalf("round %d order %v is not a permutation", round, o)
		}
		firsts[o[0].lib]++
	}
	for _, c := range cs {
		if firsts[c.lib] != 2 {
			t.Errorf("%s ran first in %d of %d rounds, want 2", c.lib, firsts[c.lib], 2*len(cs))
		}
	}
	if !slices.EqualFunc(cs, orig, func(a, b contender) bool { return a.lib == b.lib }) {
		t.Errorf("rotated changed its input: %v", cs)
	}
}

func TestHotGapsAndRegrabs(t *testing.T) {
	r := &hotRound{grants: []grant{
		{who: 0, got: 0, releaseCalled: 10},
		{who: 0, got: 12, releaseCalled: 20}, // re-grab, gap 2
		{who: 1, got: 25, releaseCalled: 30}, // handoff, gap 5
		{who: 2, got: 37, releaseCalled: 40}, // handoff, gap 7
	}}
	gaps, handoffs, regrabs := r.gaps()
	if !slices.Equal(gaps, []time.Duration{2, 5, 7}) || !slices.Equal(handoffs, []time.Duration{5, 7}) || regrabs != 1 {
		t.Errorf("gaps %v handoffs %v regrabs %d, want [2 5 7] [5 7] 1", gaps, handoffs, regrabs)
	}
}

// A verdict judges the figure its target names, and a row without one is
// not measured and not met.
func TestGoalJudgePicks(t *testing.T) {
	r := &result{Lib: "distlock", Cfg: "default", m: metrics{}, Errors: map[string]string{"hotkey": "boom"}}
	for round, v := range []float64{3, 1, 2, 0, 9} {
		r.m.put("x", round+1, v)
	}
	r.Metrics = map[string]*spread{"x": summarize(r.m.values("x"))}
	for _, c := range []struct {
		p    pick
		le   bool
		lim  float64
		want float64
		met  bool
	}{
		{median, true, 2, 2, true},
		{worstMax, true, 8, 9, false},
		{worstMin, false, 0, 0, true},
		{total, true, 15, 15, true},
		{median, false, 2.5, 2, false},
	} {
		tg := goal{name: "g", scenario: "s", metric: "x", pick: c.p, le: c.le, limit: c.lim}.judge(&report{}, r)
		if !tg.Measured || tg.Value != c.want || tg.Met != c.met {
			t.Errorf("pick %d: value %v met %v measured %v, want %v %v true", c.p, tg.Value, tg.Met, tg.Measured, c.want, c.met)
		}
	}
	tg := goal{name: "g", scenario: "hotkey", metric: "missing", le: true, limit: 1}.judge(&report{}, r)
	if tg.Measured || tg.Met || tg.Detail != "scenario failed: boom" {
		t.Errorf("a row without the figure: %+v, want not measured, not met, its error in the detail", tg)
	}
}

func TestPerOpAndPut(t *testing.T) {
	r := &result{m: metrics{}}
	r.put("x", 1, perOp(time.Millisecond, 0)) // no operations: undefined, not 0
	r.put("x", 2, math.Inf(1))
	if len(r.m.rounds("x")) != 0 {
		t.Errorf("an undefined per-operation figure was recorded: %v", r.m["x"])
	}
	if got := perOp(time.Millisecond, 4); got != 250 {
		t.Errorf("perOp(1ms, 4) = %v µs, want 250", got)
	}
}

// docs/benchmarks.md: in the uncontended round "each slice starting with
// the next contender (so that no row always runs first, or always right
// after the same row)". Starting each slice one contender later keeps the
// cyclic order, so every row ran right after the same row in every slice it
// did not start (with 12 rows and 10 slices, two rows of each round in all
// of them).
func TestSliceTurnsVaryLeaderAndPredecessor(t *testing.T) {
	const slices = 10
	for n := 2; n <= 12; n++ {
		leads := map[int]int{}
		before := map[int]map[int]bool{}
		for s := 0; s < slices; s++ {
			seen := map[int]bool{}
			prev := -1
			for k := 0; k < n; k++ {
				i := turn(k, s, n)
				if i < 0 || i >= n || seen[i] {
					t.Fatalf("n=%d slice %d: turn %d gives %d, not a permutation", n, s, k, i)
				}
				seen[i] = true
				if k == 0 {
					leads[i]++
				} else {
					if before[i] == nil {
						before[i] = map[int]bool{}
					}
					before[i][prev] = true
				}
				prev = i
			}
		}
		if len(leads) != min(n, slices) {
			t.Errorf("n=%d: %d rows started a slice, want %d", n, len(leads), min(n, slices))
		}
		if n < 3 {
			continue // two rows: the other is the only one to follow
		}
		for i := 0; i < n; i++ {
			if len(before[i]) < 2 {
				t.Errorf("n=%d: row %d ran right after the same row in every slice it did not start (%v)", n, i, before[i])
			}
		}
	}
}
