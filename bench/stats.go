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
