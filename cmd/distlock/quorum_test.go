package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
