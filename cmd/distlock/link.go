package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// A `distlock run` (or `elect`) is two processes: the runner, which the user
// started and which runs COMMAND (front.go, job.go), and its lock keeper
// (keeper.go), which holds the lock. They talk over the keeper's stdin and
// stdout, one line per message:
//
//	keeper → runner  "locked FENCES TOKENS"  the lock is held: start COMMAND
//	                                       (one fence and token per KEY,
//	                                       comma-separated, in KEY order)
//	runner → keeper  "pid PID"             COMMAND's process and process group,
//	                                       sent before COMMAND may run
//	keeper → runner  "lost"                the lock is lost; the keeper is
//	                                       stopping COMMAND (SIGTERM, SIGKILL)
//	keeper → runner  "killed"              COMMAND outlived --grace: the keeper
//	                                       sent SIGKILL (the runner says so)
//	runner → keeper  "ping"                are you there? (while COMMAND runs,
//	                                       heartbeat.go)
//	keeper → runner  "pong"                yes
//	runner → keeper  "done"                COMMAND has exited: release
//	keeper → runner  "released", "notheld" or "lost", the answer to done;
//	                                       then the keeper exits
//
// EOF on the keeper's stdin means that the runner is gone (killed, or it
// gave up waiting): the keeper kills COMMAND's process group, if there is
// one, and then releases the lock. EOF on its stdout means that the keeper is
// gone: the runner stops COMMAND as after a loss.

// Hidden subcommands: the keeper, and the shim that becomes COMMAND.
const (
	keeperCmd = "__keeper"
	execCmd   = "__exec"
)

// maxLinkLine bounds a line between runner and keeper. The keeper's
// "locked FENCES TOKENS" grows with the KEYs, about 40 bytes each: past
// bufio.Scanner's default 64 KiB (some 1,650 KEYs) the runner would take it
// for the keeper's EOF. COMMAND's environment bounds the KEYs anyway (a
// variable is at most 128 KiB on Linux), far below this.
const maxLinkLine = 16 << 20

// keeperWait bounds how long the runner waits for its keeper to exit once
// it has nothing left to do (its release has its own 5s timeout).
const keeperWait = 15 * time.Second

// keeperLink is the runner's end of the pipes to its keeper.
type keeperLink struct {
	cmd    *exec.Cmd
	to     io.WriteCloser
	lines  chan string   // from the keeper; closed at EOF
	eof    chan struct{} // closed at EOF, for checks that must not take a line
	exited chan struct{} // closed once the keeper process has been waited for
}

// startKeeper starts the keeper for the arguments args of `distlock name`.
func startKeeper(name string, args []string) (*keeperLink, error) {
	self, err := selfPath()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, append([]string{keeperCmd, strconv.Itoa(os.Getpid()), name}, args...)...)
	cmd.Args[0] = os.Args[0]
	cmd.Stderr = os.Stderr
	// Its own session, without a terminal: Ctrl-C, Ctrl-Z and a hangup meant
	// for the job never reach the process that renews the job's lock.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	to, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	from, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	k := &keeperLink{cmd: cmd, to: to, lines: make(chan string, 4), eof: make(chan struct{}), exited: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(from)
		sc.Buffer(nil, maxLinkLine)
		for sc.Scan() {
			k.lines <- sc.Text()
		}
		close(k.eof)
		close(k.lines)
		_ = cmd.Wait() // only after the last read: Wait closes the pipe
		close(k.exited)
	}()
	return k, nil
}

// selfPath is the executable to start the keeper and the shim from. On
// Linux it is /proc/self/exe, the very binary that runs, so that a distlock
// upgraded while a job runs cannot pair a runner with a keeper of another
// version.
func selfPath() (string, error) {
	if runtime.GOOS == "linux" {
		if _, err := os.Stat("/proc/self/exe"); err == nil {
			return "/proc/self/exe", nil
		}
	}
	return os.Executable()
}

func (k *keeperLink) send(msg string) error {
	_, err := io.WriteString(k.to, msg+"\n")
	return err
}

// gone tells whether the keeper has closed its end.
func (k *keeperLink) gone() bool {
	select {
	case <-k.eof:
		return true
	default:
		return false
	}
}

// grant is what the keeper took: a fence and a token per KEY, in KEY
// order, as COMMAND's environment gives them (space-separated).
type grant struct {
	fences string
	tokens string
}

func parseGrant(line string) (*grant, bool) {
	f := strings.Fields(line)
	if len(f) != 3 || f[0] != "locked" {
		return nil, false
	}
	fences, tokens := strings.Split(f[1], ","), strings.Split(f[2], ",")
	if len(fences) != len(tokens) {
		return nil, false
	}
	for _, fence := range fences {
		if _, err := strconv.ParseInt(fence, 10, 64); err != nil {
			return nil, false
		}
	}
	return &grant{fences: strings.Join(fences, " "), tokens: strings.Join(tokens, " ")}, true
}

// abandon tells the keeper to give up (it releases the lock if it got it
// meanwhile) and waits for it to exit.
func (k *keeperLink) abandon() {
	_ = k.to.Close()
	k.waitExit()
}

// finish tells the keeper that COMMAND has exited and returns its answer:
// "released", "notheld", "lost", or "" if it died first or did not answer
// within keeperWait. A keeper stopped (kill -STOP) or hung has its pipe
// open, and the heartbeat that gives such a keeper up runs only while
// COMMAND runs: without the bound the runner would wait for it forever.
// Other lines that come first go to other, if not nil.
func (k *keeperLink) finish(other func(line string)) string {
	reply := ""
	if k.send("done") == nil {
		timeout := time.NewTimer(keeperWait)
		defer timeout.Stop()
	answer:
		for {
			select {
			case line, ok := <-k.lines:
				if !ok {
					break answer
				}
				if line == "released" || line == "notheld" || line == "lost" {
					reply = line
					break answer
				}
				if other != nil {
					other(line)
				}
			case <-timeout.C:
				_ = k.cmd.Process.Kill() // stalled: its lease runs out
				break answer
			}
		}
	}
	_ = k.to.Close()
	k.waitExit()
	return reply
}

// waitExit waits for the keeper to exit, killing it after keeperWait.
func (k *keeperLink) waitExit() {
	go func() {
		for range k.lines { // drain, so that the reader reaches Wait
		}
	}()
	select {
	case <-k.exited:
	case <-time.After(keeperWait):
		_ = k.cmd.Process.Kill()
		<-k.exited
	}
}

// exitCode waits for the keeper to exit and returns its exit code, having
// explained a keeper that died of a signal (a keeper that exits explains
// itself).
func (k *keeperLink) exitCode(log *runLog) int {
	k.waitExit()
	if ps := k.cmd.ProcessState; ps != nil && ps.Exited() {
		return ps.ExitCode()
	}
	state := k.cmd.ProcessState.String()
	log.error(evKeeperDied, fmt.Sprintf("the lock keeper died (%v); not run", state), aState(state))
	return exitRedis
}
