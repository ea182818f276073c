package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// job is COMMAND, started by the runner in its own process group, so that
// signals, a loss and a killed runner reach everything it started (a shell
// script's children too).
type job struct {
	pid    int       // COMMAND's process ID, also its process group ID
	tty    *terminal // nil when not on a terminal
	gave   bool      // the terminal's foreground is COMMAND's because we gave it
	shared bool      // on a terminal, others share the runner's process group (sharedGroup)
	events chan jobEvent
	execd  chan struct{} // closed once the shim has exec'd COMMAND, or exited
}

// jobEvent is a change of COMMAND's state, from wait4.
type jobEvent struct {
	ws  syscall.WaitStatus
	err error // wait4 failed: treated as exited
}

func (e jobEvent) ended() bool { return e.err != nil || e.ws.Exited() || e.ws.Signaled() }

// startJob starts COMMAND for grant g. On failure it has the keeper release
// the lock, says why and returns nil and the exit code.
func startJob(cfg *runConfig, g *grant, tty *terminal, shared bool, k *keeperLink, log *runLog) (*job, int) {
	cannot := func(err error, code int) (*job, int) {
		k.finish(nil)
		log.error(evCannotRun, fmt.Sprintf("cannot run %q: %v", cfg.command[0], err), aCommand(cfg.command[0]), aError(err))
		return nil, code
	}
	path, err := exec.LookPath(cfg.command[0])
	if errors.Is(err, exec.ErrDot) {
		// Found through a PATH entry relative to the current directory
		// ("." or an empty entry): Go refuses that by default, but the
		// shell, flock(1) and env(1) run it, and so does distlock; the shim
		// runs it from this directory.
		err = nil
	}
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		return cannot(err, exitNotFound)
	}
	if err != nil {
		return cannot(err, exitCannotRun)
	}
	self, err := selfPath()
	if err != nil {
		return cannot(err, exitCannotRun)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return cannot(err, exitCannotRun)
	}
	defer w.Close() // without the go-ahead the shim exits unrun
	// The shim's fd 4 is closed on exec: EOF on execR means that COMMAND
	// runs (or that the shim is gone). Until then signals are not passed
	// on: they would reach the shim, a Go program, which dies of SIGQUIT
	// with a goroutine dump and status 2, not as COMMAND would.
	execR, execW, err := os.Pipe()
	if err != nil {
		r.Close()
		return cannot(err, exitCannotRun)
	}
	unignore := "0"
	sys := &syscall.SysProcAttr{Setpgid: true}
	killWithParent(sys)
	if tty != nil {
		unignore = "1"
		// In the foreground as under flock(1): COMMAND reads the terminal
		// and gets Ctrl-C and Ctrl-Z. Started from the background, it gets
		// the terminal when the shell brings the job forward (resume).
		// Not in a shared group: then it gets the terminal when it uses it.
		if tty.ours() && !shared {
			sys.Foreground, sys.Ctty = true, tty.fd
		}
	}
	argv := append([]string{os.Args[0], execCmd, unignore, string(cfg.logs), cfg.name, cfg.key, path}, cfg.command...)
	env := append(jobEnviron(os.Environ()),
		"DISTLOCK_KEY="+cfg.key,
		"DISTLOCK_FENCE="+g.fences,
		"DISTLOCK_TOKEN="+g.tokens,
	)
	pid, err := syscall.ForkExec(self, argv, &syscall.ProcAttr{
		Env:   env,
		Files: []uintptr{0, 1, 2, r.Fd(), execW.Fd()},
		Sys:   sys,
	})
	r.Close()
	execW.Close()
	if err != nil {
		execR.Close()
		return cannot(err, exitCannotRun)
	}
	j := &job{pid: pid, tty: tty, gave: sys.Foreground, shared: shared, events: make(chan jobEvent, 4), execd: make(chan struct{})}
	go j.wait()
	go func() {
		var b [1]byte
		for {
			if _, err := execR.Read(b[:]); err != nil {
				break
			}
		}
		execR.Close()
		close(j.execd)
	}()
	// The keeper learns COMMAND's group before COMMAND may run. If it is
	// gone, no go-ahead: the shim exits and supervise handles the loss.
	if k.send("pid "+strconv.Itoa(pid)) == nil {
		_, _ = w.Write([]byte{1})
	}
	return j, exitOK
}

// jobVars are the variables that startJob sets for COMMAND.
var jobVars = []string{"DISTLOCK_KEY", "DISTLOCK_FENCE", "DISTLOCK_TOKEN"}

// jobEnviron is env without jobVars. distlock may have inherited them: it
// runs in the COMMAND of another `distlock run` (a script that takes a
// second lock, a nested --owner run), or a service sets them. Left in,
// they would come before this run's in COMMAND's environment, and the
// shim's exec, like getenv, takes the first of a name: COMMAND would get
// the outer lock's key, fence and token.
func jobEnviron(env []string) []string {
	out := make([]string, 0, len(env)+len(jobVars))
next:
	for _, kv := range env {
		for _, v := range jobVars {
			if strings.HasPrefix(kv, v+"=") {
				continue next
			}
		}
		out = append(out, kv)
	}
	return out
}

