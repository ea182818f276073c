package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redistest"
)

// TestCronOnce is the scheduled-job use case: every machine's crontab starts
// the job at the same moment; exactly one runs it, the others exit 75.
func TestCronOnce(t *testing.T) {
	env, _, _ := server(t)
	dir := t.TempDir()
	const procs, ticks = 10, 5
	// The job holds the lock until the test has seen the other nine give up
	// (bounded at 5s), so that every process of a tick overlaps with it
	// however slowly the machine starts them.
	job := `echo "$DISTLOCK_FENCE" >> ran.log; i=0
while [ ! -f "tick$TICK.done" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done`
	lastFence := 0
	for tick := 1; tick <= ticks; tick++ {
		exits := make(chan *proc, procs)
		for range procs {
			p := startDL(t, dir, append(env, "TICK="+strconv.Itoa(tick)),
				"run", "--wait", "0", "cron:nightly", "--", "sh", "-c", job)
			go func() {
				<-p.done
				exits <- p
			}()
		}
		var codes []int
		timeout := time.After(20 * time.Second)
		for len(codes) < procs {
			select {
			case p := <-exits:
				code := p.cmd.ProcessState.ExitCode()
				codes = append(codes, code)
				if code == exitNotObtained && !strings.Contains(p.stderr.String(), `"cron:nightly" is held`) {
					t.Errorf("tick %d: exit 75 without naming the holder: %q", tick, p.stderr.String())
				}
				if len(codes) == procs-1 {
					if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("tick%d.done", tick)), []byte("x"), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			case <-timeout:
				t.Fatalf("tick %d: only %d of %d processes exited", tick, len(codes), procs)
			}
		}
		ran, notObtained := 0, 0
		for _, c := range codes {
			switch c {
			case 0:
				ran++
			case exitNotObtained:
				notObtained++
			}
		}
		if ran != 1 || notObtained != procs-1 {
			t.Fatalf("tick %d: exit codes %v, want one 0 and nine %d", tick, codes, exitNotObtained)
		}
		fences := strings.Fields(readFile(t, filepath.Join(dir, "ran.log")))
		if len(fences) != tick {
			t.Fatalf("after tick %d the job ran %d times: fences %v", tick, len(fences), fences)
		}
		f, _ := strconv.Atoi(fences[tick-1])
		if f <= lastFence {
			t.Fatalf("tick %d: fence %d not above %d", tick, f, lastFence)
		}
		lastFence = f
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestLostLockStopsCommand takes the lock from under a running command, by
// a forced release and by a Redis restarted empty: the command gets SIGTERM
// at the holder's next renewal, a third of the TTL later, long before the
// lease would have run out, and distlock exits 79.
func TestLostLockStopsCommand(t *testing.T) {
	losses := []struct {
		name string
		lose func(t *testing.T, c *distlock.Client, srv *redistest.Server)
	}{
		{"forced release", func(t *testing.T, c *distlock.Client, _ *redistest.Server) {
			if _, err := c.ForceRelease(ctxT(t, 5*time.Second), "lost", 0); err != nil {
				t.Fatal(err)
			}
		}},
		// Killed and back without its data: the keeper's connections
		// break, and its next renewal finds the lock gone.
		{"redis restarted empty", func(t *testing.T, _ *distlock.Client, srv *redistest.Server) { srv.Restart(t) }},
	}
	for _, loss := range losses {
		t.Run(loss.name, func(t *testing.T) {
			env, c, srv := server(t)
			dir := t.TempDir()
			const ttl = 3 * time.Second // renewal every second
			script := `trap 'echo term > marker; exit 0' TERM
echo "$DISTLOCK_FENCE" > started
while :; do sleep 0.02; done`
			p := startDL(t, dir, env, "run", "--ttl", ttl.String(), "lost", "--", "sh", "-c", script)
			waitFile(t, filepath.Join(dir, "started"), 10*time.Second)

			lost := time.Now()
			loss.lose(t, c, srv)
			waitFile(t, filepath.Join(dir, "marker"), 5*time.Second)
			elapsed := time.Since(lost)
			if code := p.wait(t, 10*time.Second); code != exitLost {
				t.Fatalf("exit %d, want %d (lost); stderr: %s", code, exitLost, p.stderr.String())
			}
			// One renewal interval (1s) plus margin for a loaded machine, and
			// clearly before the lease (3s) would have run out by itself.
			if elapsed > ttl/3+time.Second {
				t.Fatalf("SIGTERM arrived %v after the loss, want within a renewal interval (%v)", elapsed, ttl/3)
			}
			t.Logf("SIGTERM %v after the loss (renewal interval %v)", elapsed, ttl/3)
			if !strings.Contains(p.stderr.String(), `lock "lost" lost`) {
				t.Fatalf("stderr does not explain the loss: %q", p.stderr.String())
			}
			if info, err := c.Inspect(ctxT(t, 5*time.Second), "lost"); err != nil || info.Held() {
				t.Fatalf("after the run: %+v %v, want released", info, err)
			}
		})
	}
}

// TestLostLockKillsAfterGrace: a command that ignores SIGTERM is killed
// after --grace, with everything in its process group.
func TestLostLockKillsAfterGrace(t *testing.T) {
	env, _, _ := server(t)
	dir := t.TempDir()
	script := `trap '' TERM
(trap '' TERM; while :; do sleep 0.02; done) &
echo $! > started
while :; do sleep 0.02; done`
	p := startDL(t, dir, env, "run", "--ttl", "600ms", "--grace", "400ms", "stubborn", "--", "sh", "-c", script)
	grandchild, _ := strconv.Atoi(strings.TrimSpace(waitFile(t, filepath.Join(dir, "started"), 10*time.Second)))
	if code, _, stderr := dl(t, env, "release", "--force", "--yes", "stubborn"); code != 0 {
		t.Fatalf("release: %d %s", code, stderr)
	}
	if code := p.wait(t, 10*time.Second); code != exitLost {
		t.Fatalf("exit %d, want %d; stderr: %s", code, exitLost, p.stderr.String())
	}
	if !strings.Contains(p.stderr.String(), "sending SIGKILL") {
		t.Fatalf("no SIGKILL reported: %q", p.stderr.String())
	}
	// The background child was in the same process group; wait for the
	// kernel to reap it (its parent, the shell, is gone too).
	deadline := time.Now().Add(5 * time.Second)
	for syscall.Kill(grandchild, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("process %d of the command's group still alive", grandchild)
		}
		time.Sleep(10 * time.Millisecond) // polling another process's state
	}
}

// TestLossWithBackgroundJobIsNotCalledHeld: after a loss, a command that
// exits on SIGTERM while its background job ignores it is not reported as
// leaving processes "held" under the lock. The keeper writes "lost" before
// it signals the group, so the runner has the word when COMMAND exits;
// several runs, since which of the two it saw first was a coin toss.
func TestLossWithBackgroundJobIsNotCalledHeld(t *testing.T) {
	env, _, _ := server(t)
	script := `(trap '' TERM; while :; do sleep 0.02; done) &
echo started > started
while :; do sleep 0.02; done`
	for i := range 6 {
		dir := t.TempDir()
		key := fmt.Sprintf("bgloss%d", i)
		p := startDL(t, dir, env, "run", "--ttl", "600ms", "--grace", "300ms", key, "--", "sh", "-c", script)
		waitFile(t, filepath.Join(dir, "started"), 10*time.Second)
		if code, _, stderr := dl(t, env, "release", "--force", "--yes", key); code != 0 {
			t.Fatalf("release: %d %s", code, stderr)
		}
		if code := p.wait(t, 10*time.Second); code != exitLost {
			t.Fatalf("exit %d, want %d; stderr: %s", code, exitLost, p.stderr.String())
		}
		if strings.Contains(p.stderr.String(), "left processes running") {
			t.Fatalf("run %d: a lost lock reported as held for the background job: %q", i, p.stderr.String())
		}
	}
}

func TestRunExitCodes(t *testing.T) {
	env, c, _ := server(t)
	notExec := filepath.Join(t.TempDir(), "not-executable")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	down, _ := redistest.FreePort()
	cases := []struct {
		name string
		args []string
		env  []string
		code int
		msg  string // in stderr
	}{
		{"success", []string{"run", "k", "--", "true"}, env, 0, ""},
		{"child code", []string{"run", "k", "--", "sh", "-c", "exit 42"}, env, 42, ""},
		{"no double dash", []string{"run", "k", "sh", "-c", "exit 3"}, env, 3, ""},
		{"killed by signal", []string{"run", "k", "--", "sh", "-c", "kill -KILL $$"}, env, 128 + 9, ""},
		{"not found", []string{"run", "k", "--", "no-such-command-xyz"}, env, exitNotFound, `cannot run "no-such-command-xyz"`},
		{"not executable", []string{"run", "k", "--", notExec}, env, exitCannotRun, "permission denied"},
		{"missing command", []string{"run", "k"}, env, exitUsage, "missing COMMAND"},
		{"missing key", []string{"run"}, env, exitUsage, "missing KEY"},
		{"unknown flag", []string{"run", "--frobnicate", "k", "--", "true"}, env, exitUsage, "frobnicate"},
		{"bad duration", []string{"run", "--wait", "soon", "k", "--", "true"}, env, exitUsage, "bad duration"},
		{"bad ttl", []string{"run", "--ttl", "0", "k", "--", "true"}, env, exitUsage, "--ttl"},
		{"bad url", []string{"run", "--redis", "http://x", "k", "--", "true"}, nil, exitUsage, "unknown scheme"},
		{"two urls without quorum", []string{"run", "--redis", "redis://a", "--redis", "redis://b", "k", "--", "true"}, nil, exitUsage, "--quorum"},
		{"unknown command", []string{"frob"}, env, exitUsage, "unknown command"},
		{"redis down", []string{"run", "k", "--", "true"}, []string{fmt.Sprintf("DISTLOCK_REDIS_URL=redis://127.0.0.1:%d", down)}, exitRedis, "connection refused"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := dl(t, tc.env, tc.args...)
			if code != tc.code || !strings.Contains(stderr, tc.msg) {
				t.Fatalf("exit %d, stderr %q; want %d and %q", code, stderr, tc.code, tc.msg)
			}
		})
	}

	t.Run("found through PATH=.", func(t *testing.T) {
		// As the shell, flock(1) and env(1) do: PATH names the current
		// directory (".", a relative entry, or an empty one).
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "here"), []byte("#!/bin/sh\necho ran here\nexit 5\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		for _, path := range []string{".:" + os.Getenv("PATH"), ":" + os.Getenv("PATH")} {
			p := startDL(t, dir, append(env, "PATH="+path), "run", "k", "--", "here")
			if code := p.wait(t, 10*time.Second); code != 5 || p.stdout.String() != "ran here\n" {
				t.Fatalf("PATH=%s: exit %d, stdout %q, stderr %q; want the command's 5", path, code, p.stdout.String(), p.stderr.String())
			}
		}
	})

	t.Run("not obtained", func(t *testing.T) {
		ctx := ctxT(t, 10*time.Second)
		l, err := c.TryLock(ctx, "busy", distlock.WithMetadata("host=other pid=1"))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
		code, _, stderr := dl(t, env, "run", "--wait", "0", "busy", "--", "touch", "ran")
		if code != exitNotObtained || !strings.Contains(stderr, "host=other pid=1") {
			t.Fatalf("--wait 0: exit %d %q, want %d naming the holder", code, stderr, exitNotObtained)
		}
		start := time.Now()
		code, _, stderr = dl(t, env, "run", "--wait", "300ms", "busy", "--", "true")
		if code != exitNotObtained || time.Since(start) < 300*time.Millisecond || !strings.Contains(stderr, "after waiting 300ms") {
			t.Fatalf("--wait 300ms: exit %d after %v: %q", code, time.Since(start), stderr)
		}
	})

	t.Run("waits for the holder", func(t *testing.T) {
		ctx := ctxT(t, 10*time.Second)
		l, err := c.TryLock(ctx, "handoff")
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		p := startDL(t, dir, env, "run", "--wait", "10s", "handoff", "--", "sh", "-c", `echo "$DISTLOCK_FENCE" > ran`)
		// In the lock's line: it found the lock held and waits, so the
		// release below is what wakes it (not a lock it found free).
		waitInLine(t, c, "handoff", p)
		if _, err := os.Stat(filepath.Join(dir, "ran")); err == nil {
			t.Fatal("ran while the lock was held")
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if code := p.wait(t, 10*time.Second); code != 0 {
			t.Fatalf("exit %d: %s", code, p.stderr.String())
		}
		if f, _ := strconv.ParseInt(strings.TrimSpace(readFile(t, filepath.Join(dir, "ran"))), 10, 64); f <= l.Fence() {
			t.Fatalf("fence %d, want above %d", f, l.Fence())
		}
	})
}

