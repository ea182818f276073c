package main

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// shimOf returns the pid of a child of runner that is still distlock's
// shim (it has not exec'd COMMAND yet), or 0: a cheap look at
// /proc/RUNNER/task/*/children.
func shimOf(runner int) int {
	tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(runner) + "/task/*/children")
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, s := range strings.Fields(string(b)) {
			cl, err := os.ReadFile("/proc/" + s + "/cmdline")
			if err == nil && strings.Contains("\x00"+string(cl), "\x00"+execCmd+"\x00") {
				pid, _ := strconv.Atoi(s)
				return pid
			}
		}
	}
	return 0
}

// signalIn tells whether sig is in one of the signal sets fields of
// /proc/PID/status (SigPnd, ShdPnd: pending; SigCgt: caught).
func signalIn(pid int, sig syscall.Signal, fields ...string) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		name, mask, _ := strings.Cut(line, ":")
		if !slices.Contains(fields, name) {
			continue
		}
		if m, err := strconv.ParseUint(strings.TrimSpace(mask), 16, 64); err == nil && m&(1<<(sig-1)) != 0 {
			return true
		}
	}
	return false
}

// pendingSignal tells whether sig waits to be delivered to process pid.
func pendingSignal(pid int, sig syscall.Signal) bool { return signalIn(pid, sig, "SigPnd", "ShdPnd") }

// catchShim starts `distlock run key -- COMMAND` until it catches the shim
// before it execs COMMAND, with its Go runtime's signal handlers set up
// (earlier, a signal has its default action), and stops it there
// (SIGSTOP). It returns the run and the stopped shim.
func catchShim(t *testing.T, env []string, key string) (*proc, int) {
	t.Helper()
	for attempt := range 20 {
		dir := t.TempDir()
		p := startDL(t, dir, env, "run", key, "--", "sh", "-c", "echo x > started; sleep 5")
		runner := p.cmd.Process.Pid
		started := filepath.Join(dir, "started")
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
			shim := shimOf(runner)
			if shim != 0 && !signalIn(shim, syscall.SIGQUIT, "SigCgt") {
				shim = 0
			}
			if shim == 0 {
				if _, err := os.Stat(started); err == nil {
					break // COMMAND runs: missed
				}
				time.Sleep(200 * time.Microsecond) // polling for a process another one starts
				continue
			}
			if syscall.Kill(shim, syscall.SIGSTOP) != nil {
				break
			}
			for processState(shim) != "T" && processState(shim) != "" && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond) // polling another process's state
			}
			if shimOf(runner) == shim && processState(shim) == "T" {
				t.Logf("the shim caught before it exec'd COMMAND in attempt %d", attempt+1)
				return p, shim
			}
			_ = syscall.Kill(shim, syscall.SIGCONT) // COMMAND, stopped just after the exec
			break
		}
		signalProc(t, p, syscall.SIGTERM)
		p.wait(t, 10*time.Second)
	}
	t.Fatal("the shim was never caught before it exec'd COMMAND")
	return nil, 0
}

// TestSignalBeforeCommandStartsReachesIt: a signal sent to `distlock run`
// while the shim that becomes COMMAND has not exec'd it yet is passed on
// once COMMAND runs: it ends the run as it would end COMMAND, with the
// documented 128+N and the lock released, never with the shim's Go
// runtime's answer (for SIGQUIT a goroutine dump and status 2).
func TestSignalBeforeCommandStartsReachesIt(t *testing.T) {
	env, c, _ := server(t)
	for _, sig := range []syscall.Signal{syscall.SIGQUIT, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) {
			key := "early-" + strconv.Itoa(int(sig))
			p, shim := catchShim(t, env, key)
			t.Cleanup(func() { _ = syscall.Kill(shim, syscall.SIGKILL) })
			signalProc(t, p, sig)
			// A runner that passed it on would do so at once; this window
			// only gives it the chance. A signal that reaches the stopped
			// shim stays pending there until SIGCONT.
			for seen := time.Now(); time.Since(seen) < 500*time.Millisecond && !pendingSignal(shim, sig); {
				time.Sleep(2 * time.Millisecond) // polling another process's state
			}
			if pendingSignal(shim, sig) {
				t.Logf("%v reached the shim before it exec'd COMMAND", sig)
			}
			if err := syscall.Kill(shim, syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			code := p.wait(t, 10*time.Second)
			stderr := p.stderr.String()
			if code != 128+int(sig) || strings.Contains(stderr, "goroutine ") {
				t.Fatalf("%v before COMMAND started: exit %d, want %d; stderr (%d bytes) starts %q",
					sig, code, 128+int(sig), len(stderr), stderr[:min(len(stderr), 300)])
			}
			if info, err := c.Inspect(ctxT(t, 5*time.Second), key); err != nil || info.Held() {
				t.Fatalf("lock left held: %+v %v", info, err)
			}
		})
	}
}

// TestQuitAsCommandStartsExits131: SIGQUIT sent to `distlock run` just as
// COMMAND starts, 0 to 30 ms after the shim that becomes COMMAND appears,
// in 16 runs: each ends with COMMAND's 128+3, and the lock released.
func TestQuitAsCommandStartsExits131(t *testing.T) {
	env, c, _ := server(t)
	hits := 0
	for i := range 16 {
		dir := t.TempDir()
		key := "quit-early-" + strconv.Itoa(i)
		p := startDL(t, dir, env, "run", key, "--", "sh", "-c", "echo ran > ran; sleep 5")
		runner := p.cmd.Process.Pid
		shim := 0
		deadline := time.Now().Add(10 * time.Second)
		for shim == 0 && time.Now().Before(deadline) {
			shim = shimOf(runner)
			if shim == 0 {
				time.Sleep(200 * time.Microsecond) // polling for a process another one starts
			}
		}
		if shim == 0 {
			// COMMAND was exec'd before the shim was seen: not this window.
			signalProc(t, p, syscall.SIGQUIT)
			p.wait(t, 10*time.Second)
			continue
		}
		hits++
		// The shim's Go runtime must have set its handlers up: a few
		// milliseconds into its life, varied from run to run.
		seen := time.Now()
		for shimOf(runner) != 0 && time.Since(seen) < time.Duration(i)*2*time.Millisecond {
			time.Sleep(200 * time.Microsecond) // polling for a process another one starts
		}
		if shimOf(runner) == 0 {
			t.Logf("run %d: COMMAND exec'd %v after the shim was seen", i, time.Since(seen))
		}
		signalProc(t, p, syscall.SIGQUIT)
		code := p.wait(t, 10*time.Second)
		stderr := p.stderr.String()
		if info, err := c.Inspect(ctxT(t, 5*time.Second), key); err != nil || info.Held() {
			t.Fatalf("run %d: lock left held after SIGQUIT: %+v %v", i, info, err)
		}
		if code != 128+int(syscall.SIGQUIT) || strings.Contains(stderr, "goroutine ") {
			t.Fatalf("run %d: SIGQUIT as COMMAND starts: exit %d, want %d; stderr (%d bytes) starts %q",
				i, code, 128+int(syscall.SIGQUIT), len(stderr), stderr[:min(len(stderr), 300)])
		}
	}
	t.Logf("the shim was seen in %d of 16 runs", hits)
}
