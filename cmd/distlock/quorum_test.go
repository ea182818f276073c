package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redistest"
)

// TestRunQuorum: --quorum takes the lock on a majority of three servers,
// keeps it while one is down, and stops the command once a majority is gone.
func TestRunQuorum(t *testing.T) {
	servers := redistest.StartN(t, 3)
	var urls, args []string
	for _, s := range servers {
		urls = append(urls, "redis://"+s.Addr)
		args = append(args, "--redis", "redis://"+s.Addr)
	}
	env := []string{"DISTLOCK_REDIS_URL=" + strings.Join(urls, " ")}

	if code, _, stderr := dl(t, env, "run", "q", "--", "true"); code != exitUsage || !strings.Contains(stderr, "--quorum") {
		t.Fatalf("several URLs without --quorum: exit %d %q", code, stderr)
	}
	if code, _, stderr := dl(t, nil, "run", "--quorum", "--redis", urls[0], "q", "--", "true"); code != exitUsage || !strings.Contains(stderr, "at least 3") {
		t.Fatalf("--quorum with one server: exit %d %q", code, stderr)
	}

	dir := t.TempDir()
	script := `echo "$DISTLOCK_FENCE" > started
trap 'echo term > marker; exit 0' TERM
while :; do sleep 0.02; done`
	p := startDL(t, dir, env, append(append([]string{"run", "--quorum", "--ttl", "1500ms"}, args...), "q", "--", "sh", "-c", script)...)
	waitFile(t, filepath.Join(dir, "started"), 10*time.Second)
	fenceOf(t, filepath.Join(dir, "started"))
	// Held on a majority: another quorum run cannot take it.
	if code, _, stderr := dl(t, env, "run", "--quorum", "--wait", "0", "q", "--", "true"); code != exitNotObtained {
		t.Fatalf("second quorum run: exit %d %q", code, stderr)
	}
	servers[2].Kill()
	time.Sleep(1500 * time.Millisecond) // a whole lease of renewals with one server down
	if readIfExists(filepath.Join(dir, "marker")) != "" {
		t.Fatal("command stopped although a majority still held the lock", p.stderr.String())
	}
	servers[1].Kill()
	waitFile(t, filepath.Join(dir, "marker"), 5*time.Second)
	if code := p.wait(t, 10*time.Second); code != exitLost {
		t.Fatalf("exit %d, want %d; %s", code, exitLost, p.stderr.String())
	}
	// Two of three servers down: not a lock held elsewhere but a Redis error.
	if code, _, stderr := dl(t, env, "run", "--quorum", "--wait", "0", "q", "--", "true"); code != exitRedis {
		t.Fatalf("quorum unreachable: exit %d %q", code, stderr)
	}
	// Without --wait too (waiting as long as it takes), quiet or -v: the
	// library's quorum Lock waits through an outage of its nodes, which it
	// counts as not obtained, and the runner waited for ever, saying with
	// -v that another owner held the lock.
	for _, verbose := range [][]string{nil, {"-v"}} {
		args := append(append([]string{"run", "--quorum"}, verbose...), "q", "--", "true")
		if code, _, stderr := dl(t, env, args...); code != exitRedis || strings.Contains(stderr, "waiting") {
			t.Fatalf("%q with the quorum unreachable: exit %d %q, want %d", args, code, stderr, exitRedis)
		}
	}
}

