package main

import (
	"crypto/rand"
	"encoding/hex"
	"slices"
	"time"
)

func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// pct returns the p-th percentile (0..100) of d by nearest rank; 0 if empty.
func pct(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(p/100*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func maxDur(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return slices.Max(d)
}

// us is a duration in microseconds for reports.
func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

// spread summarizes one value per round. The interquartile range (P25–P75,
// linear interpolation between ranks) is what the tables and the chart show:
// on a shared 2-core machine one round in nine can be 3× off, and min–max
// would report that round rather than the run. Min, Max and Sum are kept for
// counters (violations are summed) and for the JSON.
type spread struct {
	N      int     `json:"n"`
	Median float64 `json:"median"`
	P25    float64 `json:"p25"`
	P75    float64 `json:"p75"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	Sum    float64 `json:"sum"`
}

func summarize(xs []float64) *spread {
	if len(xs) == 0 {
		return nil
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	sp := &spread{N: len(s), Median: quantile(s, 0.5), P25: quantile(s, 0.25), P75: quantile(s, 0.75), Min: s[0], Max: s[len(s)-1]}
	for _, x := range s {
		sp.Sum += x
	}
	return sp
}

// quantile of sorted s by linear interpolation between closest ranks (the
// usual "type 7"): the median of an even count is the mean of the middle two.
func quantile(s []float64, q float64) float64 {
	pos := q * float64(len(s)-1)
	i := int(pos)
	if i >= len(s)-1 {
		return s[len(s)-1]
	}
	return s[i] + (pos-float64(i))*(s[i+1]-s[i])
}
