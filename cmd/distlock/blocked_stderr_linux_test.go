package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fullPipe returns a pipe whose buffer is already full: a write to w
// blocks until someone reads r. It stands for a stderr nobody drains for a
// while: a terminal stopped with Ctrl-S, `2>&1 | less`, a log collector
// that stalls (journald, a container runtime's blocking log driver).
func fullPipe(t *testing.T) (r, w *os.File) {
	t.Helper()
	var fds [2]int
	if err := syscall.Pipe2(fds[:], syscall.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	if err := syscall.SetNonblock(fds[1], true); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	for {
		if _, err := syscall.Write(fds[1], buf); err != nil {
			if err == syscall.EAGAIN {
				break
			}
			t.Fatal(err)
		}
	}
	// Blocking again: O_NONBLOCK belongs to the open file, which the
	// child shares.
	if err := syscall.SetNonblock(fds[1], false); err != nil {
		t.Fatal(err)
	}
	r, w = os.NewFile(uintptr(fds[0]), "stderr-r"), os.NewFile(uintptr(fds[1]), "stderr-w")
	t.Cleanup(func() { r.Close(); w.Close() })
	return r, w
}

// wchan is what the threads of process pid wait for in the kernel
// (pipe_write, futex_do_wait, ...), distinct values, comma-separated.
func wchan(pid int) string {
	tasks, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	seen := map[string]bool{}
	var out []string
	for _, task := range tasks {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + task.Name() + "/wchan")
		if s := string(b); !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return strings.Join(out, ",")
}

// TestLossWithBlockedStderrStopsCommand: docs/cli.md promises that on a
// loss "the command's process group gets SIGTERM at once, SIGKILL after
// --grace, and distlock exits with status 79", and "So the command never
// goes on running unlocked, except for the --grace you allow it after a
// loss". That holds with a stderr that takes no writes for a while: the
// keeper signals the group before it says so, the runner kills a silent
// keeper before it says so, and their messages go through a queue that
// never waits for stderr (logqueue.go). Before, both wrote first and
// blocked in the write, and COMMAND ran on without its lock, alongside the
// next holder, for as long as stderr stayed blocked.
func TestLossWithBlockedStderrStopsCommand(t *testing.T) {
	for _, stall := range []bool{false, true} {
		name := "lock lost"
		if stall {
			// The runner's part: it kills the stopped keeper and stops
			// COMMAND itself.
			name = "keeper stopped"
		}
		t.Run(name, func(t *testing.T) {
			t.Run("pipe not drained", func(t *testing.T) {
				r, w := fullPipe(t)
				lossWithStderr(t, w, func() { r.Close() }, stall) // EPIPE for whoever still writes
			})
			t.Run("terminal stopped with Ctrl-S", func(t *testing.T) {
				master, slave := openPTY(t)
				// Ctrl-S (XOFF) typed at the terminal: with IXON, a new
				// terminal's default, its output stops until Ctrl-Q.
				if _, err := master.Write([]byte{0x13}); err != nil {
					t.Fatal(err)
				}
				lossWithStderr(t, slave, func() { _, _ = master.Write([]byte{0x11}) }, stall)
			})
		})
	}
}

// lossWithStderr runs COMMAND with distlock's stderr w, which takes no
// writes until unblock, then has the lock lost (force-released) or, with
// stall, its keeper stopped (SIGSTOP), and fails unless COMMAND, which
// ignores SIGTERM, gets SIGTERM and then SIGKILL, and distlock exits 79.
func lossWithStderr(t *testing.T, w *os.File, unblock func(), stall bool) {
	env, c, _ := server(t)
	dir := t.TempDir()
	const ttl, grace = 3 * time.Second, time.Second
	// COMMAND notes SIGTERM and ignores it: only the SIGKILL after grace,
	// from the keeper's timer or the runner's, stops it. Its own stderr is
	// elsewhere: the shell would block on the blocked one, saying that its
	// sleep was terminated, before it runs the trap.
	script := `exec 2>/dev/null
trap 'echo term > marker' TERM
echo $$ > started
while :; do sleep 0.02; done`
	cmd := exec.Command(binary(t), "run", "--ttl", ttl.String(), "--grace", grace.String(), "blocked-stderr", "--", "sh", "-c", script)
	cmd.Dir = dir
	cmd.Env = append(cleanEnv(), env...)
	cmd.Stderr = w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	pid, _ := strconv.Atoi(strings.TrimSpace(waitFile(t, filepath.Join(dir, "started"), 10*time.Second)))
	keeper := childWithArg(t, cmd.Process.Pid, keeperCmd)
	t.Cleanup(func() {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		_ = syscall.Kill(keeper, syscall.SIGKILL)
		_ = cmd.Process.Kill()
		unblock()
		<-done
	})

	lost, what := time.Now(), "its lock was lost"
	// Renewal within ttl/3, then SIGTERM, SIGKILL after grace: generous
	// slack on top for a loaded machine, and still well short of forever.
	bound := ttl/3 + grace + 5*time.Second
	if stall {
		// A stopped keeper is killed half a TTL at most after it stopped
		// (docs/cli.md), and COMMAND then stopped as after a loss.
		what, bound = "its keeper was stopped", ttl/2+grace+5*time.Second
		if err := syscall.Kill(keeper, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	} else if _, err := c.ForceRelease(ctxT(t, 5*time.Second), "blocked-stderr", 0); err != nil {
		t.Fatal(err)
	}
	for !processDead(pid) {
		if time.Since(lost) > bound {
			// Meanwhile the lock is free for the next holder (once the
			// stopped keeper's lease has run out).
			code, _, _ := dl(t, env, "run", "-w", ttl.String(), "blocked-stderr", "--", "true")
			_, termErr := os.Stat(filepath.Join(dir, "marker"))
			t.Fatalf("COMMAND still running %v after %s (--ttl %v, --grace %v); SIGTERM sent: %v; "+
				"another run of the key meanwhile: exit %d; keeper waits in %q, runner in %q",
				time.Since(lost).Round(time.Millisecond), what, ttl, grace, termErr == nil, code, wchan(keeper), wchan(cmd.Process.Pid))
		}
		time.Sleep(10 * time.Millisecond) // polling another process's state
	}
	t.Logf("COMMAND gone %v after %s", time.Since(lost).Round(time.Millisecond), what)
	if _, err := os.Stat(filepath.Join(dir, "marker")); err != nil {
		t.Errorf("COMMAND got SIGKILL without SIGTERM first: %v", err)
	}
	// And distlock exits 79: at exit the keeper and then the runner give
	// their unwritten messages up after exitFlush each, rather than wait.
	ended := time.Now()
	select {
	case <-done:
		if code := cmd.ProcessState.ExitCode(); code != exitLost {
			t.Fatalf("exit %d, want %d", code, exitLost)
		}
		t.Logf("distlock exited %v after COMMAND", time.Since(ended).Round(time.Millisecond))
	case <-time.After(2*exitFlush + 5*time.Second):
		t.Fatalf("distlock still running %v after COMMAND ended; keeper waits in %q, runner in %q",
			time.Since(ended).Round(time.Millisecond), wchan(keeper), wchan(cmd.Process.Pid))
	}
}
