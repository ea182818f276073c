package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode"
	"unsafe"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redistest"
)

// parseTarget matches URL schemes case-insensitively (strings.ToLower), as
// URL schemes are; go-redis's parser lowercases them too, so REDISS://
// speaks TLS. But parseSentinel and parseCluster decide on TLS with
// strings.HasPrefix(scheme, "rediss") on the scheme as typed:
// REDISS-SENTINEL:// and REDISS-CLUSTER:// are accepted and connect in
// plain text, password and all, to a server the user asked to reach over
// TLS only.
func TestUppercaseTLSSchemeKeepsTLS(t *testing.T) {
	s := redistest.StartSentinel(t)
	for _, scheme := range []string{"rediss-sentinel", "REDISS-SENTINEL", "Rediss-Sentinel"} {
		url := scheme + "://" + strings.Join(s.SentinelAddrs(), ",") + "/" + redistest.MasterName + "?dial_timeout=1s"
		code, out, stderr := dl(t, nil, "status", "--redis", url)
		if code != exitRedis {
			t.Errorf("status --redis %s against plain-text Sentinels: exit %d, stdout %q, stderr %q; want %d: a TLS URL must not talk plain text",
				url, code, out, stderr, exitRedis)
		}
	}
}

// status, leader and release pass holder metadata and leaders' values
// through printable, which "keeps control characters in names and metadata
// out of the terminal" (TestStatusC1ControlsStayOutOfTheTerminal): any
// Redis user can write them, and terminals act on ESC, CSI and OSC. The
// messages of run and elect quote the holder the same way, but
// describeHolder copies the metadata raw: `distlock run -n KEY` (the
// not_obtained message, said without -v) and `distlock elect -v` (who
// leads) write another holder's escape sequences to the operator's
// terminal.
func TestHolderMetadataControlsStayOutOfRunAndElect(t *testing.T) {
	env, c, _ := server(t)
	ctx := ctxT(t, 20*time.Second)
	const evil = "host=h1 pid=1 \x1b]0;pwned\x07\x1b[2J\u009b31m"
	if _, err := c.TryLock(ctx, "meta", distlock.WithMetadata(evil)); err != nil {
		t.Fatal(err)
	}
	e, err := c.NewElection("elect")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Campaign(ctx, evil); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"run", "-n", "meta", "--", "true"},
		{"run", "-v", "--wait", "300ms", "meta", "--", "true"},
		{"elect", "-v", "--wait", "300ms", "elect", "--", "true"},
	} {
		code, _, stderr := dl(t, env, args...)
		if code != exitNotObtained {
			t.Fatalf("%q: exit %d, want %d; stderr %q", args, code, exitNotObtained, stderr)
		}
		for _, r := range stderr {
			if unicode.IsControl(r) && r != '\n' {
				t.Errorf("%q: control character %U of the holder's metadata reaches the terminal: %q", args, r, stderr)
				break
			}
		}
	}
}

// TestStatusClusterKeyWithoutHashTagIsNoRedisError's case for release: on
// a Cluster a name that begins with '}' can never be held (ErrInvalidKey,
// a local refusal: run and leader say so with 64). `release --force --yes
// '}x'` reports it as a Redis failure instead (69, "check --redis or
// DISTLOCK_REDIS_URL") against a healthy Cluster. Its help: "Exit status:
// 0 released, 1 nothing released (KEY free, ...), 64 usage ..., 69 Redis
// error."
func TestReleaseClusterKeyWithoutHashTagIsNoRedisError(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	env := []string{"DISTLOCK_REDIS_URL=redis-cluster://" + cl.Nodes[0].Addr}
	for _, key := range []string{"}x", "}"} {
		code, out, stderr := dl(t, env, "release", "--force", "--yes", key)
		if code == exitRedis || strings.Contains(stderr, "check --redis") {
			t.Errorf("release --force --yes %q on a healthy Cluster: exit %d (69 is \"Redis error\"), stdout %q, stderr %q; want 1 (nothing released) or 64 (usage)",
				key, code, out, stderr)
		}
	}
}

// docs/cli.md: `--watch` refreshes the view "until SIGINT (Ctrl-C), SIGTERM
// or SIGHUP ..., or until its stdout is closed (`| head`), and then exits
// with status 0". While Redis is down a watch off a terminal writes nothing
// ("no table or snapshot is printed meanwhile"), so it only learns that
// its reader is gone from a write: `status --watch --json | consumer` whose
// consumer exits during an outage leaves distlock running for as long as
// the outage lasts (for good, if Redis does not come back). leader --watch
// watches for its reader's going (readerGone); status --watch does not.
func TestStatusWatchEndsWithStdoutDuringOutage(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("readerGone is Linux only")
	}
	env, _, srv := server(t)
	const interval = 100 * time.Millisecond
	r, cmd, stderr, done := startPiped(t, env, 0, "status", "--watch", "--json", "--interval", interval.String())
	if err := r.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(r).ReadString('\n'); err != nil || !strings.HasPrefix(line, `{"time":`) {
		t.Fatalf("first line %q, %v; stderr %q", line, err, stderr.String())
	}
	srv.Kill()
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(stderr.String(), "retrying every") {
		if time.Now().After(deadline) {
			t.Fatalf("outage not reported: %q", stderr.String())
		}
		time.Sleep(5 * time.Millisecond) // polling another process's output
	}
	r.Close() // the consumer exits while Redis is down
	closed := time.Now()
	// A refused connection fails each refresh at once: 20 refreshes.
	select {
	case <-done:
	case <-time.After(20 * interval):
		t.Fatalf("status --watch still running %v after its stdout's reader left (Redis down); stderr %q", time.Since(closed).Round(time.Millisecond), stderr.String())
	}
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("exit %d, want 0", code)
	}
}

