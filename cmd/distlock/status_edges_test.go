package main

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"syscall"
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

// A --prefix that the library refuses (ErrInvalidOption: "apprw" would
// share its read-write locks' keys with prefix "app"'s) is bad usage: exit
// 64, as run and leader say, not 69 ("Redis unreachable or failing") with
// the hint to check --redis, against a healthy server.
func TestRefusedPrefixIsUsage(t *testing.T) {
	env, _, _ := server(t)
	for _, args := range [][]string{
		{"status"},
		{"status", "job"},
		{"status", "--watch"},
		{"release", "--force", "--yes", "job"},
		{"leader", "job"},
		{"run", "-n", "job", "--", "true"},
	} {
		args = append([]string{args[0], "--prefix", "apprw"}, args[1:]...)
		code, _, stderr := dl(t, env, args...)
		if code != exitUsage || !strings.Contains(stderr, "invalid option") || strings.Contains(stderr, "check --redis") {
			t.Errorf("%q: exit %d, stderr %q; want %d and the library's reason", args, code, stderr, exitUsage)
		}
	}
}

// release --force frees distlock's locks, and status skips the keys under
// its prefix that hold no lock ("a key in distlock's name space that
// another application wrote": with --prefix app:, say, the application's
// own "app:{user:42}"). With --yes it deleted such a key all the same (its
// script freed whatever value it found), then said Redis failed (69).
// Nothing is a lock there: nothing released (1), and the value stays.
func TestReleaseForceLeavesOtherValues(t *testing.T) {
	env, _, srv := server(t)
	ctx := ctxT(t, 10*time.Second)
	rdb := srv.Client(t)
	const key, value = "app:{user:42}", "the application's own value"
	if err := rdb.Set(ctx, key, value, 0).Err(); err != nil {
		t.Fatal(err)
	}
	env = append(env, "DISTLOCK_PREFIX=app:")
	code, out, stderr := dl(t, env, "release", "--force", "--yes", "user:42")
	if code != exitNone || !strings.Contains(stderr, "nothing released") {
		t.Errorf("release --force --yes: exit %d, stdout %q, stderr %q; want %d, nothing released", code, out, stderr, exitNone)
	}
	if got, err := rdb.Get(ctx, key).Result(); got != value {
		t.Fatalf("after release --force: %q is %q (%v), want %q", key, got, err, value)
	}
}

// docs/cli.md: a closed pipe (`distlock status | head -1`) kills status
// and leader with SIGPIPE, as it does other tools; only --watch ends with
// 0. The table said 1 for any stdout that could not be written but
// --watch's closed pipe.
func TestStatusAndLeaderToClosedPipeDieOfSIGPIPE(t *testing.T) {
	env, c, _ := server(t)
	ctx := ctxT(t, 10*time.Second)
	if _, err := c.TryLock(ctx, "piped"); err != nil {
		t.Fatal(err)
	}
	e, err := c.NewElection("piped")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Campaign(ctx, "web-1"); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"status"}, {"status", "--json", "piped"}, {"leader", "piped"}} {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		r.Close() // the reader is gone before distlock writes
		cmd := exec.Command(binary(t), args...)
		cmd.Env = append(cleanEnv(), env...)
		cmd.Stdout = w
		err = cmd.Run()
		w.Close()
		ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
		if !ws.Signaled() || ws.Signal() != syscall.SIGPIPE {
			t.Errorf("%q to a closed pipe: %v, want death by SIGPIPE", args, err)
		}
	}
}
