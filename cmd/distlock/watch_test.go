package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/distlock/distlock"
)

// snapshot is one line of `status --watch --json`.
type snapshot struct {
	Time  string     `json:"time"`
	Locks []lockJSON `json:"locks"`
}

// nextSnapshot waits for the next complete line of p's stdout after the
// first *seen bytes and parses it as a snapshot.
func nextSnapshot(t *testing.T, p *proc, seen *int, within time.Duration) snapshot {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		out := p.stdout.String()[*seen:]
		if i := strings.IndexByte(out, '\n'); i >= 0 {
			*seen += i + 1
			var s snapshot
			if err := json.Unmarshal([]byte(out[:i]), &s); err != nil {
				t.Fatalf("not a JSON snapshot line: %v: %q", err, out[:i])
			}
			if _, err := time.Parse(time.RFC3339Nano, s.Time); err != nil || s.Locks == nil {
				t.Fatalf("snapshot without time or locks: %q", out[:i])
			}
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("no snapshot within %v; stderr: %s", within, p.stderr.String())
		}
		time.Sleep(5 * time.Millisecond) // polling another process's output
	}
}

// snapshotUntil reads snapshots until one satisfies ok, and returns it.
func snapshotUntil(t *testing.T, p *proc, seen *int, within time.Duration, ok func(snapshot) bool) snapshot {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		s := nextSnapshot(t, p, seen, time.Until(deadline))
		if ok(s) {
			return s
		}
	}
}

func holds(key string) func(snapshot) bool {
	return func(s snapshot) bool {
		for _, l := range s.Locks {
			if l.Key == key {
				return true
			}
		}
		return false
	}
}

func free(key string) func(snapshot) bool {
	h := holds(key)
	return func(s snapshot) bool { return !h(s) }
}

