// Command bench compares distlock with peer Redis lock libraries on one
// throwaway redis-server: uncontended latency, throughput on distinct keys, a
// hot key, a two-process ping-pong, crash recovery and (with five servers) a
// Redlock quorum. Rounds are interleaved across contenders so that noise from
// the shared machine hits every row alike; compare the ratios, not the
// absolute times. Run it with `make bench` from the repository root.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"time"

	zlogx "github.com/zeromicro/go-zero/core/logx"
)

type config struct {
	rounds                int
	scenarios             map[string]bool
	only                  []string
	out                   string
	uncontendedN, quorumN int
	distinctDur, hotDur   time.Duration
	pingDur, monitorDur   time.Duration
	distinctWorkers, hotN int
	hotHold               time.Duration
	crashWaiters          int
	crashTTL              time.Duration
	quick                 bool
}

var allScenarios = []string{"uncontended", "distinct", "hotkey", "pingpong", "crash", "quorum"}

func main() {
	var (
		quick     = flag.Bool("quick", false, "short run (1 round, short durations) for a smoke test")
		rounds    = flag.Int("rounds", 3, "interleaved rounds per scenario")
		scenarios = flag.String("scenarios", strings.Join(allScenarios, ","), "comma-separated scenarios to run")
		only      = flag.String("only", "", "comma-separated contenders to run (lib or lib/cfg, e.g. distlock,rueidislock/tuned); baseline is always run")
		out       = flag.String("out", ".", "directory for results.json and results.md")
		childMode = flag.String("child", "", "internal: run as a child process (hold, pingpong)")
		lib       = flag.String("lib", "", "internal: child's library")
		cfgName   = flag.String("cfg", "", "internal: child's configuration")
		addr      = flag.String("addr", "", "internal: child's Redis address")
		key       = flag.String("key", "", "internal: child's lock key")
		ttl       = flag.Duration("ttl", 10*time.Second, "internal: child's lease")
		cpuprof   = flag.String("cpuprofile", "", "write a CPU profile of the bench process to this file")
	)
	flag.Parse()
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
	cfg := config{
		rounds: *rounds, scenarios: map[string]bool{}, out: *out,
		uncontendedN: 1000, quorumN: 500,
		distinctDur: time.Second, hotDur: 1500 * time.Millisecond, pingDur: 1500 * time.Millisecond, monitorDur: 500 * time.Millisecond,
		distinctWorkers: 32, hotN: 16, hotHold: 200 * time.Microsecond,
		crashWaiters: 4, crashTTL: time.Second, quick: *quick,
	}
	if *quick {
		if !flagSet("rounds") {
			cfg.rounds = 1
		}
		cfg.uncontendedN, cfg.quorumN = 300, 200
		cfg.distinctDur, cfg.hotDur, cfg.pingDur, cfg.monitorDur = 400*time.Millisecond, 500*time.Millisecond, 600*time.Millisecond, 300*time.Millisecond
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

func findContender(lib, cfg string) (contender, bool) {
	for _, c := range contenders() {
		if c.lib == lib && c.cfg == cfg {
			return c, true
		}
	}
	return contender{}, false
}

func selected(cfg config) []contender {
	var cs []contender
	for _, c := range contenders() {
		if c.lib == "baseline" || len(cfg.only) == 0 || contains(cfg.only, c.lib) || contains(cfg.only, c.lib+"/"+c.cfg) {
			cs = append(cs, c)
		}
	}
	return cs
}

func run(cfg config) (*report, error) {
	addrs, stop, err := servers(1)
	if err != nil {
		return nil, err
	}
	defer stop()
	ad := newAdmin(addrs[0])
	defer ad.rdb.Close()
	cs := selected(cfg)
	rep := newReport(cs, cfg)
	rep.Redis = ad.version()
	logf := func(format string, a ...any) { fmt.Fprintf(os.Stderr, format+"\n", a...) }
	logf("bench: redis %s on %s, %d cores, %s, %d rows, %d rounds", rep.Redis, addrs[0], runtime.NumCPU(), runtime.Version(), len(cs), cfg.rounds)
	if fairOption == nil {
		logf("bench: distlock has no WithFair yet: fair rows left out")
	}
	started := time.Now()

	// each runs one measurement for every contender, rounds interleaved.
	each := func(scenario string, f func(c contender, r *result) error) {
		if !cfg.scenarios[scenario] {
			return
		}
		t0 := time.Now()
		for round := 1; round <= cfg.rounds; round++ {
			for _, c := range cs {
				r := rep.row(c)
				if err := ad.flush(); err != nil {
					r.fail(scenario, err)
					continue
				}
				var err error
				for try := 0; try < 3; try++ {
					if err = f(c, r); !errors.Is(err, errRetryRound) {
						break
					}
				}
				if err != nil {
					r.fail(scenario, err)
				}
			}
		}
		logf("bench: %-12s %5.1fs", scenario, time.Since(t0).Seconds())
	}

	each("uncontended", func(c contender, r *result) error {
		lat, v, err := runUncontended(c, addrs, cfg.uncontendedN)
		r.Violations += v
		r.uncontended = append(r.uncontended, lat...)
		return err
	})
	each("distinct", func(c contender, r *result) error {
		ops, v, err := runDistinct(c, addrs, cfg.distinctWorkers, cfg.distinctDur)
		r.Violations += v
		r.distinctOps += ops
		r.distinctDur += cfg.distinctDur
		return err
	})
	each("hotkey", func(c contender, r *result) error {
		h, err := runHot(c, addrs, ad, cfg.hotN, cfg.hotHold, cfg.hotDur, false)
		if err != nil {
			return err
		}
		r.Violations += h.violations
		r.hot = append(r.hot, h)
		return nil
	})
	if cfg.scenarios["hotkey"] {
		// Client-issued commands, counted through MONITOR in an untimed pass.
		t0 := time.Now()
		for _, c := range cs {
			r := rep.row(c)
			if err := ad.flush(); err != nil {
				r.fail("hotkey-monitor", err)
				continue
			}
			h, err := runHot(c, addrs, ad, cfg.hotN, cfg.hotHold, cfg.monitorDur, true)
			if err != nil {
				r.fail("hotkey-monitor", err)
				continue
			}
			r.Violations += h.violations
			r.monitorCmds += h.topLevel
			r.monitorAcq += int64(len(h.grants))
		}
		logf("bench: %-12s %5.1fs", "cmd count", time.Since(t0).Seconds())
	}
	each("pingpong", func(c contender, r *result) error {
		p, err := runPingPong(c, addrs[0], cfg.pingDur)
		if err != nil {
			return err
		}
		r.Violations += int64(p.violations)
		r.ping = append(r.ping, p.handoffs...)
		r.pingDropped += p.notWaiting
		return nil
	})
	each("crash", func(c contender, r *result) error {
		cr, err := runCrash(c, addrs[0], ad, cfg.crashWaiters, cfg.crashTTL)
		if err != nil {
			return err
		}
		r.Violations += int64(cr.violations)
		r.crash = append(r.crash, cr.afterExpiry)
		return nil
	})
	if cfg.scenarios["quorum"] {
		t0 := time.Now()
		if err := runQuorumScenario(cfg, rep); err != nil {
			rep.Notes = append(rep.Notes, "quorum: "+err.Error())
		}
		logf("bench: %-12s %5.1fs", "quorum", time.Since(t0).Seconds())
	}
	rep.Elapsed = time.Since(started).Round(time.Second).String()
	rep.finish()
	fmt.Print(rep.markdown())
	if bad := rep.broken(); len(bad) > 0 {
		return rep, fmt.Errorf("MUTUAL EXCLUSION VIOLATED in %s", strings.Join(bad, ", "))
	}
	if failed := rep.failed(); len(failed) > 0 {
		return rep, fmt.Errorf("errors in %s (see the report)", strings.Join(failed, ", "))
	}
	return rep, nil
}

// runQuorumScenario compares Redlock on five independent servers.
func runQuorumScenario(cfg config, rep *report) error {
	if newQuorum == nil {
		return errors.New("distlock has no NewQuorum yet: row left out")
	}
	addrs, stop, err := servers(5)
	if err != nil {
		return err
	}
	defer stop()
	var qs []contender
	for _, c := range contenders() {
		if (c.lib == "distlock" || c.lib == "redsync") && c.cfg == "default" {
			qs = append(qs, c)
		}
	}
	admins := make([]*admin, len(addrs))
	for i, a := range addrs {
		admins[i] = newAdmin(a)
		defer admins[i].rdb.Close()
	}
	for round := 1; round <= cfg.rounds; round++ {
		for _, c := range qs {
			q := rep.quorumRow(c)
			for _, a := range admins {
				if err := a.flush(); err != nil {
					return err
				}
			}
			lat, v, err := runQuorum(c, addrs, cfg.quorumN)
			if err != nil {
				q.Errors = append(q.Errors, err.Error())
				continue
			}
			q.Violations += v
			q.lat = append(q.lat, lat...)
		}
	}
	return nil
}
