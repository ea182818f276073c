package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/redis/go-redis/v9"
)

// flushCount is how many FLUSHALLs rdb's server has run: before every
// contender's run the bench flushes, so it is that run's position.
func flushCount(t *testing.T, rdb redis.UniversalClient) int64 {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Errorf("INFO: %v", err)
		return -1
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_flushall:"); ok {
			var n int64
			fmt.Sscanf(v, "calls=%d", &n)
			return n
		}
	}
	return 0
}

// docs/benchmarks.md (Method): "A round runs every contender once, one after
// the other ... and each round starts one contender later so that no row
// always runs first." The quorum scenario ran distlock first in every round.
func TestQuorumRoundsRotate(t *testing.T) {
	orig := newQuorum
	t.Cleanup(func() { newQuorum = orig })
	var (
		mu  sync.Mutex
		pos []int64
	)
	newQuorum = func(rdbs []redis.UniversalClient) *distlock.Client {
		n := flushCount(t, rdbs[0])
		mu.Lock()
		pos = append(pos, n)
		mu.Unlock()
		return orig(rdbs)
	}
	cfg := config{slowRounds: 3, quorumN: 20, scenarios: map[string]bool{"quorum": true}}
	rep := newReport(nil, cfg)
	if err := runQuorumScenario(cfg, rep); err != nil {
		t.Fatal(err)
	}
	for _, q := range rep.Quorum {
		if len(q.Errors) > 0 {
			t.Fatalf("%s: %v", q.Lib, q.Errors)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(pos) != cfg.slowRounds {
		t.Fatalf("distlock ran %d times, want %d", len(pos), cfg.slowRounds)
	}
	// Two contenders per round, one FLUSHALL on each server before each run:
	// an odd count is the first run of a round.
	first := 0
	for _, p := range pos {
		if p%2 == 1 {
			first++
		}
	}
	if first == len(pos) {
		t.Errorf("quorum: distlock ran first in all %d rounds (its runs were contender runs #%v); the rounds are not rotated", len(pos), pos)
	}
}