// TestStatusWatchJSON (issue 14): one snapshot per line per refresh, which
// follows a lock taken and released, until SIGINT ends it with status 0.
func TestStatusWatchJSON(t *testing.T) {
	env, c, _ := server(t)
	ctx := ctxT(t, 20*time.Second)
	p := startDL(t, t.TempDir(), env, "status", "--watch", "--json", "--interval", "100ms", "watch:*")
	seen := 0
	first := nextSnapshot(t, p, &seen, 10*time.Second)
	if len(first.Locks) != 0 {
		t.Fatalf("first snapshot %+v, want no locks", first)
	}
	l, err := c.TryLock(ctx, "watch:a", distlock.WithMetadata("host=h1 pid=7"))
	if err != nil {
		t.Fatal(err)
	}
	held := snapshotUntil(t, p, &seen, 10*time.Second, holds("watch:a"))
	if got := held.Locks[0]; got.Fence != l.Fence() || got.Owner != l.Token() || got.Host != "h1" || got.PID != 7 || got.TTLMillis <= 0 {
		t.Fatalf("snapshot shows %+v, want the lock taken (fence %d)", got, l.Fence())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	after := snapshotUntil(t, p, &seen, 10*time.Second, free("watch:a"))
	t0, _ := time.Parse(time.RFC3339Nano, held.Time)
	t1, _ := time.Parse(time.RFC3339Nano, after.Time)
	if !t1.After(t0) {
		t.Fatalf("snapshot times %s then %s", held.Time, after.Time)
	}
	signalProc(t, p, syscall.SIGINT)
	if code := p.wait(t, 10*time.Second); code != 0 {
		t.Fatalf("exit %d after SIGINT, want 0; stderr %s", code, p.stderr.String())
	}
	if rest := p.stdout.String()[seen:]; rest != "" && !strings.HasSuffix(rest, "\n") {
		t.Fatalf("a partial line at the end: %q", rest)
	}
	if p.stderr.String() != "" {
		t.Fatalf("stderr: %q", p.stderr.String())
	}
}

// TestStatusWatchIgnoredHangup: `nohup distlock status --watch ... &`
// (SIGHUP ignored) goes on through a hangup; SIGTERM still ends it.
func TestStatusWatchIgnoredHangup(t *testing.T) {
	env, _, _ := server(t)
	p := startProc(t, t.TempDir(), append(env, "BIN="+binary(t)), "sh", "-c", `trap '' HUP; exec "$BIN" "$@"`,
		"sh", "status", "--watch", "--json", "--interval", "100ms")
	seen := 0
	nextSnapshot(t, p, &seen, 10*time.Second)
	signalProc(t, p, syscall.SIGHUP)
	// A watch that took the hangup would end at its next refresh, before
	// five more.
	lines := strings.Count(p.stdout.String(), "\n")
	for deadline := time.Now().Add(10 * time.Second); strings.Count(p.stdout.String(), "\n") < lines+5; {
		select {
		case <-p.done:
			t.Fatalf("the watch ended after SIGHUP, which it was started with ignored: exit %d", p.cmd.ProcessState.ExitCode())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no five refreshes within 10s after SIGHUP; stderr %s", p.stderr.String())
		}
		time.Sleep(5 * time.Millisecond) // polling another process's output
	}
	signalProc(t, p, syscall.SIGTERM)
	if code := p.wait(t, 10*time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM, want 0; stderr %s", code, p.stderr.String())
	}
}

// TestStatusWatchBlocks: off a terminal, a table per refresh under its time,
// each followed by a blank line; SIGTERM ends it with status 0.
func TestStatusWatchBlocks(t *testing.T) {
	env, c, _ := server(t)
	if _, err := c.TryLock(ctxT(t, 5*time.Second), "blocks", distlock.WithMetadata("host=h2 pid=8")); err != nil {
		t.Fatal(err)
	}
	p := startDL(t, t.TempDir(), env, "status", "--watch", "--interval", "100ms")
	deadline := time.Now().Add(10 * time.Second)
	for strings.Count(p.stdout.String(), "\n\n") < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("no two tables within 10s: %q; stderr %s", p.stdout.String(), p.stderr.String())
		}
		time.Sleep(5 * time.Millisecond) // polling another process's output
	}
	signalProc(t, p, syscall.SIGTERM)
	if code := p.wait(t, 10*time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM, want 0; stderr %s", code, p.stderr.String())
	}
	out := p.stdout.String()
	if strings.Contains(out, "\033") {
		t.Fatalf("escape sequences off a terminal: %q", out)
	}
	for _, block := range strings.Split(strings.TrimSuffix(out, "\n\n"), "\n\n") {
		lines := strings.Split(block, "\n")
		if _, err := time.ParseInLocation("2006-01-02 15:04:05", lines[0], time.Local); err != nil || len(lines) != 3 ||
			!strings.HasPrefix(lines[1], "KEY ") || !strings.HasPrefix(lines[2], "blocks ") || !strings.HasSuffix(lines[2], "host=h2 pid=8") {
			t.Fatalf("block %q, want the time and the table", block)
		}
	}
}

// TestStatusWatchClosedStdout: a reader that goes away ends the watch with
// status 0 (EPIPE), not a death by SIGPIPE.
func TestStatusWatchClosedStdout(t *testing.T) {
	env, _, _ := server(t)
	endsWithStdout(t, env, "status", "--watch", "--json", "--interval", "100ms")
}

// TestLeaderWatchClosedStdout: `leader --watch | head -1` ends as head
// exits, although no change of leader comes to write and fail: the watch
// notices its reader's going by itself.
func TestLeaderWatchClosedStdout(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("elsewhere a closed stdout is noticed at the next write (readerGone)")
	}
	env, _, _ := server(t)
	endsWithStdout(t, env, "leader", "--watch", "--json", "quiet")
}

// endsWithStdout runs the watch of args with stdout to a pipe, reads its
// first JSON line and closes the pipe: the watch must end at once, status
// 0, saying nothing.
func endsWithStdout(t *testing.T, env []string, args ...string) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary(t), args...)
	cmd.Env = append(cleanEnv(), env...)
	cmd.Stdout = w
	var stderr lockedBuffer
	cmd.Stderr = &stderr
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
	// Bounded: the child holds the pipe's write end, so a watch that never
	// writes would leave ReadString blocked for good.
	if err := r.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, `{"time":`) {
		t.Fatalf("first line %q, %v; stderr %q", line, err, stderr.String())
	}
	r.Close() // like `| head -1` exiting
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("still running 10s after its stdout closed")
	}
	if code := cmd.ProcessState.ExitCode(); code != 0 || stderr.String() != "" {
		t.Fatalf("exit %d (%v), stderr %q; want 0 and nothing", code, cmd.ProcessState, stderr.String())
	}
}