// docs/cli.md: `--watch` refreshes the view "until SIGINT (Ctrl-C),
// SIGTERM or SIGHUP ..., and then exits with status 0". A refresh is
// written to stdout in the main loop, which looks at the signals only
// between refreshes: with stdout not taking writes (a terminal stopped
// with Ctrl-S, `status --watch | less` before you page on, a stalled log
// collector) Ctrl-C and a service manager's SIGTERM do nothing, and the
// watch runs on until the reader takes the output (or forever). docs/cli.md
// says the same stall must not hold up run and elect; here it holds up
// the exit.
func TestStatusWatchSignalWithBlockedStdout(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("F_SETPIPE_SZ and FIONREAD are Linux's")
	}
	env, c, _ := server(t)
	ctx := ctxT(t, 20*time.Second)
	// Enough locks that one snapshot does not fit the pipe.
	for i := range 40 {
		if _, err := c.TryLock(ctx, fmt.Sprintf("blocked:%02d", i), distlock.WithTTL(time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	r, cmd, stderr, done := startPiped(t, env, pipeSize, "status", "--watch", "--json", "--interval", "100ms")
	// The pipe full: the watch is blocked writing its first snapshot.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) { // polling another process's output
		var n int32
		if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, r.Fd(), fionread, uintptr(unsafe.Pointer(&n))); e != 0 {
			t.Fatal(e)
		}
		if n >= pipeSize {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stdout not filled within 10s (%d bytes); stderr %q", n, stderr.String())
		}
	}
	expectExitOnSIGTERM(t, "status --watch", cmd, done, stderr)
}

// The same for `leader --watch` ("until SIGINT (Ctrl-C), SIGTERM or
// SIGHUP ... (status 0)"): a change written to a stdout that takes no
// writes keeps a signal from ending it.
func TestLeaderWatchSignalWithBlockedStdout(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("F_SETPIPE_SZ and FIONREAD are Linux's")
	}
	env, c, _ := server(t)
	ctx := ctxT(t, 30*time.Second)
	r, cmd, stderr, done := startPiped(t, env, pipeSize, "leader", "--watch", "--json", "lw")
	e, err := c.NewElection("lw")
	if err != nil {
		t.Fatal(err)
	}
	// Changes of leader, each a line of some 150 bytes, until the pipe is
	// full and the watch blocked writing one.
	// A line (under PIPE_BUF) is written whole or not at all: blocked, the
	// pipe stops filling while the changes go on.
	value := strings.Repeat("v", 100)
	var last int32
	grew := time.Now()
	for deadline := time.Now().Add(20 * time.Second); ; {
		var n int32
		if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, r.Fd(), fionread, uintptr(unsafe.Pointer(&n))); e != 0 {
			t.Fatal(e)
		}
		if n != last {
			last, grew = n, time.Now()
		}
		if n > pipeSize/2 && time.Since(grew) > time.Second {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stdout not filled within 20s (%d bytes); stderr %q", n, stderr.String())
		}
		l, err := e.Campaign(ctx, value)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond) // a change the watch can see apart from the next
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	expectExitOnSIGTERM(t, "leader --watch", cmd, done, stderr)
}

// pipeSize is how much a stdout pipe of startPiped takes before it blocks
// a writer; fionread asks how much is in it.
const pipeSize, fionread = 4096, 0x541B

// startPiped starts distlock args with env, its stdout a pipe whose read end
// it returns (its capacity pipeSize when size is not 0), and done, closed
// when the process has exited; the process is killed at cleanup.
func startPiped(t *testing.T, env []string, size int, args ...string) (*os.File, *exec.Cmd, *lockedBuffer, <-chan struct{}) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	if size != 0 {
		const fSetPipeSz = 1031
		if _, _, e := syscall.Syscall(syscall.SYS_FCNTL, w.Fd(), fSetPipeSz, uintptr(size)); e != 0 {
			t.Fatal(e)
		}
	}
	cmd := exec.Command(binary(t), args...)
	cmd.Env = append(cleanEnv(), env...)
	cmd.Stdout = w
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	t.Cleanup(func() { r.Close() })
	return r, cmd, stderr, done
}

// expectExitOnSIGTERM signals cmd, what, whose stdout takes no writes, and
// fails unless it exits 0 within 5 s (done closes when it has exited).
func expectExitOnSIGTERM(t *testing.T, what string, cmd *exec.Cmd, done <-chan struct{}, stderr *lockedBuffer) {
	t.Helper()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	signalled := time.Now()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s still running %v after SIGTERM, blocked on a stdout that takes no writes; stderr %q",
			what, time.Since(signalled).Round(time.Millisecond), stderr.String())
	}
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("exit %d (%v) after SIGTERM, want 0", code, cmd.ProcessState)
	}
}

// A port out of 1 to 65535 is a bad URL, which docs/cli.md gives status
// 64; go-redis takes any digits, and the dial failed later: exit 69,
// "check --redis", as if the server were down.
func TestURLPortOutOfRangeIsUsage(t *testing.T) {
	for _, url := range []string{
		"redis://127.0.0.1:99999",
		"rediss://127.0.0.1:0",
		"redis-sentinel://127.0.0.1:26379,127.0.0.1:70000/m",
		"redis-cluster://127.0.0.1:65536",
	} {
		code, _, stderr := dl(t, nil, "status", "--redis", url)
		if code != exitUsage || !strings.Contains(stderr, "bad Redis URL") || !strings.Contains(stderr, "port") {
			t.Errorf("status --redis %s: exit %d, stderr %q; want %d, a bad URL", url, code, stderr, exitUsage)
		}
	}
}
