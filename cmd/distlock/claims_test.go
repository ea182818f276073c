package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/distlock/distlock"
)

// Tests for promises of docs/cli.md and the --help texts that had none:
// each would fail if a broken promise let COMMAND run without its lock,
// left a lock held for nobody, hung, or gave a wrong exit code.

// waitGoneProc waits, at most within, until process pid has exited.
func waitGoneProc(t *testing.T, pid int, within time.Duration, what string) {
	t.Helper()
	for deadline := time.Now().Add(within); !processDead(pid); time.Sleep(5 * time.Millisecond) { // polling another process's state
		if time.Now().After(deadline) {
			t.Fatalf("%s (pid %d) still running %v on (state %s)", what, pid, within, processState(pid))
		}
	}
}

// TestDeathWhileWaiting: while `distlock run` waits for a held lock, either
// of its two processes may die. A killed runner (kill -9) must take its
// keeper with it, so that nothing takes the lock, later, for a command that
// will never run; a killed keeper must end the runner (not leave it waiting
// forever) without running COMMAND.
func TestDeathWhileWaiting(t *testing.T) {
	env, c, _ := server(t)

	t.Run("runner killed", func(t *testing.T) {
		ctx := ctxT(t, 30*time.Second)
		l, err := c.TryLock(ctx, "wait-runner")
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		p := startDL(t, dir, env, "run", "wait-runner", "--", "touch", "ran")
		waitInLine(t, c, "wait-runner", p)
		keeper := childWithArg(t, p.cmd.Process.Pid, keeperCmd)
		t.Cleanup(func() { _ = syscall.Kill(keeper, syscall.SIGKILL) })
		signalProc(t, p, syscall.SIGKILL)
		// The keeper sees its stdin close and gives the wait up.
		waitGoneProc(t, keeper, 10*time.Second, "the keeper of a killed runner")
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		// Nobody took the freed lock: a try gets it at once.
		if code, _, stderr := dl(t, env, "run", "-n", "wait-runner", "--", "true"); code != 0 {
			t.Fatalf("after the waiting runner was killed and the holder released: exit %d %q", code, stderr)
		}
		if _, err := os.Stat(filepath.Join(dir, "ran")); err == nil {
			t.Fatal("COMMAND of a runner killed while waiting ran")
		}
	})

	t.Run("keeper killed", func(t *testing.T) {
		ctx := ctxT(t, 30*time.Second)
		l, err := c.TryLock(ctx, "wait-keeper")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
		dir := t.TempDir()
		p := startDL(t, dir, env, "run", "--log-format", "json", "wait-keeper", "--", "touch", "ran")
		waitInLine(t, c, "wait-keeper", p)
		keeper := childWithArg(t, p.cmd.Process.Pid, keeperCmd)
		if err := syscall.Kill(keeper, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		// Not a loss (nothing ran) and not "not obtained" (nobody gave up):
		// the runner's own failure, status 69.
		if code := p.wait(t, 10*time.Second); code != exitRedis {
			t.Fatalf("exit %d, want %d; stderr %s", code, exitRedis, p.stderr.String())
		}
		if _, err := os.Stat(filepath.Join(dir, "ran")); err == nil {
			t.Fatal("COMMAND ran although its keeper died before taking the lock")
		}
		// COMMAND had not started: state alone.
		if m := checkEvent(t, docEvents(t), jsonLines(t, p.stderr.String()), evKeeperDied, "state"); !strings.Contains(str(m["msg"]), "not run") {
			t.Fatalf("keeper_died message %v", m)
		}
	})
}

// TestSeveralKeysNotObtained: "If a key is not obtained within --wait, those
// already taken are released and nothing runs (status 75)". Keys are taken
// in the order of their names, so k1 is taken before k2 is found held.
func TestSeveralKeysNotObtained(t *testing.T) {
	env, c, _ := server(t)
	ctx := ctxT(t, 30*time.Second)
	l, err := c.TryLock(ctx, "k2", distlock.WithMetadata("host=other pid=1"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	for _, wait := range []string{"0", "300ms"} {
		dir := t.TempDir()
		p := startDL(t, dir, env, "run", "--wait", wait, "k2", "k1", "--", "touch", "ran")
		if code := p.wait(t, 10*time.Second); code != exitNotObtained {
			t.Fatalf("--wait %s: exit %d, want %d; stderr %q", wait, code, exitNotObtained, p.stderr.String())
		}
		if _, err := os.Stat(filepath.Join(dir, "ran")); err == nil {
			t.Fatalf("--wait %s: COMMAND ran without k2", wait)
		}
		info, err := c.Inspect(ctx, "k1")
		if err != nil {
			t.Fatal(err)
		}
		if info.Held() {
			t.Fatalf("--wait %s: k1 left held after k2 was not obtained: %+v", wait, info)
		}
	}
}

// TestKilledKeeperKillsAfterGrace: a killed keeper is treated as a loss,
// "SIGTERM, SIGKILL after --grace, status 79": a COMMAND (and a child in its
// group) that ignores SIGTERM must not run on unlocked past the grace.
func TestKilledKeeperKillsAfterGrace(t *testing.T) {
	env, _, _ := server(t)
	dir := t.TempDir()
	const grace = 500 * time.Millisecond
	script := `trap '' TERM
(trap '' TERM; while :; do sleep 0.02; done) &
echo "$$ $!" > started
while :; do sleep 0.02; done`
	p := startDL(t, dir, env, "run", "--ttl", "3s", "--grace", grace.String(), "keeper-grace", "--", "sh", "-c", script)
	pids := strings.Fields(waitFile(t, filepath.Join(dir, "started"), 10*time.Second))
	sh, _ := strconv.Atoi(pids[0])
	child, _ := strconv.Atoi(pids[1])
	t.Cleanup(func() { _ = syscall.Kill(-sh, syscall.SIGKILL) })
	keeper := childWithArg(t, p.cmd.Process.Pid, keeperCmd)
	killed := time.Now()
	if err := syscall.Kill(keeper, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 10*time.Second); code != exitLost {
		t.Fatalf("exit %d, want %d; stderr %s", code, exitLost, p.stderr.String())
	}
	if d := time.Since(killed); d < grace {
		t.Fatalf("exited %v after the keeper died, before the grace of %v", d, grace)
	}
	if !strings.Contains(p.stderr.String(), "sending SIGKILL") {
		t.Fatalf("no SIGKILL reported: %q", p.stderr.String())
	}
	waitDead(t, sh, 5*time.Second, time.Now())
	waitDead(t, child, 5*time.Second, time.Now())
}

// TestRedisFrozenStopsCommand: with Redis unreachable for a whole lease,
// COMMAND gets SIGTERM "before the lease can run out in Redis, so before
// another candidate can lead" (elect; run holds its lock the same way), and
// distlock exits 79 without waiting for Redis to come back. redis-server is
// frozen with SIGSTOP, so the key keeps its expiry; the keeper's JSON "lost"
// line is written just before it signals COMMAND's group.
func TestRedisFrozenStopsCommand(t *testing.T) {
	for _, sub := range []string{runName, electName} {
		t.Run(sub, func(t *testing.T) {
			env, c, srv := server(t)
			dir := t.TempDir()
			// The library's drift margin is TTL/100 + 2ms: 162ms here, room for
			// a loaded machine (at 8s, 82ms, a CI run told COMMAND 13ms late).
			const ttl = 16 * time.Second
			script := `trap 'echo term > marker; exit 0' TERM
echo x > started
while :; do sleep 0.02; done`
			p := startDL(t, dir, env, sub, "--log-format", "json", "--ttl", ttl.String(), "--grace", "1s", "frozen", "--", "sh", "-c", script)
			waitFile(t, filepath.Join(dir, "started"), 10*time.Second)
			// A renewal after this read only moves the expiry later: asked
			// at asked, the server's expiry is at least asked+TTL.
			ctx := ctxT(t, 10*time.Second)
			asked := time.Now()
			infos, err := c.List(ctx, "frozen")
			if err != nil || len(infos) != 1 {
				t.Fatalf("List: %+v %v", infos, err)
			}
			expiry := asked.Add(infos[0].TTL)
			srv.Signal(syscall.SIGSTOP)
			frozen := time.Now()
			t.Cleanup(func() { srv.Signal(syscall.SIGCONT) })

			waitFile(t, filepath.Join(dir, "marker"), 2*ttl)
			// Redis stays frozen: distlock must not wait for it to exit.
			if code := p.wait(t, 10*time.Second); code != exitLost {
				t.Fatalf("exit %d, want %d; stderr %s", code, exitLost, p.stderr.String())
			}
			// COMMAND's own stderr (sh's "Terminated") is among the lines.
			var ours []string
			for _, line := range strings.Split(p.stderr.String(), "\n") {
				if strings.HasPrefix(line, "{") {
					ours = append(ours, line)
				}
			}
			lost := find(t, jsonLines(t, strings.Join(ours, "\n")), "event", evLost)
			at, err := time.Parse(time.RFC3339Nano, str(lost["time"]))
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("COMMAND stopped %v after Redis froze, %v before the lease ran out in Redis",
				at.Sub(frozen).Round(time.Millisecond), expiry.Sub(at).Round(time.Millisecond))
			if !at.Before(expiry) {
				t.Fatalf("COMMAND stopped %v after its lease ran out in Redis", at.Sub(expiry))
			}
		})
	}
}

// TestElectHandsOverAndWaits: "when that COMMAND exits, the leadership
// passes to the next candidate at once" (not when the lease runs out), the
// leader exits with COMMAND's status, and a candidate's --wait ends its
// campaign with status 75 without running COMMAND.
func TestElectHandsOverAndWaits(t *testing.T) {
	env, c, _ := server(t)
	dir := t.TempDir()
	const ttl = 10 * time.Second
	script := `echo "$DISTLOCK_FENCE" > "lead.$ID"
while [ ! -e "go.$ID" ]; do sleep 0.02; done; exit 3`
	a := startDL(t, dir, append(env, "ID=A"), "elect", "--ttl", ttl.String(), "handover", "--", "sh", "-c", script)
	waitFile(t, filepath.Join(dir, "lead.A"), 10*time.Second)
	b := startDL(t, dir, append(env, "ID=B"), "elect", "--ttl", ttl.String(), "handover", "--", "sh", "-c", script)
	waitQueued(t, c, "handover", 1)

	if code, _, stderr := dl(t, append(env, "ID=C"), "elect", "--wait", "300ms", "handover", "--", "sh", "-c", script); code != exitNotObtained {
		t.Fatalf("elect --wait 300ms while another leads: exit %d, want %d; %q", code, exitNotObtained, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "lead.C")); err == nil {
		t.Fatal("a candidate that gave up ran its COMMAND")
	}

	if err := os.WriteFile(filepath.Join(dir, "go.A"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := a.wait(t, 10*time.Second); code != 3 {
		t.Fatalf("leader: exit %d, want its COMMAND's 3; stderr %s", code, a.stderr.String())
	}
	exited := time.Now()
	waitFile(t, filepath.Join(dir, "lead.B"), ttl)
	// At once: well before the leader's lease (renewed up to its exit)
	// would have run out.
	if d := time.Since(exited); d > ttl/2 {
		t.Fatalf("the next candidate led %v after the leader's COMMAND exited (--ttl %v): not handed over", d, ttl)
	}
	termA, _ := strconv.ParseInt(strings.TrimSpace(readFile(t, filepath.Join(dir, "lead.A"))), 10, 64)
	termB, _ := strconv.ParseInt(strings.TrimSpace(readFile(t, filepath.Join(dir, "lead.B"))), 10, 64)
	if termB <= termA {
		t.Fatalf("term %d after %d", termB, termA)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.B"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := b.wait(t, 10*time.Second); code != 3 {
		t.Fatalf("second leader: exit %d; stderr %s", code, b.stderr.String())
	}
}

// TestSignalsReachLeftProcesses: after COMMAND exits leaving processes in
// its group, "signals are passed on to the group ... until the last of them
// exits; only then is the lock released, and distlock exits with the
// command's own status". A SIGTERM to distlock then must reach them (else a
// service manager's stop would wait on them), not end distlock early.
func TestSignalsReachLeftProcesses(t *testing.T) {
	env, c, _ := server(t)
	dir := t.TempDir()
	script := `(trap 'echo term > marker; exit 0' TERM; while :; do sleep 0.02; done) >/dev/null 2>&1 &
echo "$$ $!" > pids; exit 3`
	p := startDL(t, dir, env, "run", "left-sig", "--", "sh", "-c", script)
	pids := strings.Fields(waitFile(t, filepath.Join(dir, "pids"), 10*time.Second))
	sh, _ := strconv.Atoi(pids[0])
	t.Cleanup(func() { _ = syscall.Kill(-sh, syscall.SIGKILL) })
	waitStderr(t, p, "left processes running in its process group", 10*time.Second)
	signalProc(t, p, syscall.SIGTERM)
	waitFile(t, filepath.Join(dir, "marker"), 10*time.Second)
	if code := p.wait(t, 10*time.Second); code != 3 {
		t.Fatalf("exit %d, want the command's 3; stderr %q", code, p.stderr.String())
	}
	if info, err := c.Inspect(ctxT(t, 5*time.Second), "left-sig"); err != nil || info.Held() {
		t.Fatalf("after the group exited: %+v %v, want released", info, err)
	}
}

// TestStalledKeeperWhenCommandExits: a keeper that is stopped (kill -STOP,
// a debugger) or hung just as COMMAND exits cannot confirm the release. The
// heartbeat that gives a silent keeper up runs only while COMMAND runs, so
// the runner must bound its wait for the answer itself: distlock exits (79:
// the lock was not released, its lease runs out) instead of hanging.
func TestStalledKeeperWhenCommandExits(t *testing.T) {
	env, c, _ := server(t)
	dir := t.TempDir()
	const ttl = 6 * time.Second // the heartbeat would give the keeper up 2s to 3s after it stopped
	script := `echo $$ > started
while [ ! -e go ]; do sleep 0.02; done; exit 5`
	p := startDL(t, dir, env, "run", "--ttl", ttl.String(), "stalled-exit", "--", "sh", "-c", script)
	command, err := strconv.Atoi(strings.TrimSpace(waitFile(t, filepath.Join(dir, "started"), 10*time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	keeper := childWithArg(t, p.cmd.Process.Pid, keeperCmd)
	t.Cleanup(func() { _ = syscall.Kill(keeper, syscall.SIGKILL) })
	if err := syscall.Kill(keeper, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// COMMAND has exited, and the stopped keeper cannot release: the lock
	// stays held on its lease (at least ttl minus a renewal interval, 4s,
	// was left when the keeper stopped).
	waitGoneProc(t, command, 5*time.Second, "COMMAND")
	if info, err := c.Inspect(ctxT(t, 5*time.Second), "stalled-exit"); err != nil || !info.Held() || info.TTL <= 0 || info.TTL > ttl {
		t.Fatalf("after COMMAND exited, keeper stopped: %+v %v, want held on a lease of at most %v", info, err, ttl)
	}
	if code := p.wait(t, keeperWait+10*time.Second); code != exitLost {
		t.Fatalf("exit %d, want %d; stderr %q", code, exitLost, p.stderr.String())
	}
	if !strings.Contains(p.stderr.String(), `lock keeper of "stalled-exit"`) {
		t.Fatalf("stderr does not explain the 79: %q", p.stderr.String())
	}
	waitGoneProc(t, keeper, 5*time.Second, "the stalled keeper")
	// Not released by the killed keeper: its lease ran out. distlock gave the
	// keeper keeperWait (15s) after COMMAND exited, longer than the 6s TTL,
	// so the lock is free now rather than held for nobody.
	if info, err := c.Inspect(ctxT(t, 5*time.Second), "stalled-exit"); err != nil || info.Held() {
		t.Fatalf("after the run: %+v %v, want free (its lease of %v ran out while distlock waited %v)", info, err, ttl, keeperWait)
	}
}

// TestOwnerNested: "--owner ID: a nested distlock run --owner ID of the
// same key does not deadlock", and the inner run's release leaves the
// outer run's hold: KEY stays held until the outer COMMAND exits.
func TestOwnerNested(t *testing.T) {
	env, c, _ := server(t)
	dir := t.TempDir()
	script := `"$BIN" run --owner job-7 --wait 5s nested -- true || exit 20
"$BIN" status nested > /dev/null || exit 21
"$BIN" run -n nested -- true; echo "other=$?" > other; exit 4`
	p := startDL(t, dir, append(env, "BIN="+binary(t)), "run", "--owner", "job-7", "nested", "--", "sh", "-c", script)
	if code := p.wait(t, 20*time.Second); code != 4 {
		t.Fatalf("exit %d, want 4 (20: the nested run failed, 21: its release freed the outer hold); stderr %q", code, p.stderr.String())
	}
	if got := strings.TrimSpace(readFile(t, filepath.Join(dir, "other"))); got != "other=75" {
		t.Fatalf("a run without the owner ID inside the owner's hold: %s, want 75", got)
	}
	if info, err := c.Inspect(ctxT(t, 5*time.Second), "nested"); err != nil || info.Held() {
		t.Fatalf("after the outer run: %+v %v, want released", info, err)
	}
}
