package main

import (
	"fmt"
	"math"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"
)

// front is the runner: it has its keeper take the lock, runs COMMAND under
// it and returns distlock's exit code.
func front(cfg *runConfig, args []string, log *runLog) int {
	tty := controllingTerminal()
	if tty != nil {
		// Taking the terminal back from a stopped or finished COMMAND is
		// done from a background process group, which raises SIGTTOU (and
		// would stop distlock) unless SIGTTOU is ignored. Blocking it
		// instead would need a per-thread signal mask, which Go does not
		// offer portably; the shim gives COMMAND the default back (shim.go).
		signal.Ignore(syscall.SIGTTOU)
	}
	// Caught from here on: while waiting they end the wait, while COMMAND
	// runs they are passed on to it. SIGCONT is the shell's fg or bg. Those
	// distlock was started with ignored (nohup's SIGHUP) stay ignored, and
	// COMMAND inherits that (catchable).
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, catchable(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGCONT)...)
	defer signal.Stop(sigs)
	// A closed stdout or stderr gives EPIPE instead of killing the runner,
	// which must outlive COMMAND to report its status.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)

	k, err := startKeeper(cfg.name, args)
	if err != nil {
		return log.fail(fmt.Errorf("cannot start the lock keeper: %w", err), exitRedis)
	}
	g, code := waitLocked(cfg, k, sigs, tty, log)
	if g == nil {
		return code
	}
	// Looked at once the lock is held, long after the shell started the
	// pipeline's stages.
	shared := sharedGroup(tty)
	if shared {
		signal.Notify(sigs, catchable(syscall.SIGTSTP, syscall.SIGTTIN)...)
	}
	j, code := startJob(cfg, g, tty, shared, k, log)
	if j == nil {
		return code
	}
	return supervise(cfg, j, k, sigs, log)
}

// secondChance is how long the runner waits, once keeperWait after --wait
// has passed, before it gives up a keeper that has not answered.
const secondChance = time.Second

// waitLocked waits until the keeper holds the lock, or returns nil and the
// exit code: the keeper's, which has said why, or 128+N for a signal.
func waitLocked(cfg *runConfig, k *keeperLink, sigs <-chan os.Signal, tty *terminal, log *runLog) (*grant, int) {
	// The keeper ends a --wait itself, answering within keeperWait after it
	// (Redis calls included); one stopped or hung while waiting would keep
	// distlock waiting for good. When the bound passes, a second chance
	// of a second: a runner that was itself stopped (Ctrl-Z) finds the
	// answer waiting in the pipe.
	var giveUp <-chan time.Time
	chances := 2
	began := time.Now() // the keeper says nothing until it holds the lock
	if cfg.wait >= 0 {
		t := time.NewTimer(addSaturated(cfg.wait, keeperWait))
		defer t.Stop()
		giveUp = t.C
	}
	for {
		select {
		case <-giveUp:
			if chances--; chances > 0 {
				giveUp = time.After(secondChance)
				continue
			}
			// The time actually waited: --wait, keeperWait, the second
			// chance, and however late the timers fired.
			silence := time.Since(began)
			_ = k.cmd.Process.Kill()
			log.error(evKeeperStalled, fmt.Sprintf("the lock keeper of %s did not answer within --wait %v and %v more; killing it",
				cfg.quoted(), cfg.wait, (silence-cfg.wait).Round(time.Millisecond)), aSilence(silence))
			k.waitExit()
			return nil, exitRedis
		case sig := <-sigs:
			if sig == syscall.SIGCONT {
				continue
			}
			k.abandon()
			log.warn(evInterrupted, fmt.Sprintf("%v while waiting for %s; not run", sig, cfg.quoted()), aSignal(sig))
			return nil, exitBySignal(sig.(syscall.Signal), tty, false)
		case line, ok := <-k.lines:
			if !ok {
				return nil, k.exitCode(log)
			}
			if g, ok := parseGrant(line); ok {
				return g, exitOK
			}
		}
	}
}

