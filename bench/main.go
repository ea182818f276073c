// Command bench compares distlock with peer Redis lock libraries on one
// throwaway redis-server: uncontended latency, throughput on distinct keys, a
// hot key, a two-process ping-pong, crash recovery and (with five servers) a
// Redlock quorum. Rounds are interleaved across contenders so that noise from
// the shared machine hits every row alike; compare the ratios, not the
// absolute times. Run it with `make bench` from the repository root.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"strings"
	"time"

	zlogx "github.com/zeromicro/go-zero/core/logx"
)

type config struct {
	rounds                int // hot key, deadline churn, semaphore throughput
	uncontendedRounds     int // uncontended and prim-uncontended: cheap, and their ratios are the tightest targets
	slowRounds            int // distinct keys, ping-pong, crash, quorum
	scenarios             map[string]bool
	only                  []string
	out                   string
	uncontendedN, quorumN int
	uncontendedSlices     int // turns per round in which the contenders' pairs interleave
	distinctDur, hotDur   time.Duration
	pingDur, monitorDur   time.Duration
	distinctWorkers, hotN int
	hotHold               time.Duration
	crashWaiters          int
	crashTTL              time.Duration
	churn                 churnConfig
	sem                   semConfig
	quick                 bool
}

var allScenarios = []string{"uncontended", "prim-uncontended", "distinct", "hotkey", "sem-throughput", "pingpong", "crash", "churn", "quorum"}

func main() {
	var (
		quick      = flag.Bool("quick", false, "short smoke run (3 short rounds of the headline scenarios, 1 of the others)")
		rounds     = flag.Int("rounds", 9, "interleaved rounds of the headline scenarios (hotkey, sem-throughput, churn; also uncontended unless -uncontended-rounds is given)")
		uncRounds  = flag.Int("uncontended-rounds", 21, "interleaved rounds of uncontended and prim-uncontended")
		slowRounds = flag.Int("slow-rounds", 3, "interleaved rounds of the other scenarios (distinct, pingpong, crash, quorum)")
		scenarios  = flag.String("scenarios", strings.Join(allScenarios, ","), "comma-separated scenarios to run")
		only       = flag.String("only", "", "comma-separated contenders to run (lib or lib/cfg, e.g. distlock,rueidislock/tuned); baseline and floor are always run")
		out        = flag.String("out", ".", "directory for results.json, results.md and the chart (bench.svg, bench.png)")
		childMode  = flag.String("child", "", "internal: run as a child process (hold, pingpong, pairs: see callgrind.sh)")
		lib        = flag.String("lib", "", "internal: child's library")
		cfgName    = flag.String("cfg", "", "internal: child's configuration")
		addr       = flag.String("addr", "", "internal: child's Redis address")
		key        = flag.String("key", "", "internal: child's lock key")
		ttl        = flag.Duration("ttl", 10*time.Second, "internal: child's lease")
		cpuprof    = flag.String("cpuprofile", "", "write a CPU profile of the bench process to this file")
		replotDir  = flag.String("replot", "", "only redraw the chart of the run stored in this directory (its results.json)")
	)
	flag.Parse()
	if *replotDir != "" {
		if err := replot(*replotDir); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if *cpuprof != "" && *childMode == "" {
		f, err := os.Create(*cpuprof)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		_ = pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	zlogx.Disable() // go-zero logs every failed attempt otherwise
	if *childMode != "" {
		if err := childMain(*childMode, *lib, *cfgName, *addr, *key, *ttl); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		return
	}
	// Durations are chosen so that a full run stays under 10 minutes on 2
	// cores: the uncontended scenarios get 21 rounds (a round of them takes
	// about 3 s), the other headline scenarios 9, the slow ones (child
	// processes, a crash per round, five servers) 3.
	cfg := config{
		rounds: *rounds, uncontendedRounds: *uncRounds, slowRounds: *slowRounds, scenarios: map[string]bool{}, out: *out,
		uncontendedN: 1000, uncontendedSlices: 10, quorumN: 500,
		distinctDur: time.Second, hotDur: time.Second, pingDur: time.Second, monitorDur: 500 * time.Millisecond,
		distinctWorkers: 32, hotN: 16, hotHold: 200 * time.Microsecond,
		crashWaiters: 4, crashTTL: time.Second, quick: *quick,
		churn: churnConfig{clients: 8, goroutines: 200, keys: 50, minDeadline: time.Millisecond, maxDeadline: 200 * time.Millisecond,
			dur: 1500 * time.Millisecond, settle: 200 * time.Millisecond},
		// A 2ms hold is long against a handoff (about 0.2ms), so the mutex is
		// bounded by its one holder and the semaphore by its four: the ideal
		// ratio is 4, and what is lost to handoffs shows below it.
		sem: semConfig{contenders: 16, hold: 2 * time.Millisecond, dur: time.Second, slices: 4},
	}
	if *quick {
		if !flagSet("rounds") {
			cfg.rounds = 3
		}
		if !flagSet("slow-rounds") {
			cfg.slowRounds = 1
		}
		cfg.uncontendedN, cfg.quorumN = 300, 200
		cfg.distinctDur, cfg.hotDur, cfg.pingDur, cfg.monitorDur = 400*time.Millisecond, 400*time.Millisecond, 600*time.Millisecond, 300*time.Millisecond
		cfg.churn.dur = 600 * time.Millisecond
		cfg.sem.dur = 400 * time.Millisecond
	}
	if (*quick || flagSet("rounds")) && !flagSet("uncontended-rounds") {
		cfg.uncontendedRounds = cfg.rounds
	}
	for _, s := range strings.Split(*scenarios, ",") {
		if s = strings.TrimSpace(s); s != "" {
			cfg.scenarios[s] = true
		}
	}
	for s := range cfg.scenarios {
		if !contains(allScenarios, s) {
			fmt.Fprintf(os.Stderr, "unknown scenario %q (have %s)\n", s, strings.Join(allScenarios, ","))
			os.Exit(2)
		}
	}
	for _, o := range strings.Split(*only, ",") {
		if o = strings.TrimSpace(o); o != "" {
			cfg.only = append(cfg.only, o)
		}
	}
	if err := runAndWrite(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

func runAndWrite(cfg config) error {
	// Made before the run, not after: a missing -out directory failed the
	// write of a 9-minute run's results.
	if err := os.MkdirAll(cfg.out, 0o755); err != nil {
		return err
	}
	rep, err := run(cfg)
	if rep != nil {
		if werr := rep.write(cfg.out); werr != nil && err == nil {
			err = werr
		}
	}
	return err
}

func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// testContenders are rows that only tests run (a child process finds them
// too).
var testContenders []contender

func findContender(lib, cfg string) (contender, bool) {
	for _, c := range append(contenders(), testContenders...) {
		if c.lib == lib && c.cfg == cfg {
			return c, true
		}
	}
	return contender{}, false
}

func selected(cfg config) []contender {
	var cs []contender
	for _, c := range contenders() {
		if c.lib == "baseline" || c.lib == "floor" || len(cfg.only) == 0 || contains(cfg.only, c.lib) || contains(cfg.only, c.lib+"/"+c.cfg) {
			cs = append(cs, c)
		}
	}
	return cs
}
