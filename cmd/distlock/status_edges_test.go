package main

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redistest"
)

// distlock status --help: "Exit status: 0 if a lock was shown, 1 if none
// matched, 64 usage, 69 Redis error." On a Cluster a name that begins with
// '}' can never be held (the library refuses it with ErrInvalidKey), so
// `status '}x'` matches nothing: it must not report a Redis failure (exit
// 69, "check --redis or DISTLOCK_REDIS_URL") against a healthy Cluster.
func TestStatusClusterKeyWithoutHashTagIsNoRedisError(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	env := []string{"DISTLOCK_REDIS_URL=redis-cluster://" + cl.Nodes[0].Addr}
	for _, key := range []string{"}x", "}"} {
		code, out, stderr := dl(t, env, "status", key)
		if code == exitRedis || strings.Contains(stderr, "check --redis") {
			t.Errorf("status %q on a healthy Cluster: exit %d (69 is \"Redis error\"), stdout %q, stderr %q; want 1 (nothing matched) or 64 (usage)",
				key, code, out, stderr)
		}
	}
}

// status.go's printable "keeps control characters in names and metadata
// out of the terminal", and TestStatusTable checks it for ESC and BEL. The
// C1 controls (U+0080 to U+009F) are control characters too: U+009B is
// CSI and U+009D OSC, which terminals that take C1 controls in UTF-8 (VTE,
// xterm) act on as ESC [ and ESC ]. A lock name or metadata written by any
// holder must not reach the operator's terminal with them.
func TestStatusC1ControlsStayOutOfTheTerminal(t *testing.T) {
	env, c, _ := server(t)
	ctx := ctxT(t, 10*time.Second)
	const name = "job:\u009b2J\u009d0;pwned\u009c"
	if _, err := c.TryLock(ctx, name, distlock.WithMetadata("host=h1 pid=1 \u009b31m")); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"status"}, {"status", name}, {"status", "free:\u009b2J"}} {
		code, out, stderr := dl(t, env, args...)
		if code != exitOK && code != exitNone {
			t.Fatalf("%q: exit %d, stderr %q", args, code, stderr)
		}
		for _, r := range out {
			if unicode.IsControl(r) && r != '\n' {
				t.Errorf("%q: control character %U reaches the terminal: %q", args, r, out)
				break
			}
		}
	}
}

// status and leader with a stdout that takes nothing (/dev/full): nothing
// was shown and Redis answered, so neither 0 ("a lock was shown",
// "somebody leads") nor 69 ("Redis error") but 1, as under --watch. Before,
// status exited 0 (table) or 69 (--json), leader 0 (found in review).
func TestStatusAndLeaderToUnwritableStdout(t *testing.T) {
	env, c, _ := server(t)
	ctx := ctxT(t, 20*time.Second)
	l, err := c.TryLock(ctx, "deploy:prod")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	e, err := c.NewElection("sched")
	if err != nil {
		t.Fatal(err)
	}
	lead, err := e.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	defer lead.Resign(ctx)
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Fatalf("/dev/full: %v", err)
	}
	defer full.Close()
	for _, args := range [][]string{{"status"}, {"status", "--json"}, {"status", "deploy:prod"}, {"leader", "sched"}, {"leader", "--json", "sched"}} {
		cmd := exec.CommandContext(ctx, binary(t), args...)
		cmd.Env = append(cleanEnv(), env...)
		var stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = full, &stderr
		_ = cmd.Run()
		if code := cmd.ProcessState.ExitCode(); code != exitNone || !strings.Contains(stderr.String(), "writing to stdout") {
			t.Errorf("%v > /dev/full: exit %d, stderr %q; want %d and the write error", args, code, stderr.String(), exitNone)
		}
	}
}