// addSaturated is a+b for durations of 0 or more, or the longest duration
// if that overflows: a --wait near the largest one (2562047h47m16s) must
// wait, not wrap around, fire at once and kill a healthy keeper.
func addSaturated(a, b time.Duration) time.Duration {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// supervise waits for COMMAND to end while passing signals on, relaying job
// control on a terminal and stopping COMMAND if the keeper dies; the keeper
// itself stops COMMAND on a loss.
func supervise(cfg *runConfig, j *job, k *keeperLink, sigs <-chan os.Signal, log *runLog) int {
	var (
		lost        bool      // the lock is lost or its keeper is gone: COMMAND is being stopped
		lostAt      time.Time // when the runner learned of it
		keeperGone  bool
		killAt      <-chan time.Time // the runner's SIGKILL deadline, --grace after it learned
		killSaid    bool             // the SIGKILL after --grace has been reported
		lines       = k.lines
		exited      *jobEvent // COMMAND's end, while what it left in its group runs on
		left        groupWatch
		leftTick    <-chan time.Time
		warnLeft    bool // say at the next poll that COMMAND left processes running
		hb          = newHeartbeat(cfg.ttl, time.Now())
		beat        = time.NewTimer(time.Until(hb.due))
		beatC       = beat.C
		execd       = j.execd        // closed once the shim has exec'd COMMAND
		held        []syscall.Signal // signals to pass on once it has
		gotInt      bool             // SIGINT came to distlock's own group
		hadTerminal bool             // COMMAND had the terminal when it ended
	)
	defer beat.Stop()
	// The runner and, after a loss, its keeper both send the SIGKILL at
	// --grace (the keeper's timer dies with a keeper that stalls); the
	// runner says it, once for both.
	sayKilled := func() {
		if !killSaid {
			killSaid = true
			logKill(cfg, log)
		}
	}
	end := func(ev jobEvent) int {
		if keeperGone {
			j.signal(syscall.SIGKILL) // nothing may go on working without the lock
			return exitLost
		}
		reply := k.finish(func(line string) {
			if line == "killed" {
				sayKilled()
			}
		})
		if reply == "" && !lost {
			// The keeper died, or stalled and was killed, before it confirmed
			// the release: distlock always explains its own exits.
			state := keeperState(k)
			log.error(evKeeperDied, fmt.Sprintf("the lock keeper of %s died or did not answer after %s exited (%v); the lock's lease runs out within %v",
				cfg.quoted(), cfg.command[0], state, cfg.ttl), aState(state), aCommand(cfg.command[0]), aGrace(cfg.grace))
		}
		if lost || reply != "released" {
			return exitLost
		}
		if ev.err == nil && ev.ws.Signaled() {
			return exitBySignal(ev.ws.Signal(), j.tty, hadTerminal && !gotInt)
		}
		return exitStatus(ev)
	}
	for {
		select {
		case sig := <-sigs:
			if sig == syscall.SIGINT {
				gotInt = true
			}
			if sig == syscall.SIGTTIN && j.gave {
				// Another stage of the pipeline reads the terminal that
				// COMMAND took (shared): it is theirs again, and they go on.
				j.takeTerminalBack()
				_ = syscall.Kill(-j.tty.pgrp, syscall.SIGCONT)
			} else if exited != nil && (sig == syscall.SIGTSTP || sig == syscall.SIGTTIN) {
				// COMMAND has exited (shared): the runner stops, as it
				// would before COMMAND started, and leaves what COMMAND left
				// to run. (signal.Reset would not do: Go then drops them.)
				_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
			} else if sig != syscall.SIGCONT && execd != nil {
				// Not yet to the shim, which is a Go program: SIGQUIT
				// would end it with a goroutine dump and status 2. Like
				// the kernel, held once each, and passed on in a moment.
				if s := sig.(syscall.Signal); !slices.Contains(held, s) {
					held = append(held, s)
				}
			} else if sig != syscall.SIGCONT {
				j.signal(sig.(syscall.Signal))
			} else if !lost && !k.gone() && exited == nil {
				j.resume()
			} else if exited != nil {
				j.signal(syscall.SIGCONT) // the terminal stays with distlock
			}
		case <-execd:
			execd = nil
			for _, sig := range held {
				j.signal(sig)
			}
			held = nil
		case line, ok := <-lines:
			switch {
			case ok && line == "lost" && !lost:
				// The keeper is stopping COMMAND: SIGTERM now, SIGKILL
				// after --grace. The runner keeps that deadline too, from
				// now: a keeper that stalls (stopped, hung) takes its timer
				// with it, and the heartbeat gives it up only within half
				// a TTL.
				lost, lostAt = true, time.Now()
				t := time.NewTimer(cfg.grace)
				defer t.Stop()
				killAt = t.C
			case ok && line == "killed":
				sayKilled()
			case ok && line == "pong":
				hb.answered(time.Now())
				if beatC != nil {
					beat.Reset(time.Until(hb.due))
				}
			case !ok:
				lines, keeperGone, beatC = nil, true, nil
				if lost {
					// The deadline set when "lost" came stands.
					keeperLostAfterLoss(cfg, k, lostAt, killAt != nil, log)
					break
				}
				t := time.NewTimer(keeperLost(cfg, j, k, log))
				defer t.Stop()
				killAt = t.C
				lost = true
			}
		case <-beatC:
			if now := time.Now(); hb.fired(now) {
				// Stopped or hung: it renews nothing. Killed, it closes its
				// pipe, and COMMAND is stopped as when a keeper dies. Killed
				// first, said after: the message may not hold it up.
				beatC = nil
				silence := hb.silence(now)
				_ = k.cmd.Process.Kill()
				log.error(evKeeperStalled, fmt.Sprintf("the lock keeper of %s has not answered for %v; killing it", cfg.quoted(), silence.Round(time.Millisecond)),
					aSilence(silence))
				break
			}
			if k.send("ping") != nil {
				beatC = nil // the keeper is gone; its pipe's EOF follows
				break
			}
			beat.Reset(time.Until(hb.due))
		case <-killAt:
			killAt = nil
			if !groupRunning(j.pid) {
				break // the keeper's SIGKILL came first, or COMMAND has just exited
			}
			j.signal(syscall.SIGKILL)
			sayKilled()
		case ev := <-j.events:
			switch {
			case ev.err == nil && ev.ws.Stopped():
				if !lost {
					j.suspend(ev.ws.StopSignal())
				}
			case ev.ended():
				hadTerminal = j.gave
				j.takeTerminalBack()
				if keeperGone || !groupRunning(j.pid) {
					return end(ev)
				}
				// COMMAND left processes in its group (a shell script's
				// background jobs): they run under the lock too, as under
				// flock(1), whose lock they inherit, so it is held, and
				// signals passed on, until the last of them exits.
				exited, left = &ev, groupWatch{pgid: j.pid}
				t := time.NewTicker(leftPoll)
				defer t.Stop()
				leftTick = t.C
				warnLeft = !lost
			}
		case <-leftTick:
			if !left.running() {
				return end(*exited)
			}
			// Said at the first poll, not when COMMAND exits: after a loss
			// the keeper's "lost", written before it signalled COMMAND, may
			// not have been read yet, and the lock is then not held.
			if warnLeft && !lost {
				log.warn(evLeftRunning, fmt.Sprintf("%s exited but left processes running in its process group; %s is held until they exit",
					cfg.command[0], cfg.subject()), aCommand(cfg.command[0]), aPgid(j.pid))
			}
			warnLeft = false
		}
	}
}

// keeperLost stops COMMAND when the keeper is gone without a loss and
// returns how long until SIGKILL.
func keeperLost(cfg *runConfig, j *job, k *keeperLink, log *runLog) time.Duration {
	j.terminate()
	state := keeperState(k)
	log.error(evKeeperDied, fmt.Sprintf("the lock keeper of %s died (%v); stopping %s: SIGTERM now, SIGKILL in %v",
		cfg.quoted(), state, cfg.command[0], cfg.grace), aState(state), aCommand(cfg.command[0]), aGrace(cfg.grace))
	return cfg.grace
}

// keeperLostAfterLoss says that the keeper is gone while it was stopping
// COMMAND after the loss. Its SIGKILL timer died with it, but the runner
// has kept that deadline since it learned of the loss, at lostAt (the
// keeper's, counted from a moment before, comes no later): pending tells
// whether it is still to come.
func keeperLostAfterLoss(cfg *runConfig, k *keeperLink, lostAt time.Time, pending bool, log *runLog) {
	state := keeperState(k)
	next := ""
	if pending {
		next = fmt.Sprintf("; SIGKILL in %v", max(time.Until(lostAt.Add(cfg.grace)), 0).Round(time.Millisecond))
	}
	log.error(evKeeperDied, fmt.Sprintf("the lock keeper of %s died (%v) while stopping %s after the loss%s",
		cfg.quoted(), state, cfg.command[0], next), aState(state), aCommand(cfg.command[0]), aGrace(cfg.grace))
}

// keeperState describes how the keeper ended, once it has.
func keeperState(k *keeperLink) string {
	select {
	case <-k.exited:
		return k.cmd.ProcessState.String()
	case <-time.After(time.Second):
		return "it closed its pipe"
	}
}

// exitBySignal is distlock's exit for a job ended by sig: status 128+N.
// But on a terminal, after Ctrl-C (SIGINT), distlock kills itself with
// SIGINT, as flock(1) dies with its command: the shell then stops a loop or
// script that ran distlock, as it would without it. (Not for SIGQUIT: Go
// answers that with a goroutine dump.)
func exitBySignal(sig syscall.Signal, tty *terminal, group bool) int {
	if tty != nil && sig == syscall.SIGINT {
		flushLogs(exitFlush) // what was said before dying of it
		signal.Reset(sig)
		if group {
			// Ctrl-C reached COMMAND's group only: the script or shell
			// loop in distlock's own group must see it too, as under
			// flock(1).
			_ = syscall.Kill(-tty.pgrp, sig)
		}
		_ = syscall.Kill(os.Getpid(), sig)
		// The signal is handled on some thread of this process; give it
		// the moment it needs before falling back to the exit status.
		time.Sleep(time.Second)
	}
	return 128 + int(sig)
}
