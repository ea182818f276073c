package main

import (
	"context"
	"os"
	"testing"
	"time"
)

// noNXLocker is a broken lock on a real Redis: SET without NX, so every
// caller takes the key at once, holders overlap, and a release finds its
// token overwritten ("not held"), the error a lock that breaks mutual
// exclusion typically shows.
type noNXLocker struct{ baselineLocker }

func openNoNX(addrs []string, ttl time.Duration) (locker, error) {
	return &noNXLocker{baselineLocker{rdb: goredisClient(addrs[0]), ttl: ttl}}, nil
}

func (l *noNXLocker) lock(ctx context.Context, key string) (func(context.Context) error, error) {
	token := newToken()
	if err := l.rdb.Do(ctx, "SET", key, token, "PX", l.ttl.Milliseconds()).Err(); err != nil {
		return nil, err
	}
	return casRelease("no-nx", baselineRelease, l.rdb, []string{key}, token), nil
}

// docs/benchmarks.md: "The exit status is 1 when mutual exclusion was broken
// in any row (peers included)", and a peer's error is only a finding. A hot
// key round whose lock both overlapped holders and then failed a release
// returned the error alone: the violations it had counted were dropped, so
// a broken peer row was reported as an error, not EXCLUSION VIOLATED, and the
// run exited 0.
func TestHotKeyViolationsSurviveRoundError(t *testing.T) {
	addrs, stop, err := servers(1)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	ad := newAdmin(addrs[0])
	defer ad.rdb.Close()
	c := noNX
	cfg := config{hotN: 8, hotHold: 200 * time.Microsecond, hotDur: 300 * time.Millisecond, monitorDur: 300 * time.Millisecond,
		scenarios: map[string]bool{"hotkey": true}}
	rep := newReport([]contender{c}, cfg)
	r := rep.row(c)
	if err := measureHot(cfg, addrs, ad)(c, r, 1); err == nil {
		t.Fatal("the broken lock's round reported no error: the test does not exercise the error path")
	}
	if r.Violations == 0 {
		t.Errorf("hot key: a round that broke mutual exclusion and failed recorded 0 violations")
	}
	before := r.Violations
	monitorPass(cfg, []contender{c}, rep, addrs, ad)
	if r.Errors["hotkey"] == "" {
		t.Fatal("the broken lock's MONITOR pass reported no error: the test does not exercise the error path")
	}
	if r.Violations == before {
		t.Errorf("hot key MONITOR pass: a pass that broke mutual exclusion and failed recorded no violations (%s)", r.Errors["hotkey"])
	}
	if len(rep.broken()) == 0 {
		t.Errorf("report.broken() is empty: the run would exit 0 for a row that broke mutual exclusion")
	}
}

// TestMain runs the re-executed test binary as the bench's child process
// (ping-pong, crash), with the test-only rows known to it.
func TestMain(m *testing.M) {
	testContenders = []contender{noNX}
	if len(os.Args) > 1 && os.Args[1] == "-child" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

var noNX = contender{lib: "no-nx", cfg: "broken", peer: true, open: openNoNX}

// As the hot key: a ping-pong round whose lock let both processes hold at
// once failed on the release that found its token overwritten, and the
// overlap was never counted (both sides' holds were compared only after a
// clean round).
func TestPingPongViolationsSurviveRoundError(t *testing.T) {
	addrs, stop, err := servers(1)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	ad := newAdmin(addrs[0])
	defer ad.rdb.Close()
	cfg := config{pingDur: 300 * time.Millisecond, scenarios: map[string]bool{"pingpong": true}}
	rep := newReport([]contender{noNX}, cfg)
	r := rep.row(noNX)
	err = measurePing(cfg, addrs, ad)(noNX, r, 1)
	if err == nil {
		t.Fatal("the broken lock's round reported no error: the test does not exercise the error path")
	}
	if r.Violations == 0 {
		t.Errorf("ping-pong: a round that let both processes hold at once and failed (%v) recorded 0 violations", err)
	}
}
