package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/distlock/distlock"
)

// reapWait bounds how long a keeper whose runner died waits for COMMAND's
// killed process group to be gone before it releases the lock, renewing
// it meanwhile: a process can finish a system call (a write) after SIGKILL.
const reapWait = 5 * time.Second

// runKeeper is the hidden `distlock __keeper RUNNER-PID NAME ARGS...`, the
// process that holds the lock of a `distlock run` or the leadership of a
// `distlock elect` (NAME, with its arguments ARGS; link.go has the
// protocol). It runs in its own session, outside the terminal's job: it
// renews the lock while the job is suspended, and it outlives a killed
// runner to kill COMMAND's process group before it releases the lock.
func runKeeper(args []string) int {
	// A message to a closed stderr must not kill the keeper: COMMAND would
	// be left without its lock. Nor must the termination signals that the
	// runner passes on to COMMAND: sent to every process at once (pkill
	// distlock, a service manager stopping a control group) they would
	// kill the keeper before COMMAND exits and the lock is released. The
	// keeper follows its runner instead, and its stdin's EOF still ends it
	// when the runner is gone.
	signal.Ignore(syscall.SIGPIPE, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT)
	setProcessName("distlock")
	if len(args) < 2 {
		return exitUsage
	}
	runner, err := strconv.Atoi(args[0])
	if err != nil {
		return exitUsage
	}
	name := args[1]
	cfg, err := parseRunArgs(name, args[2:])
	if err != nil {
		return newRunLog(cfg.logs, name, "", os.Stderr).fail(err, exitUsage)
	}
	cfg.value = cfg.leaderValue(runner)
	log := newRunLog(cfg.logs, name, cfg.key, os.Stderr)
	open := cfg.conn.open
	if cfg.quorum {
		open = cfg.conn.openQuorum
	}
	var opts []distlock.ClientOption
	if l := log.library(cfg.verbose); l != nil {
		opts = append(opts, distlock.WithLogger(l))
	}
	conn, err := open(opts...)
	if err != nil {
		return log.fail(err, exitUsage)
	}
	defer conn.Close()

	lines, eof := readLines(os.Stdin)
	// The runner closes its end to give up waiting (it caught a signal).
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-eof:
			cancel()
		case <-ctx.Done():
		}
	}()
	h, code := acquire(ctx, cfg, conn, runner, log)
	cancel()
	if h == nil {
		return code
	}
	// What was said while taking the lock (-v: waiting, taken; on a
	// terminal, the erased progress line) comes before COMMAND's output,
	// unless stderr takes no writes.
	flushLogs(syncFlush)
	fmt.Fprintf(os.Stdout, "locked %s %s\n", h.fenceList(","), strings.Join(h.tokens, ","))
	return keep(cfg, h, lines, runner, log)
}

// readLines delivers the runner's messages; both channels close at EOF.
func readLines(r io.Reader) (<-chan string, <-chan struct{}) {
	lines, eof := make(chan string, 4), make(chan struct{})
	go func() {
		sc := bufio.NewScanner(r)
		sc.Buffer(nil, maxLinkLine)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(eof)
		close(lines)
	}()
	return lines, eof
}