// TestRunEnvironment: the command sees its lock's key, fence and token, and
// they are the ones Redis holds while it runs.
func TestRunEnvironment(t *testing.T) {
	env, _, _ := server(t)
	dir := t.TempDir()
	script := `printf '%s\n%s\n%s\n' "$DISTLOCK_KEY" "$DISTLOCK_FENCE" "$DISTLOCK_TOKEN" > env
"$BIN" status --json "$DISTLOCK_KEY" > status.json`
	p := startDL(t, dir, append(env, "BIN="+binary(t)), "run", "--owner", "", "--meta", "job=42", "env-key", "--", "sh", "-c", script)
	if code := p.wait(t, 10*time.Second); code != exitUsage {
		t.Fatalf("--owner '': exit %d, want %d", code, exitUsage)
	}
	p = startDL(t, dir, append(env, "BIN="+binary(t)), "run", "--meta", "job=42", "env-key", "--", "sh", "-c", script)
	if code := p.wait(t, 10*time.Second); code != 0 {
		t.Fatalf("exit %d: %s", code, p.stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(readFile(t, filepath.Join(dir, "env"))), "\n")
	var st struct {
		Locks []lockJSON `json:"locks"`
	}
	if err := json.Unmarshal([]byte(readFile(t, filepath.Join(dir, "status.json"))), &st); err != nil {
		t.Fatal(err)
	}
	if len(lines) != 3 || len(st.Locks) != 1 {
		t.Fatalf("env %q, status %+v", lines, st)
	}
	got := st.Locks[0]
	if lines[0] != "env-key" || lines[1] != strconv.FormatInt(got.Fence, 10) || lines[2] != got.Owner || len(lines[2]) < 22 {
		t.Fatalf("env %q, but Redis holds %+v", lines, got)
	}
	host, _ := os.Hostname()
	if got.Host != host || got.PID != int64(p.cmd.Process.Pid) || !strings.HasSuffix(got.Meta, " cmd=sh job=42") {
		t.Fatalf("metadata %+v, want host %s pid %d cmd=sh job=42", got, host, p.cmd.Process.Pid)
	}
}

// TestSignalForwarding: SIGTERM, SIGINT, SIGHUP and SIGQUIT reach the
// command; the lock is still held while it handles them and released once
// it has exited.
func TestSignalForwarding(t *testing.T) {
	env, c, _ := server(t)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT} {
		t.Run(sig.String(), func(t *testing.T) {
			dir := t.TempDir()
			script := `trap '"$BIN" status --json sig > during.json; echo "$1" > marker; exit 7' TERM INT HUP QUIT
echo x > started
while :; do sleep 0.02; done`
			p := startDL(t, dir, append(env, "BIN="+binary(t)), "run", "sig", "--", "sh", "-c", script, "sh", sig.String())
			waitFile(t, filepath.Join(dir, "started"), 10*time.Second)
			signalProc(t, p, sig)
			if code := p.wait(t, 10*time.Second); code != 7 {
				t.Fatalf("exit %d, want the command's 7; stderr %s", code, p.stderr.String())
			}
			if m := strings.TrimSpace(readFile(t, filepath.Join(dir, "marker"))); m != sig.String() {
				t.Fatalf("marker %q", m)
			}
			if during := readFile(t, filepath.Join(dir, "during.json")); !strings.Contains(during, `"key": "sig"`) {
				t.Fatalf("lock not held while the command handled the signal: %s", during)
			}
			if info, err := c.Inspect(ctxT(t, 5*time.Second), "sig"); err != nil || info.Held() {
				t.Fatalf("after exit: %+v %v, want released", info, err)
			}
		})
	}

	t.Run("while waiting", func(t *testing.T) {
		ctx := ctxT(t, 10*time.Second)
		l, err := c.TryLock(ctx, "held")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
		dir := t.TempDir()
		p := startDL(t, dir, env, "run", "held", "--", "touch", "ran")
		// In line, so the runner has its signal handlers (installed before
		// it starts the keeper that joins the line) and the SIGTERM ends a
		// wait, not a process still starting up.
		waitInLine(t, c, "held", p)
		signalProc(t, p, syscall.SIGTERM)
		if code := p.wait(t, 10*time.Second); code != 128+int(syscall.SIGTERM) {
			t.Fatalf("exit %d, want %d; %s", code, 128+int(syscall.SIGTERM), p.stderr.String())
		}
		if _, err := os.Stat(filepath.Join(dir, "ran")); err == nil {
			t.Fatal("command ran without the lock")
		}
	})
}

