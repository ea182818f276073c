package main

import (
	"syscall"
	"time"
)

// usage is what one contender's measured run cost: CPU of this process (only
// one contender runs at a time, so the process's CPU is that contender's,
// plus the bench's own bookkeeping, which is the same for every row), CPU of
// the child processes it ran, and the server's CPU and commands.
type usage struct {
	client, children, server time.Duration
	cmds                     map[string]int64 // INFO commandstats deltas, calls inside scripts included
}

// add sums v into u (the slices of one contender's run).
func (u *usage) add(v usage) {
	u.client += v.client
	u.children += v.children
	u.server += v.server
	for name, n := range v.cmds {
		u.cmds[name] += n
	}
}

// commands is every server command of the run, the bench's own INFO left out.
func (u usage) commands() int64 {
	var n int64
	for name, c := range u.cmds {
		if name != "info" {
			n += c
		}
	}
	return n
}

func (u usage) publishes() int64 { return u.cmds["publish"] + u.cmds["spublish"] }

// cpu is client (this process and its children) plus server CPU.
func (u usage) cpu() time.Duration { return u.client + u.children + u.server }

// probe brackets a measured run; ad may be nil (no server figures, as for the
// quorum row with five servers).
type probe struct {
	ad    *admin
	cpu0  time.Duration
	srv0  time.Duration
	cmds0 map[string]int64
}

func startProbe(ad *admin) (*probe, error) {
	p := &probe{ad: ad}
	if ad != nil {
		var err error
		if p.srv0, p.cmds0, err = ad.serverStats(); err != nil {
			return nil, err
		}
	}
	p.cpu0 = selfCPU() // last: the INFO above is not the contender's
	return p, nil
}

func (p *probe) stop() (usage, error) {
	u := usage{client: selfCPU() - p.cpu0}
	if p.ad == nil {
		return u, nil
	}
	srv, cmds, err := p.ad.serverStats()
	if err != nil {
		return u, err
	}
	u.server = srv - p.srv0
	u.cmds = map[string]int64{}
	for name, n := range cmds {
		if d := n - p.cmds0[name]; d != 0 {
			u.cmds[name] = d
		}
	}
	return u, nil
}

// selfCPU is this process's user+system CPU time (getrusage(RUSAGE_SELF)).
// Linux accounts it from the scheduler's nanosecond runtime, so short runs
// are measured precisely, unlike tick-sampled counters.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return rusageCPU(&ru)
}

func rusageCPU(ru *syscall.Rusage) time.Duration {
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