func readIfExists(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// TestQuorumPrimitives: --quorum refuses what a quorum cannot hold, with
// the library's reason (64), and takes several KEYs.
func TestQuorumPrimitives(t *testing.T) {
	servers := redistest.StartN(t, 3)
	var urls []string
	for _, s := range servers {
		urls = append(urls, "redis://"+s.Addr)
	}
	env := []string{"DISTLOCK_REDIS_URL=" + strings.Join(urls, " ")}
	for _, args := range [][]string{
		{"run", "--quorum", "--shared", "k", "--", "true"},
		{"run", "--quorum", "--write", "k", "--", "true"},
		{"run", "--quorum", "--limit", "2", "k", "--", "true"},
		{"elect", "--quorum", "k", "--", "true"},
	} {
		if code, _, stderr := dl(t, env, args...); code != exitUsage || !strings.Contains(stderr, "invalid option") || !strings.Contains(stderr, "not a quorum") {
			t.Errorf("%q: exit %d %q, want %d and the library's reason", args, code, stderr, exitUsage)
		}
	}
	code, out, stderr := dl(t, env, "run", "--quorum", "a", "b", "--", "sh", "-c", `echo "$DISTLOCK_KEY|$DISTLOCK_FENCE"`)
	keys, fences, _ := strings.Cut(strings.TrimSpace(out), "|")
	if code != 0 || keys != "a b" || len(strings.Fields(fences)) != 2 {
		t.Fatalf("several KEYs on a quorum: exit %d %q %q", code, out, stderr)
	}
}

// TestReleaseForceQuorumLock: status and release --force talk to one
// server (several URLs are refused, 64). release --force of a --quorum
// lock on one server says "released" (exit 0) but frees that server's
// copy only: a majority still holds the lock, no other run gets it and the
// holder runs on. Freed on a majority, one server after another, the
// holder loses it (79). docs/cli.md says so.
func TestReleaseForceQuorumLock(t *testing.T) {
	servers := redistest.StartN(t, 3)
	var urls, args []string
	for _, s := range servers {
		urls = append(urls, "redis://"+s.Addr)
		args = append(args, "--redis", "redis://"+s.Addr)
	}
	quorumEnv := []string{"DISTLOCK_REDIS_URL=" + strings.Join(urls, " ")}
	dir := t.TempDir()
	p := startDL(t, dir, nil, append(append([]string{"run", "--quorum", "--ttl", "1500ms"}, args...),
		"q", "--", "sh", "-c", `echo go > started; while :; do sleep 0.02; done`)...)
	waitFile(t, filepath.Join(dir, "started"), 10*time.Second)

	for _, cmd := range [][]string{{"status", "q"}, {"release", "--force", "--yes", "q"}} {
		if code, _, stderr := dl(t, quorumEnv, cmd...); code != exitUsage || !strings.Contains(stderr, "--quorum (run only)") {
			t.Fatalf("%q with the quorum's URLs: exit %d %q", cmd, code, stderr)
		}
	}
	one := func(i int) []string { return []string{"DISTLOCK_REDIS_URL=" + urls[i]} }
	if code, out, stderr := dl(t, one(0), "release", "--force", "--yes", "q"); code != 0 || !strings.HasPrefix(out, "released q") {
		t.Fatalf("release on one server: exit %d %q %q", code, out, stderr)
	}
	// Still held by the two others: not obtained, and the command runs on.
	if code, _, stderr := dl(t, quorumEnv, "run", "--quorum", "--wait", "0", "q", "--", "true"); code != exitNotObtained {
		t.Fatalf("quorum run after a release on one server: exit %d %q", code, stderr)
	}
	select {
	case <-p.done:
		t.Fatalf("the holder stopped after a release on one server: exit %d %s", p.cmd.ProcessState.ExitCode(), p.stderr.String())
	default:
	}
	if code, _, stderr := dl(t, one(1), "release", "--force", "--yes", "q"); code != 0 {
		t.Fatalf("release on a second server: exit %d %q", code, stderr)
	}
	if code := p.wait(t, 10*time.Second); code != exitLost {
		t.Fatalf("holder after a release on a majority: exit %d, want %d; %s", code, exitLost, p.stderr.String())
	}
}

// heldOnTwoOfThree starts three servers and a --quorum run holding "q"
// with ttl on them, then deletes the first server's copy: a majority holds
// the lock, and one server lacks the holder's grant. It returns the
// servers and their --redis flags.
func heldOnTwoOfThree(t *testing.T, ttl string) ([]*redistest.Server, []string) {
	t.Helper()
	servers := redistest.StartN(t, 3)
	var args []string
	for _, s := range servers {
		args = append(args, "--redis", "redis://"+s.Addr)
	}
	dir := t.TempDir()
	startDL(t, dir, nil, append(append([]string{"run", "--quorum", "--ttl", ttl}, args...),
		"q", "--", "sh", "-c", `echo go > started; while :; do sleep 0.02; done`)...)
	waitFile(t, filepath.Join(dir, "started"), 10*time.Second)
	if err := servers[0].Client(t).Del(ctxT(t, 5*time.Second), "distlock:{q}").Err(); err != nil {
		t.Fatal(err)
	}
	return servers, args
}

// A --quorum run that is not obtained names the holder as the first
// server has it: when that server lacks the majority's grant (it was down
// when the lock was taken, or its copy ran out), the run's own failed
// grant stood there still (the library gives it back in the background),
// and `run -n` said `"q" is held (fence F, host=… pid=<its own> cmd=true,
// for 0s)`: itself as the holder. It must not name itself.
func TestQuorumNotObtainedDoesNotNameItself(t *testing.T) {
	_, args := heldOnTwoOfThree(t, "5s")
	p := startDL(t, t.TempDir(), nil, append(append([]string{"run", "--quorum", "-n"}, args...), "q", "--", "true")...)
	code := p.wait(t, 20*time.Second)
	if stderr := p.stderr.String(); code != exitNotObtained || strings.Contains(stderr, fmt.Sprintf("pid=%d ", p.cmd.Process.Pid)) {
		t.Errorf("exit %d, stderr %q; want %d, and not itself as the holder", code, stderr, exitNotObtained)
	}
}

// A --quorum run waiting for a lock that a majority holds while one server
// lacks the holder's grant (it was down when the lock was taken, or its
// copy ran out: the minority failure a quorum is for) must wait, not spin.
// Each attempt was granted by that server and refused by the others, which
// the library took for a split vote between contenders and retried within
// a few attempt durations: some 9,000 attempts a second against every
// server, for as long as the holder held, and a --wait ended inside an
// attempt, so the run exited 69 ("Redis ... no answer before the call's
// context ended") instead of 75.
func TestQuorumWaitDoesNotSpin(t *testing.T) {
	servers, args := heldOnTwoOfThree(t, "10s")
	ctx := ctxT(t, 10*time.Second)
	commands := func() int64 {
		n, err := strconv.ParseInt(servers[1].Client(t).InfoMap(ctx, "stats").Item("Stats", "total_commands_processed"), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	// -v waits by another path, after saying who holds the lock.
	for _, verbose := range [][]string{nil, {"-v"}} {
		before := commands()
		run := append(append(append([]string{"run", "--quorum", "--wait", "1s"}, verbose...), args...), "q", "--", "true")
		code, _, stderr := dl(t, nil, run...)
		// A waiter's backoff grows to 100ms: some 20 attempts in a second.
		if n := commands() - before; code != exitNotObtained || n > 500 {
			t.Fatalf("%v: exit %d (want %d), %d commands on a server that holds the lock; stderr %q", verbose, code, exitNotObtained, n, stderr)
		}
	}
}

// A quorum wait that --wait ends reads as held while a majority of the
// servers answers, whatever the attempt the deadline cut short says
// (TestQuorumWaitDoesNotSpin exited 69 on a loaded machine with every
// server up: the deadline fell inside an attempt); with a majority down it
// stays an outage.
func TestQuorumWaitEnded(t *testing.T) {
	servers := redistest.StartN(t, 3)
	conn := &connection{}
	for _, s := range servers {
		conn.rdbs = append(conn.rdbs, s.Client(t))
	}
	cut := fmt.Errorf("no answer before the call's context ended")
	held := fmt.Errorf("%w: held by another owner", distlock.ErrNotObtained)
	ended := func(nodes ...error) error {
		qe := &distlock.QuorumError{Key: "q", Quorum: 2, Nodes: nodes}
		return fmt.Errorf("%w: %w", qe, context.DeadlineExceeded)
	}
	for _, err := range []error{ended(cut, cut, cut), ended(nil, cut, cut), ended(held, held, cut)} {
		if got := conn.quorumWaitEnded(err); !heldByAnother(got) {
			t.Errorf("%v with every server up: %v, want held", err, got)
		}
	}
	unended := &distlock.QuorumError{Key: "q", Quorum: 2, Nodes: []error{cut, cut, cut}}
	if got := conn.quorumWaitEnded(unended); heldByAnother(got) {
		t.Errorf("%v (no deadline): %v, want it as it was", unended, got)
	}
	servers[0].Kill()
	servers[1].Kill()
	if got := conn.quorumWaitEnded(ended(cut, cut, cut)); heldByAnother(got) {
		t.Errorf("with two servers of three down: %v, want an outage", got)
	}
}