// TestStatusWatchRedisDown: a Redis that stops answering during the watch
// is reported once and retried; the snapshots resume when it is back.
func TestStatusWatchRedisDown(t *testing.T) {
	env, _, srv := server(t)
	p := startDL(t, t.TempDir(), env, "status", "--watch", "--json", "--interval", "100ms")
	seen := 0
	nextSnapshot(t, p, &seen, 10*time.Second)
	srv.Kill()
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(p.stderr.String(), "retrying every 100ms") {
		if time.Now().After(deadline) {
			t.Fatalf("Redis down not reported: stderr %q", p.stderr.String())
		}
		time.Sleep(5 * time.Millisecond) // polling another process's output
	}
	srv.Restart(t)
	for !strings.Contains(p.stderr.String(), "Redis answers again") {
		if time.Now().After(deadline) {
			t.Fatalf("Redis back not reported: stderr %q", p.stderr.String())
		}
		time.Sleep(5 * time.Millisecond) // polling another process's output
	}
	seen = len(p.stdout.String())
	nextSnapshot(t, p, &seen, 10*time.Second)
	if n := strings.Count(p.stderr.String(), "retrying"); n != 1 {
		t.Fatalf("the outage reported %d times, want once: %q", n, p.stderr.String())
	}
	signalProc(t, p, syscall.SIGINT)
	if code := p.wait(t, 10*time.Second); code != 0 {
		t.Fatalf("exit %d, want 0", code)
	}
}

func TestStatusWatchUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"status", "--watch", "--interval", "0"}, "--interval 0s: must be at least 100ms"},
		{[]string{"status", "--watch", "--interval", "50ms"}, "--interval 50ms: must be at least 100ms"},
		{[]string{"status", "--watch", "--interval", "soon"}, "bad duration"},
		{[]string{"status", "--interval", "1s"}, "--interval is for --watch"},
	} {
		code, out, stderr := dl(t, nil, tc.args...)
		if code != exitUsage || out != "" || !strings.Contains(stderr, tc.msg) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, code, stderr, exitUsage, tc.msg)
		}
	}
}

func TestFrame(t *testing.T) {
	got := string(frame([]string{"header", "", "KEY  FENCE", "a    1", "b    2", "c    3"}, 8, 5))
	want := "\033[Hheader\033[K\n\033[K\nKEY  FE\033[K\n... 3 more lines (enlarge the window or give a PATTERN)\033[K\n\033[J"
	// The last line is cut to the width too.
	want = strings.Replace(want, "... 3 more lines (enlarge the window or give a PATTERN)", "... 3 m", 1)
	if got != want {
		t.Fatalf("frame\n%q, want\n%q", got, want)
	}
	if got := string(frame([]string{"héllo wörld"}, 0, 0)); got != "\033[Hhéllo wörld\033[K\n\033[J" {
		t.Fatalf("unknown size: %q", got)
	}
	if got := clip("héllo", 3); got != "hél" {
		t.Fatalf("clip %q", got)
	}
}

// holeRelay is a TCP relay to a Redis server that a test can blackhole:
// from then on it swallows what either side sends, so that calls hang as on
// a dead network path, and it reports when a request has gone into the
// hole on a connection that never subscribed (not a pub/sub health check:
// a call that the client waits on).
type holeRelay struct {
	ln        net.Listener
	target    string
	hole      atomic.Bool
	swallowed chan struct{} // closed at the first such request swallowed
	once      sync.Once
	mu        sync.Mutex
	conns     []net.Conn
}

func startHoleRelay(t *testing.T, target string) *holeRelay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &holeRelay{ln: ln, target: target, swallowed: make(chan struct{})}
	t.Cleanup(func() {
		ln.Close()
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, c := range r.conns {
			c.Close()
		}
	})
	go func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("tcp", target)
			if err != nil {
				client.Close()
				continue
			}
			r.mu.Lock()
			r.conns = append(r.conns, client, server)
			r.mu.Unlock()
			go r.pass(client, server, true)
			go r.pass(server, client, false)
		}
	}()
	return r
}

func (r *holeRelay) addr() string { return r.ln.Addr().String() }

// blackhole starts swallowing.
func (r *holeRelay) blackhole() { r.hole.Store(true) }