// TestSignalToRunnerAndKeeper: SIGTERM sent to both distlock processes at
// once (pkill distlock, a service manager stopping a control group) must
// not kill the keeper: it goes to COMMAND, whose exit releases the lock,
// and distlock exits with COMMAND's status.
func TestSignalToRunnerAndKeeper(t *testing.T) {
	env, c, _ := server(t)
	dir := t.TempDir()
	script := `trap 'exit 3' TERM
echo x > started
while :; do sleep 0.02; done`
	p := startDL(t, dir, env, "run", "both-termed", "--", "sh", "-c", script)
	waitFile(t, filepath.Join(dir, "started"), 10*time.Second)
	keeper := childWithArg(t, p.cmd.Process.Pid, keeperCmd)
	t.Cleanup(func() { _ = syscall.Kill(keeper, syscall.SIGKILL) })
	// The keeper first: its death, if it dies, comes before the runner acts.
	if err := syscall.Kill(keeper, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	signalProc(t, p, syscall.SIGTERM)
	if code := p.wait(t, 10*time.Second); code != 3 {
		t.Fatalf("exit %d, want the command's 3; stderr %s", code, p.stderr.String())
	}
	if info, err := c.Inspect(ctxT(t, 5*time.Second), "both-termed"); err != nil || info.Held() {
		t.Fatalf("after exit: %+v %v, want released", info, err)
	}
}

// TestIgnoredSignalsStayIgnored: signals that distlock is started with
// ignored stay ignored, as under flock(1): COMMAND inherits that, and
// distlock does not pass them on. `nohup distlock run ... &` ignores SIGHUP,
// and a script's background job SIGINT; a terminal's hangup (SIGHUP from the
// shell to distlock, from the kernel to the foreground job) must not stop
// such a run.
func TestIgnoredSignalsStayIgnored(t *testing.T) {
	env, c, _ := server(t)
	dir := t.TempDir()
	script := `grep '^SigIgn:' /proc/self/status > sigign; echo $$ > started
while [ ! -f go ]; do sleep 0.02; done; exit 4`
	p := startProc(t, dir, append(env, "BIN="+binary(t)), "sh", "-c", `trap '' HUP INT; exec "$BIN" "$@"`,
		"sh", "run", "nohup", "--", "sh", "-c", script)
	pgid, _ := strconv.Atoi(strings.TrimSpace(waitFile(t, filepath.Join(dir, "started"), 10*time.Second)))
	t.Cleanup(func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) })

	_, hex, _ := strings.Cut(strings.TrimSpace(readFile(t, filepath.Join(dir, "sigign"))), "\t")
	mask, err := strconv.ParseUint(hex, 16, 64)
	if err != nil {
		t.Fatalf("SigIgn %q: %v", hex, err)
	}
	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGINT} {
		if mask&(1<<(sig-1)) == 0 {
			t.Errorf("COMMAND does not ignore %v, which distlock was started with ignored (SigIgn %s)", sig, hex)
		}
	}
	// A hangup and a Ctrl-C meant for the script: to distlock and to
	// COMMAND's process group. A signal whose action is to terminate has
	// done so by the time kill returns, so COMMAND would be dying by now.
	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGINT} {
		signalProc(t, p, sig)
		if err := syscall.Kill(-pgid, sig); err != nil {
			t.Fatal(err)
		}
	}
	if info, err := c.Inspect(ctxT(t, 5*time.Second), "nohup"); err != nil || !info.Held() {
		t.Errorf("lock not held after the ignored signals: %+v %v", info, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 10*time.Second); code != 4 {
		t.Fatalf("exit %d, want the command's 4; stderr %q", code, p.stderr.String())
	}
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"help"}, {"run", "--help"}, {"status", "-h"}, {"release", "--help"}, {"help", "urls"}, {"help", "run"}} {
		code, out, stderr := dl(t, nil, args...)
		if code != 0 || stderr != "" || !strings.Contains(out, "usage: distlock") && !strings.Contains(out, "redis-sentinel://") {
			t.Fatalf("%v: exit %d, stdout %q, stderr %q", args, code, out, stderr)
		}
		if args[0] != "help" || len(args) == 1 {
			if !strings.Contains(out, "Exit status") {
				t.Fatalf("%v: help does not document the exit status", args)
			}
		}
	}
	if code, _, stderr := dl(t, nil); code != exitUsage || !strings.Contains(stderr, "usage: distlock") {
		t.Fatalf("no arguments: exit %d %q", code, stderr)
	}
}

