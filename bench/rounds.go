package main

import "slices"

// metrics holds one value per round for each metric of a row. Rounds are
// interleaved (every contender runs once per round, one after another), so
// a ratio taken inside one round compares runs that saw the same machine
// load; the tables report the median of those per-round ratios.
type metrics map[string]map[int]float64

func (m metrics) put(name string, round int, v float64) {
	if m[name] == nil {
		m[name] = map[int]float64{}
	}
	m[name][round] = v
}

func (m metrics) get(name string, round int) (float64, bool) {
	v, ok := m[name][round]
	return v, ok
}

// rounds returns the rounds that have a value for name, in order.
func (m metrics) rounds(name string) []int {
	var rs []int
	for r := range m[name] {
		rs = append(rs, r)
	}
	slices.Sort(rs)
	return rs
}

func (m metrics) values(name string) []float64 {
	var vs []float64
	for _, r := range m.rounds(name) {
		vs = append(vs, m[name][r])
	}
	return vs
}

// reference gives the value a row is compared with in one round.
type reference struct {
	name string
	at   func(metric string, round int) (float64, bool)
}

// ratioOver returns one ratio per round in which both the row and the
// reference have a (non-zero) value.
func ratioOver(m metrics, name string, ref reference) []float64 {
	var out []float64
	for _, r := range m.rounds(name) {
		v, _ := m.get(name, r)
		rv, ok := ref.at(name, r)
		if ok && rv != 0 {
			out = append(out, v/rv)
		}
	}
	return out
}

// ratioStat is the median of per-round ratios to a reference, with spread.
type ratioStat struct {
	To string `json:"to"`
	spread
}