// pass copies src to dst until the blackhole, and swallows from then on.
func (r *holeRelay) pass(src, dst net.Conn, upstream bool) {
	buf := make([]byte, 32<<10)
	subscriber := false
	for {
		n, err := src.Read(buf)
		if n > 0 {
			switch {
			case !r.hole.Load():
				subscriber = subscriber || upstream && bytes.Contains(bytes.ToLower(buf[:n]), []byte("subscribe"))
				if _, err := dst.Write(buf[:n]); err != nil {
					return
				}
			case upstream && !subscriber:
				r.once.Do(func() { close(r.swallowed) })
			}
		}
		if err != nil {
			return
		}
	}
}

// waitSwallowed waits until a call is stuck in the hole.
func (r *holeRelay) waitSwallowed(t *testing.T, within time.Duration, p *proc) {
	t.Helper()
	select {
	case <-r.swallowed:
	case <-time.After(within):
		t.Fatalf("no request went into the blackhole within %v; stderr %q", within, p.stderr.String())
	}
}

// endsPromptly sends sig to the watch p, which has a call stuck on a hung
// Redis, and checks that it ends at once with status 0, as documented,
// not when that call times out.
func endsPromptly(t *testing.T, p *proc, sig syscall.Signal) {
	t.Helper()
	sent := time.Now()
	signalProc(t, p, sig)
	code := p.wait(t, 2*refreshTimeout)
	took := time.Since(sent)
	t.Logf("%v: ended %v after the signal", sig, took.Round(time.Millisecond))
	if code != 0 {
		t.Errorf("%v: exit %d, want 0; stderr %q", sig, code, p.stderr.String())
	}
	// Well under a second on an idle machine; 2s is room for a loaded one.
	if took > 2*time.Second {
		t.Errorf("%v ended the watch only %v later (a call on the hung Redis was under way)", sig, took.Round(time.Millisecond))
	}
}

// watchSignals are the signals that end a watch (docs/cli.md).
var watchSignals = []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}

// TestStatusWatchEndsPromptlyOnSignalWhileRedisHangs: `status --watch`
// runs "until SIGINT (Ctrl-C), SIGTERM or SIGHUP ... and then exits with
// status 0" (docs/cli.md). On a Redis that takes requests and never answers
// a refresh is under way nearly all the time; a signal must end the watch
// at once, not when that refresh times out (refreshTimeout, 10s).
func TestStatusWatchEndsPromptlyOnSignalWhileRedisHangs(t *testing.T) {
	_, _, srv := server(t)
	var ps []*proc
	var relays []*holeRelay
	for range watchSignals {
		r := startHoleRelay(t, srv.Addr)
		p := startDL(t, t.TempDir(), []string{"DISTLOCK_REDIS_URL=redis://" + r.addr()}, "status", "--watch", "--json", "--interval", "100ms")
		seen := 0
		nextSnapshot(t, p, &seen, 10*time.Second)
		ps, relays = append(ps, p), append(relays, r)
	}
	for i, sig := range watchSignals {
		relays[i].blackhole()
		relays[i].waitSwallowed(t, 10*time.Second, ps[i])
		endsPromptly(t, ps[i], sig)
	}
}

// TestLeaderWatchEndsPromptlyOnSignalWhileRedisHangs: the same for `leader
// --watch`, whose lookups of the leader (one when the lease it last saw
// runs out) hang on such a Redis.
func TestLeaderWatchEndsPromptlyOnSignalWhileRedisHangs(t *testing.T) {
	_, c, srv := server(t)
	e, err := c.NewElection("hang")
	if err != nil {
		t.Fatal(err)
	}
	// A short lease, renewed by this process straight on Redis: the watch
	// looks the leader up again every second.
	l, err := e.Campaign(ctxT(t, 10*time.Second), "me", distlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Resign(context.Background()) })
	var ps []*proc
	var relays []*holeRelay
	for range watchSignals {
		r := startHoleRelay(t, srv.Addr)
		p := startDL(t, t.TempDir(), []string{"DISTLOCK_REDIS_URL=redis://" + r.addr()}, "leader", "--watch", "--json", "hang")
		waitStdout(t, p, `"value":"me"`, 10*time.Second)
		ps, relays = append(ps, p), append(relays, r)
	}
	for i, sig := range watchSignals {
		relays[i].blackhole()
		relays[i].waitSwallowed(t, 10*time.Second, ps[i])
		endsPromptly(t, ps[i], sig)
	}
}