// TestRunFair: --fair waiters get the lock in arrival order.
func TestRunFair(t *testing.T) {
	env, c, _ := server(t)
	ctx := ctxT(t, 20*time.Second)
	holder, err := c.TryLock(ctx, "line", distlock.WithFair())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var procs []*proc
	for i := 1; i <= 3; i++ {
		procs = append(procs, startDL(t, dir, env, "run", "--fair", "line", "--", "sh", "-c", "echo "+strconv.Itoa(i)+" >> order"))
		deadline := time.Now().Add(10 * time.Second)
		for { // arrival order is the order in the line: wait for each to join
			info, err := c.Inspect(ctx, "line")
			if err != nil {
				t.Fatal(err)
			}
			if info.Queued == int64(i) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("waiter %d not in line: %+v", i, info)
			}
			time.Sleep(5 * time.Millisecond) // polling another process's progress
		}
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		if code := p.wait(t, 15*time.Second); code != 0 {
			t.Fatalf("exit %d: %s", code, p.stderr.String())
		}
	}
	if order := strings.Fields(readFile(t, filepath.Join(dir, "order"))); strings.Join(order, ",") != "1,2,3" {
		t.Fatalf("ran in order %v, want 1,2,3", order)
	}
}

// TestRedisGoneWhileWaiting: Redis that goes away while distlock run waits
// is reported as such when --wait ends (status 69), not as a holder in the
// way (75): waiters are woken, they do not poll, so the wait itself is no
// news of Redis.
func TestRedisGoneWhileWaiting(t *testing.T) {
	env, c, srv := server(t)
	ctx := ctxT(t, 20*time.Second)
	if _, err := c.TryLock(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	p := startDL(t, t.TempDir(), env, "run", "--wait", "2s", "gone", "--", "true")
	waitInLine(t, c, "gone", p)
	srv.Kill()
	killed := time.Now()
	if code := p.wait(t, 10*time.Second); code != exitRedis {
		t.Fatalf("exit %d, want %d; stderr %q", code, exitRedis, p.stderr.String())
	}
	if msg := p.stderr.String(); !strings.Contains(msg, "not obtained after waiting 2s") || !strings.Contains(msg, "Redis at") {
		t.Fatalf("stderr %q", msg)
	}
	// Within the wait, the check (at most 1s) and cleanup, with slack.
	if d := time.Since(killed); d > 5*time.Second {
		t.Fatalf("exited %v after Redis went, with --wait 2s", d)
	}
}

// TestNestedRunGetsItsOwnEnvironment: docs/cli.md's table says COMMAND
// gets DISTLOCK_KEY "the lock's name", DISTLOCK_FENCE "the fencing token:
// larger than that of every earlier holder of the key" and DISTLOCK_TOKEN
// "the random token of this grant". A `distlock run` inside another's
// COMMAND (a cron script that takes a second lock, a nested --owner run)
// inherits the outer run's; startJob (jobEnviron) leaves them out of the
// environment it adds its own to. Before, the shim, a Go program, exec'd
// COMMAND with os.Environ(), where Go keeps the first of duplicate
// variables, so COMMAND got the outer lock's key, fence and token, and two
// inner runs in one outer run the same fence.
func TestNestedRunGetsItsOwnEnvironment(t *testing.T) {
	env, _, _ := server(t)
	dir := t.TempDir()
	inner := `printf '%s\n' "$DISTLOCK_KEY" "$DISTLOCK_FENCE" "$DISTLOCK_TOKEN" > "env.$N"
"$BIN" status --json inner > "status.$N"`
	script := `printf '%s\n' "$DISTLOCK_KEY" "$DISTLOCK_FENCE" "$DISTLOCK_TOKEN" > env.outer
N=1 "$BIN" run inner -- sh -c "$INNER" && N=2 "$BIN" run inner -- sh -c "$INNER"`
	p := startDL(t, dir, append(env, "BIN="+binary(t), "INNER="+inner), "run", "outer", "--", "sh", "-c", script)
	if code := p.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("exit %d; stderr %s", code, p.stderr.String())
	}
	outer := strings.Fields(readFile(t, filepath.Join(dir, "env.outer")))
	for _, n := range []string{"1", "2"} {
		got := strings.Fields(readFile(t, filepath.Join(dir, "env."+n)))
		status := readFile(t, filepath.Join(dir, "status."+n))
		if len(got) != 3 || got[0] != "inner" ||
			!strings.Contains(status, `"fence": `+got[1]+",") || !strings.Contains(status, `"owner": "`+got[2]+`"`) {
			t.Errorf("inner run %s: COMMAND got DISTLOCK_KEY, _FENCE, _TOKEN %q (the outer run's are %q); Redis holds inner as %s",
				n, got, outer, strings.Join(strings.Fields(status), " "))
		}
	}
}