// keep holds h while COMMAND runs and returns the keeper's exit code.
func keep(cfg *runConfig, h *held, lines <-chan string, runner int, log *runLog) int {
	var (
		pgid    int // COMMAND's process group, once the runner has said
		lostErr error
		lost    = h.lost
		killAt  <-chan time.Time
	)
	reply := func(msg string) { fmt.Fprintln(os.Stdout, msg) }
	for {
		select {
		case line, ok := <-lines:
			verb, arg, _ := strings.Cut(line, " ")
			switch {
			case !ok:
				// The runner is gone (killed, or it gave up before COMMAND
				// started): nothing may run on without it.
				if pgid != 0 {
					_ = syscall.Kill(-pgid, syscall.SIGKILL)
					log.error(evRunnerDied, fmt.Sprintf("the runner of %s died; killed %s's process group", cfg.quoted(), cfg.command[0]),
						aCommand(cfg.command[0]))
					waitGone(pgid)
				}
				if lostErr == nil {
					_ = release(cfg, h, log)
				} else {
					giveBackRest(h)
				}
				return exitOK
			case verb == "ping":
				reply("pong")
			case verb == "pid":
				pgid, _ = strconv.Atoi(arg)
				if lostErr != nil && pgid > 0 {
					_ = syscall.Kill(-pgid, syscall.SIGKILL) // lost before it started
				}
			case verb == "done":
				if lostErr != nil {
					if pgid > 0 {
						// What COMMAND left running may not go on without the lock.
						_ = syscall.Kill(-pgid, syscall.SIGKILL)
					}
					giveBackRest(h)
					reply("lost")
					return exitLost
				}
				if err := release(cfg, h, log); errors.Is(err, distlock.ErrNotHeld) {
					log.error(evLost, fmt.Sprintf("%s was lost before %s finished (%v)", cfg.subject(), cfg.command[0], h.err()),
						h.fenceAttr(), aCause(h.err()), aCommand(cfg.command[0]), aGrace(cfg.grace))
					reply("notheld")
					return exitLost
				}
				reply("released")
				return exitOK
			}
		case <-lost:
			// Signals first, the message after: nothing that is said may
			// hold up stopping COMMAND (runLog does not wait for stderr
			// either).
			lost, lostErr = nil, h.err()
			reply("lost")
			if pgid > 0 {
				_ = syscall.Kill(-pgid, syscall.SIGTERM)
				_ = syscall.Kill(-pgid, syscall.SIGCONT) // a suspended job must run to end
			}
			_ = syscall.Kill(runner, syscall.SIGCONT) // and so must its runner
			t := time.NewTimer(cfg.grace)
			defer t.Stop()
			killAt = t.C
			log.error(evLost, fmt.Sprintf("%s lost (%v); stopping %s: SIGTERM now, SIGKILL in %v", cfg.subject(), lostErr, cfg.command[0], cfg.grace),
				h.fenceAttr(), aCause(lostErr), aCommand(cfg.command[0]), aGrace(cfg.grace))
		case <-killAt:
			killAt = nil
			if pgid > 0 && groupRunning(pgid) {
				_ = syscall.Kill(-pgid, syscall.SIGKILL)
				_ = syscall.Kill(runner, syscall.SIGCONT)
				// The runner, which sends the same SIGKILL at the same
				// deadline in case this keeper stalls, says it, once for
				// both; unless it is gone.
				if _, err := fmt.Fprintln(os.Stdout, "killed"); err != nil {
					logKill(cfg, log)
				}
			}
		}
	}
}

// logKill says that COMMAND outlived --grace after SIGTERM and was sent
// SIGKILL.
func logKill(cfg *runConfig, log *runLog) {
	log.warn(evKill, fmt.Sprintf("%s still running %v after SIGTERM; sending SIGKILL", cfg.command[0], cfg.grace),
		aCommand(cfg.command[0]), aGrace(cfg.grace))
}

// waitGone waits, at most reapWait, until no process of group pgid runs.
func waitGone(pgid int) {
	deadline := time.Now().Add(reapWait)
	for groupRunning(pgid) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // polling processes that are not our children
	}
}

// giveBackRest releases, after a loss, what h still holds: with several
// KEYs, those not lost, which their waiters need now, not at their expiry.
// Only once COMMAND has exited: until then it runs under them. Errors cost
// no more than the leases running out.
func giveBackRest(h *held) {
	if len(h.fences) < 2 {
		return // a lost hold is all of it
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = h.release(ctx)
}

// release gives h back; a Redis error only costs the lease running out, so
// it is reported and otherwise ignored. (With several KEYs, one lost and
// the others released is ErrNotHeld: COMMAND ran without all of them.)
func release(cfg *runConfig, h *held, log *runLog) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := h.release(ctx)
	switch {
	case err == nil:
		if cfg.verbose {
			log.info(evReleased, "released "+cfg.label(), h.fenceAttr())
		}
	case !errors.Is(err, distlock.ErrNotHeld):
		log.warn(evReleaseFail, fmt.Sprintf("warning: release %s: %v (it expires within %v)", cfg.label(), err, cfg.ttl),
			h.fenceAttr(), aError(err), aTTL(cfg.ttl))
	}
	return err
}
