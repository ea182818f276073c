package main

import (
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestKilledRunnerKillsCommand (issue 10, item 1): kill -9 on `distlock run`
// kills COMMAND's whole process group, a shell script's background child
// included, within a third of the TTL; and a second runner waiting for the
// lock runs its command only after the first command's last write.
func TestKilledRunnerKillsCommand(t *testing.T) {
	env, c, _ := server(t)
	dir := t.TempDir()
	// A third of it, the bound below, is room for a loaded machine; a lock
	// left to expire would take at least two thirds.
	const ttl = 6 * time.Second
	// Child and grandchild both append timestamps to one log, as fast as
	// they can.
	script := `(while :; do echo "A $(date +%s%N)" >> log; sleep 0.01; done) &
echo "$$ $!" > pids
while :; do echo "A $(date +%s%N)" >> log; sleep 0.01; done`
	a := startDL(t, dir, env, "run", "--ttl", ttl.String(), "killed", "--", "sh", "-c", script)
	var pids []int
	for _, f := range strings.Fields(waitFile(t, filepath.Join(dir, "pids"), 10*time.Second)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	// The child leads COMMAND's process group: whatever happens, do not
	// leave it running (it holds the runner's output pipes).
	t.Cleanup(func() { _ = syscall.Kill(-pids[0], syscall.SIGKILL) })

	b := startDL(t, dir, env, "run", "--ttl", ttl.String(), "killed", "--", "sh", "-c", `echo "B $(date +%s%N)" >> log`)
	waitInLine(t, c, "killed", b)

	killed := time.Now()
	signalProc(t, a, syscall.SIGKILL)
	for _, pid := range pids {
		waitDead(t, pid, ttl/3, killed)
	}
	t.Logf("child and grandchild gone %v after kill -9 on the runner", time.Since(killed).Round(time.Millisecond))

	if code := b.wait(t, 15*time.Second); code != 0 {
		t.Fatalf("second runner: exit %d; stderr %s", code, b.stderr.String())
	}
	var lastA, firstB int64
	for _, line := range strings.Split(strings.TrimSpace(readFile(t, filepath.Join(dir, "log"))), "\n") {
		who, stamp, _ := strings.Cut(line, " ")
		ns, err := strconv.ParseInt(stamp, 10, 64)
		if err != nil {
			continue // a line cut short by SIGKILL
		}
		switch who {
		case "A":
			lastA = max(lastA, ns)
		case "B":
			firstB = ns
		}
	}
	if lastA == 0 || firstB == 0 {
		t.Fatalf("log lacks A or B lines:\n%s", readFile(t, filepath.Join(dir, "log")))
	}
	if lastA >= firstB {
		t.Fatalf("the first command wrote %v after the second one started", time.Duration(lastA-firstB))
	}
	t.Logf("second command started %v after the first one's last write, %v after the kill",
		time.Duration(firstB-lastA).Round(time.Millisecond), time.Unix(0, firstB).Sub(killed).Round(time.Millisecond))
	// Released by the keeper once COMMAND was gone, not left to expire
	// (which takes up to two thirds of the TTL after the last renewal).
	if started := time.Unix(0, firstB).Sub(killed); started > ttl/3 {
		t.Errorf("second command started %v after the kill: the lock was not released", started)
	}
	if !strings.Contains(a.stderr.String(), "died; killed sh's process group") {
		t.Errorf("the keeper did not report the kill: %q", a.stderr.String())
	}
}

// waitDead fails the test unless process pid is gone (or a zombie) within
// d of since.
func waitDead(t *testing.T, pid int, d time.Duration, since time.Time) {
	t.Helper()
	for !processDead(pid) {
		if time.Since(since) > d {
			t.Fatalf("process %d still alive %v after the runner was killed (state %s)", pid, d, processState(pid))
		}
		time.Sleep(2 * time.Millisecond) // polling another process's state
	}
}

func processDead(pid int) bool {
	s := processState(pid)
	return s == "" || s == "Z" || s == "X"
}

// processState is the state letter in /proc/PID/stat (R, S, T, Z...), or ""
// if there is no such process.
func processState(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	_, after, _ := strings.Cut(string(b), ") ")
	state, _, _ := strings.Cut(after, " ")
	return state
}

// TestKilledKeeper: if the lock keeper dies, nothing renews the lock any
// more; the runner treats that as a loss: SIGTERM to COMMAND, status 79.
func TestKilledKeeper(t *testing.T) {
	env, _, _ := server(t)
	dir := t.TempDir()
	script := `trap 'echo term > marker; exit 0' TERM
echo x > started
while :; do sleep 0.02; done`
	p := startDL(t, dir, env, "run", "keeper", "--", "sh", "-c", script)
	waitFile(t, filepath.Join(dir, "started"), 10*time.Second)
	keeper := childWithArg(t, p.cmd.Process.Pid, keeperCmd)
	if err := syscall.Kill(keeper, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFile(t, filepath.Join(dir, "marker"), 5*time.Second)
	if code := p.wait(t, 10*time.Second); code != exitLost {
		t.Fatalf("exit %d, want %d; stderr %s", code, exitLost, p.stderr.String())
	}
	if !strings.Contains(p.stderr.String(), "lock keeper of \"keeper\" died") {
		t.Fatalf("stderr does not explain: %q", p.stderr.String())
	}
}

// TestKeeperKilledDuringGrace: the keeper that is stopping COMMAND after a
// loss holds the SIGKILL timer; if it dies within --grace, the runner keeps
// the deadline, so that a COMMAND that ignores SIGTERM is still killed
// within --grace of the loss instead of running on without the lock.
func TestKeeperKilledDuringGrace(t *testing.T) {
	env, c, _ := server(t)
	dir := t.TempDir()
	const grace = 3 * time.Second
	script := `trap 'echo term > marker' TERM
echo $$ > started
while :; do sleep 0.02; done`
	p := startDL(t, dir, env, "run", "--ttl", "1s", "--grace", grace.String(), "graceless", "--", "sh", "-c", script)
	pid, _ := strconv.Atoi(strings.TrimSpace(waitFile(t, filepath.Join(dir, "started"), 10*time.Second)))
	t.Cleanup(func() { _ = syscall.Kill(-pid, syscall.SIGKILL) })
	keeper := childWithArg(t, p.cmd.Process.Pid, keeperCmd)
	if _, err := c.ForceRelease(ctxT(t, 5*time.Second), "graceless", 0); err != nil {
		t.Fatal(err)
	}
	// The keeper wrote "lost" before it sent SIGTERM: the runner reads it
	// before the EOF of the keeper's death.
	waitFile(t, filepath.Join(dir, "marker"), 5*time.Second)
	termed := time.Now()
	if err := syscall.Kill(keeper, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitDead(t, pid, grace+2*time.Second, termed)
	t.Logf("COMMAND gone %v after SIGTERM (--grace %v)", time.Since(termed).Round(time.Millisecond), grace)
	if code := p.wait(t, 10*time.Second); code != exitLost {
		t.Fatalf("exit %d, want %d; stderr %s", code, exitLost, p.stderr.String())
	}
	if !strings.Contains(p.stderr.String(), "died (signal: killed) while stopping sh after the loss") {
		t.Fatalf("stderr does not explain: %q", p.stderr.String())
	}
}

// TestStalledKeeperDuringGraceStillKillsAtGrace: docs/cli.md: "If it [the
// keeper] dies (or stalls, below) while it is stopping the command after a
// loss, the runner sends the SIGKILL itself, --grace after it learned of the
// loss." The keeper is stopped right after it sent SIGTERM, its SIGKILL
// timer with it; COMMAND ignores SIGTERM and must still be killed --grace
// after the loss, not when the heartbeat gives the keeper up (two or three
// windows of TTL/6 later), and the SIGKILL is reported once.
func TestStalledKeeperDuringGraceStillKillsAtGrace(t *testing.T) {
	env, c, _ := server(t)
	dir := t.TempDir()
	const (
		ttl   = 9 * time.Second // heartbeat windows of 1.5 s
		grace = 500 * time.Millisecond
	)
	script := `trap 'echo term > marker' TERM
echo $$ > started
while :; do sleep 0.02; done`
	p := startDL(t, dir, env, "run", "--ttl", ttl.String(), "--grace", grace.String(), "stall-grace", "--", "sh", "-c", script)
	pid, _ := strconv.Atoi(strings.TrimSpace(waitFile(t, filepath.Join(dir, "started"), 10*time.Second)))
	t.Cleanup(func() { _ = syscall.Kill(-pid, syscall.SIGKILL) })
	keeper := childWithArg(t, p.cmd.Process.Pid, keeperCmd)
	t.Cleanup(func() { _ = syscall.Kill(keeper, syscall.SIGKILL) })
	if _, err := c.ForceRelease(ctxT(t, 5*time.Second), "stall-grace", 0); err != nil {
		t.Fatal(err)
	}
	// The keeper wrote "lost" and sent SIGTERM: it stalls now, within
	// --grace, its SIGKILL timer with it.
	waitFile(t, filepath.Join(dir, "marker"), ttl)
	termed := time.Now()
	if err := syscall.Kill(keeper, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// --grace and a generous second for a loaded machine; the heartbeat
	// would take 3 s to 4.5 s.
	for !processDead(pid) {
		if time.Since(termed) > grace+time.Second {
			// Let it end, to see how late the SIGKILL came.
			for !processDead(pid) && time.Since(termed) < ttl {
				time.Sleep(5 * time.Millisecond) // polling another process's state
			}
			t.Fatalf("COMMAND ran on %v after SIGTERM with the lock lost (--grace %v); stderr %s",
				time.Since(termed).Round(time.Millisecond), grace, p.stderr.String())
		}
		time.Sleep(2 * time.Millisecond) // polling another process's state
	}
	t.Logf("COMMAND gone %v after SIGTERM", time.Since(termed).Round(time.Millisecond))
	// The stopped keeper does not answer the runner's "done": it is given
	// up after keeperWait (docs/cli.md: 15 s).
	if code := p.wait(t, keeperWait+10*time.Second); code != exitLost {
		t.Fatalf("exit %d, want %d; stderr %s", code, exitLost, p.stderr.String())
	}
	if n := strings.Count(p.stderr.String(), "sending SIGKILL"); n != 1 {
		t.Fatalf("the SIGKILL reported %d times, want once; stderr %s", n, p.stderr.String())
	}
}

// TestKilledRunnerAndKeeper: when both distlock processes die at once
// (`pkill -9 distlock` names both), neither can stop COMMAND for the other;
// the kernel kills it (the group's leader, COMMAND itself) as its parent,
// the runner, dies, instead of leaving it to run on while the lease runs
// out.
func TestKilledRunnerAndKeeper(t *testing.T) {
	env, _, _ := server(t)
	dir := t.TempDir()
	script := `echo $$ > started
while :; do sleep 0.02; done`
	p := startDL(t, dir, env, "run", "--ttl", "2s", "both", "--", "sh", "-c", script)
	pid, _ := strconv.Atoi(strings.TrimSpace(waitFile(t, filepath.Join(dir, "started"), 10*time.Second)))
	t.Cleanup(func() { _ = syscall.Kill(-pid, syscall.SIGKILL) })
	keeper := childWithArg(t, p.cmd.Process.Pid, keeperCmd)
	// The runner is stopped first, so that it cannot react to the keeper's
	// death before its own: both are gone at once.
	for _, kill := range []struct {
		pid int
		sig syscall.Signal
	}{{p.cmd.Process.Pid, syscall.SIGSTOP}, {keeper, syscall.SIGKILL}, {p.cmd.Process.Pid, syscall.SIGKILL}} {
		if err := syscall.Kill(kill.pid, kill.sig); err != nil {
			t.Fatal(err)
		}
	}
	killed := time.Now()
	waitDead(t, pid, 5*time.Second, killed)
	t.Logf("COMMAND gone %v after both distlock processes were killed", time.Since(killed).Round(time.Millisecond))
}

// childWithArg returns the child process of parent whose command line has
// the argument arg.
func childWithArg(t *testing.T, parent int, arg string) int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err1 := os.ReadFile("/proc/" + e.Name() + "/stat")
		cmdline, err2 := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err1 != nil || err2 != nil {
			continue
		}
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(parent) && strings.Contains("\x00"+string(cmdline), "\x00"+arg+"\x00") {
			return pid
		}
	}
	t.Fatalf("no child of %d runs with %q", parent, arg)
	return 0
}

// TestBackgroundJobsKeepTheLock: a COMMAND that exits leaving processes in
// its process group (a script's background job) does not release the lock
// while they run, as flock(1)'s lock, which they inherit, is not released:
// distlock run waits for them, then releases and exits with COMMAND's
// status. A loss meanwhile stops them as it would COMMAND.
func TestBackgroundJobsKeepTheLock(t *testing.T) {
	for _, lose := range []bool{false, true} {
		t.Run(map[bool]string{false: "released when they exit", true: "lost while they run"}[lose], func(t *testing.T) {
			env, c, _ := server(t)
			dir := t.TempDir()
			gate := filepath.Join(dir, "gate")
			if err := syscall.Mkfifo(gate, 0o600); err != nil {
				t.Fatal(err)
			}
			// The background job waits for the test to open the gate.
			script := `(read x < gate; echo bg >> log) >/dev/null 2>&1 &
echo "$$ $!" > pids; exit 3`
			a := startDL(t, dir, env, "run", "--ttl", "3s", "--grace", "1s", "bgjob", "--", "sh", "-c", script)
			pids := strings.Fields(waitFile(t, filepath.Join(dir, "pids"), 10*time.Second))
			sh, _ := strconv.Atoi(pids[0])
			bg, _ := strconv.Atoi(pids[1])
			t.Cleanup(func() { _ = syscall.Kill(-sh, syscall.SIGKILL) })
			waitDead(t, sh, 10*time.Second, time.Now())

			// The runner says it waits for the group, and does not exit.
			deadline := time.Now().Add(10 * time.Second)
			for !strings.Contains(a.stderr.String(), "left processes running in its process group") {
				if processDead(a.cmd.Process.Pid) {
					t.Fatalf("distlock run exited while its command's background job runs; stderr %q", a.stderr.String())
				}
				if time.Now().After(deadline) {
					t.Fatalf("no word of the background job; stderr %q", a.stderr.String())
				}
				time.Sleep(5 * time.Millisecond) // polling another process's progress
			}
			ctx := ctxT(t, 20*time.Second)
			info, err := c.Inspect(ctx, "bgjob")
			if err != nil || !info.Held() {
				t.Fatalf("lock not held while the background job runs: %+v %v", info, err)
			}
			if code, _, _ := dl(t, env, "run", "-n", "bgjob", "--", "true"); code != exitNotObtained {
				t.Fatalf("a second run got exit %d while the background job runs", code)
			}

			if lose {
				if _, err := c.ForceRelease(ctx, "bgjob", 0); err != nil {
					t.Fatal(err)
				}
				waitDead(t, bg, 10*time.Second, time.Now())
				if code := a.wait(t, 10*time.Second); code != exitLost {
					t.Fatalf("exit %d after the loss, want %d; stderr %q", code, exitLost, a.stderr.String())
				}
				return
			}
			w, err := os.OpenFile(gate, os.O_WRONLY|syscall.O_NONBLOCK, 0)
			if err != nil {
				t.Fatalf("the background job is not waiting at the gate: %v", err)
			}
			_, _ = w.Write([]byte("go\n"))
			w.Close()
			if code := a.wait(t, 10*time.Second); code != 3 {
				t.Fatalf("exit %d, want the command's 3; stderr %q", code, a.stderr.String())
			}
			if got := readFile(t, filepath.Join(dir, "log")); got != "bg\n" {
				t.Fatalf("log %q", got)
			}
			if info, err := c.Inspect(ctx, "bgjob"); err != nil || info.Held() {
				t.Fatalf("lock not released after the group exited: %+v %v", info, err)
			}
		})
	}
}

// TestStoppedKeeper: a keeper that is stopped (SIGSTOP, a debugger) or hung
// renews nothing but keeps its pipe open. The runner notices that it does
// not answer, kills it and stops COMMAND, before the lease the keeper last
// renewed runs out, so that COMMAND never runs on unlocked.
func TestStoppedKeeper(t *testing.T) {
	env, c, _ := server(t)
	dir := t.TempDir()
	const ttl = 6 * time.Second
	script := `trap 'echo term > marker; exit 0' TERM
echo x > started
while :; do sleep 0.02; done`
	p := startDL(t, dir, env, "run", "--ttl", ttl.String(), "stopped", "--", "sh", "-c", script)
	waitFile(t, filepath.Join(dir, "started"), 10*time.Second)
	keeper := childWithArg(t, p.cmd.Process.Pid, keeperCmd)
	t.Cleanup(func() { _ = syscall.Kill(keeper, syscall.SIGKILL) })
	stopped := time.Now()
	if err := syscall.Kill(keeper, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitFile(t, filepath.Join(dir, "marker"), ttl)
	stopping := time.Since(stopped)
	// COMMAND was told to stop while the lease the stopped keeper last
	// renewed still covered it: the lock is still held in Redis.
	info, err := c.Inspect(ctxT(t, 5*time.Second), "stopped")
	if err != nil {
		t.Fatal(err)
	}
	if !info.Held() {
		t.Fatalf("COMMAND was stopped %v after the keeper, once the lease had run out", stopping)
	}
	t.Logf("COMMAND stopped %v after the keeper, %v before the lease ran out", stopping.Round(time.Millisecond), info.TTL)
	if code := p.wait(t, 10*time.Second); code != exitLost {
		t.Fatalf("exit %d, want %d; stderr %s", code, exitLost, p.stderr.String())
	}
	if !processDead(keeper) {
		t.Errorf("the stalled keeper was left alive (state %s)", processState(keeper))
	}
	if !strings.Contains(p.stderr.String(), `lock keeper of "stopped" has not answered`) {
		t.Fatalf("stderr does not explain: %q", p.stderr.String())
	}
}

// TestStoppedJobKeepsKeeper: while the whole job, runner included, is
// stopped (Ctrl-Z), no ping is answered in time; on resuming, the runner
// must not take that for a stalled keeper. The job is stopped for longer
// than the heartbeat's give-up time, then continued, and finishes normally.
func TestStoppedJobKeepsKeeper(t *testing.T) {
	env, _, _ := server(t)
	dir := t.TempDir()
	const ttl = 600 * time.Millisecond
	script := `echo x > started
while [ ! -e go ]; do sleep 0.02; done`
	p := startDL(t, dir, env, "run", "--ttl", ttl.String(), "suspended", "--", "sh", "-c", script)
	waitFile(t, filepath.Join(dir, "started"), 10*time.Second)
	runner := p.cmd.Process.Pid
	for range 3 {
		signalProc(t, p, syscall.SIGSTOP)
		// The runner is stopped: nothing to wait on but time, five
		// heartbeat windows of it.
		time.Sleep(5 * heartbeatMin)
		if err := syscall.Kill(runner, syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		time.Sleep(heartbeatMin / 2) // a moment between stops
	}
	if err := os.WriteFile(filepath.Join(dir, "go"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 10*time.Second); code != 0 {
		t.Fatalf("exit %d, want 0; stderr %s", code, p.stderr.String())
	}
	if strings.Contains(p.stderr.String(), "has not answered") {
		t.Fatalf("a stopped runner was taken for a stalled keeper: %q", p.stderr.String())
	}
}

// TestStalledKeeperWhileWaiting: the keeper ends a --wait; one stopped while
// waiting would keep distlock waiting for good. The runner gives it up
// keeperWait (and a second chance of a second) after --wait: status 69,
// COMMAND not run. Its keeper_stalled event's silence is the time it
// actually waited.
func TestStalledKeeperWhileWaiting(t *testing.T) {
	env, c, _ := server(t)
	dir := t.TempDir()
	held, err := c.TryLock(ctxT(t, 5*time.Second), "stalled-wait")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctxT(t, 5*time.Second))
	const wait = time.Second
	p := startDL(t, dir, env, "run", "--log-format", "json", "--wait", wait.String(), "stalled-wait", "--", "sh", "-c", "echo ran > ran")
	waitInLine(t, c, "stalled-wait", p)
	keeper := childWithArg(t, p.cmd.Process.Pid, keeperCmd)
	t.Cleanup(func() { _ = syscall.Kill(keeper, syscall.SIGKILL) })
	if err := syscall.Kill(keeper, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, wait+keeperWait+secondChance+10*time.Second); code != exitRedis {
		t.Fatalf("exit %d, want %d; stderr %s", code, exitRedis, p.stderr.String())
	}
	lived := time.Since(p.started)
	if _, err := os.Stat(filepath.Join(dir, "ran")); err == nil {
		t.Fatal("COMMAND ran")
	}
	if !processDead(keeper) {
		t.Errorf("the stalled keeper was left alive (state %s)", processState(keeper))
	}
	if !strings.Contains(p.stderr.String(), "did not answer within --wait") {
		t.Fatalf("stderr does not explain: %q", p.stderr.String())
	}
	// silence is what the runner waited: at least its timers' total (they
	// never fire early), at most the runner's whole life as the test saw
	// it (which adds its start, and killing the keeper and exiting).
	m := checkEvent(t, docEvents(t), jsonLines(t, p.stderr.String()), evKeeperStalled)
	ns, _ := m["silence"].(float64)
	silence := time.Duration(ns)
	if least := wait + keeperWait + secondChance; silence < least || silence > lived {
		t.Fatalf("keeper_stalled silence %v; the runner waited at least %v and lived %v", silence, least, lived)
	}
	t.Logf("silence %v, runner's life %v", silence, lived.Round(time.Millisecond))
}

// TestHugeWait: --wait near the largest duration waits like any other: the
// runner's bound on its keeper (--wait and keeperWait more) saturates
// instead of overflowing into a timer that fires at once.
func TestHugeWait(t *testing.T) {
	env, c, _ := server(t)
	dir := t.TempDir()
	held, err := c.TryLock(ctxT(t, 5*time.Second), "huge-wait")
	if err != nil {
		t.Fatal(err)
	}
	p := startDL(t, dir, env, "run", "--wait", "2562047h47m16s", "huge-wait", "--", "sh", "-c", "echo ran > ran")
	waitInLine(t, c, "huge-wait", p)
	// An overflowed bound fires at once and gives the keeper up after the
	// second chance: nothing to wait on but time, the absence of that.
	select {
	case <-p.done:
		t.Fatalf("gave up a wait of 2562047h: exit %d; stderr %s", p.cmd.ProcessState.ExitCode(), p.stderr.String())
	case <-time.After(secondChance + 2*time.Second):
	}
	if err := held.Release(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 10*time.Second); code != 0 {
		t.Fatalf("exit %d, want 0; stderr %s", code, p.stderr.String())
	}
	if got := readFile(t, filepath.Join(dir, "ran")); got != "ran\n" {
		t.Fatalf("COMMAND wrote %q", got)
	}
}

func TestAddSaturated(t *testing.T) {
	const most = time.Duration(math.MaxInt64)
	for _, tc := range []struct{ a, b, want time.Duration }{
		{0, keeperWait, keeperWait},
		{time.Hour, keeperWait, time.Hour + keeperWait},
		{most - keeperWait, keeperWait, most},
		{most - keeperWait + 1, keeperWait, most},
		{most, keeperWait, most},
	} {
		if got := addSaturated(tc.a, tc.b); got != tc.want {
			t.Errorf("addSaturated(%v, %v) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}