// wait reports COMMAND's stops, continues and end.
func (j *job) wait() {
	for {
		var ws syscall.WaitStatus
		_, err := syscall.Wait4(j.pid, &ws, syscall.WUNTRACED|syscall.WCONTINUED, nil)
		if err == syscall.EINTR {
			continue
		}
		ev := jobEvent{ws: ws, err: err}
		j.events <- ev
		if ev.ended() {
			return
		}
	}
}

// signal sends sig to COMMAND's process group.
func (j *job) signal(sig syscall.Signal) { _ = syscall.Kill(-j.pid, sig) }

// terminate sends SIGTERM, and SIGCONT so that a stopped job gets it.
func (j *job) terminate() {
	j.signal(syscall.SIGTERM)
	j.signal(syscall.SIGCONT)
}

// suspend follows COMMAND stopped by sig (Ctrl-Z, or SIGTTIN when it reads
// the terminal from the background): the runner takes the terminal back and
// stops its own process group with the same signal, so that the shell sees
// the whole job stopped, as under flock(1). The keeper, outside the job,
// keeps renewing the lock. Off a terminal a stop is someone else's business:
// whoever stopped COMMAND continues it.
//
// In a shared group COMMAND stopped by SIGTTIN or SIGTTOU, for using the
// terminal while the runner's group has it, gets it (and is continued)
// instead; and the group is stopped with SIGSTOP, since the runner then
// catches SIGTSTP and SIGTTIN (and ignores SIGTTOU).
func (j *job) suspend(sig syscall.Signal) {
	if j.tty == nil {
		return
	}
	if j.shared && (sig == syscall.SIGTTIN || sig == syscall.SIGTTOU) && !j.gave &&
		j.tty.ours() && j.tty.setForeground(j.pid) == nil {
		j.gave = true
		j.signal(syscall.SIGCONT)
		return
	}
	j.takeTerminalBack()
	if j.shared || sig == syscall.SIGTTOU {
		// The runner ignores SIGTTOU on a terminal (front.go): SIGSTOP
		// stops it, and the shell sees the job stopped.
		sig = syscall.SIGSTOP
	}
	_ = syscall.Kill(-j.tty.pgrp, sig)
}

// resume follows the runner being continued (fg or bg): COMMAND continues
// too, in the foreground if the shell gave the runner the terminal.
func (j *job) resume() {
	if j.tty == nil {
		return
	}
	if !j.shared && j.tty.ours() && j.tty.setForeground(j.pid) == nil {
		j.gave = true
	}
	j.signal(syscall.SIGCONT)
}

// sharedGroup tells whether COMMAND must leave the terminal to the
// runner's process group, the shell's job, rather than take it: when
// others are in that group, the other stages of a pipeline (`distlock run
// k -- make | less`), or when distlock is a script's background job
// (started with SIGINT ignored) and the script runs on. COMMAND, in a group
// of its own for the keeper's sake, would otherwise put them in the
// background; the first to read the terminal (less) would stop with
// SIGTTIN, and the runner with it, leaving COMMAND running, and the lock
// held after it, with nobody to answer for it until fg. So the terminal
// stays with the job, the runner passes Ctrl-C, Ctrl-\ and Ctrl-Z on to
// COMMAND, and COMMAND gets the terminal only when it uses it (suspend);
// when another stage then reads it, the runner (catching SIGTTIN) gives it
// back to them (supervise). The shells that ran distlock and wait for it
// (a script, a subshell) do not count.
func sharedGroup(tty *terminal) bool {
	return tty != nil && (signal.Ignored(syscall.SIGINT) || othersInGroup(tty.pgrp))
}

// takeTerminalBack returns the terminal to the runner's group, if COMMAND
// has it from us: the shell, or the script that ran distlock, may use it
// again once COMMAND has stopped or exited.
func (j *job) takeTerminalBack() {
	if j.gave {
		_ = j.tty.setForeground(j.tty.pgrp)
		j.gave = false
	}
}

// leftPoll and leftScanEvery pace a groupWatch.
const (
	leftPoll      = 50 * time.Millisecond
	leftScanEvery = 20
)

// groupWatch follows the processes COMMAND left in its process group after
// it exited. They are not the runner's children (they were reparented), so
// nothing reports their end: the group is polled every leftPoll with
// kill(-pgid, 0), one system call, and once every leftScanEvery polls with
// groupRunning, a scan of /proc, since a zombie passes kill until its new
// parent reaps it and some never do (a container whose init does not reap).
type groupWatch struct {
	pgid  int
	polls int
}

// running tells whether the group still has a process that has not exited.
func (w *groupWatch) running() bool {
	w.polls++
	if syscall.Kill(-w.pgid, 0) != nil {
		return false
	}
	return w.polls%leftScanEvery != 0 || groupRunning(w.pgid)
}

// exitStatus is the shell's exit status for COMMAND's end.
func exitStatus(ev jobEvent) int {
	switch {
	case ev.err != nil:
		return exitCannotRun
	case ev.ws.Signaled():
		return 128 + int(ev.ws.Signal())
	default:
		return ev.ws.ExitStatus()
	}
}
