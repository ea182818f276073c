package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/distlock/distlock"
)

// jsonLines parses every line of out as a JSON object with the fields
// every message has.
func jsonLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var msgs []map[string]any
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("not a JSON line: %v: %q\nin:\n%s", err, line, out)
		}
		if _, err := time.Parse(time.RFC3339Nano, str(m["time"])); err != nil || m["level"] == nil || str(m["msg"]) == "" {
			t.Fatalf("line without time, level or msg: %q", line)
		}
		msgs = append(msgs, m)
	}
	return msgs
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

// find returns the first message with field = value, failing if none.
func find(t *testing.T, msgs []map[string]any, field, value string) map[string]any {
	t.Helper()
	for _, m := range msgs {
		if str(m[field]) == value {
			return m
		}
	}
	t.Fatalf("no message with %s %q in %v", field, value, msgs)
	return nil
}

// waitStderr waits until p's stderr contains want.
func waitStderr(t *testing.T, p *proc, want string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !strings.Contains(p.stderr.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("stderr does not show %q within %v: %q", want, within, p.stderr.String())
		}
		time.Sleep(5 * time.Millisecond) // polling another process's output
	}
}

// TestRunLogJSON (issue 14): with --log-format json every message of the
// runner, its keeper and the library is one JSON object per line; a loss
// says which key and why.
func TestRunLogJSON(t *testing.T) {
	env, c, _ := server(t)
	ctx := ctxT(t, 20*time.Second)
	other, err := c.TryLock(ctx, "json-loss", distlock.WithMetadata("host=other pid=1"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p := startDL(t, dir, env, "run", "-v", "--log-format", "json", "--ttl", "600ms", "--grace", "300ms",
		"json-loss", "--", "sh", "-c", `echo "$DISTLOCK_FENCE" > started; while :; do sleep 0.02; done`)
	waitStderr(t, p, `"event":"waiting"`, 10*time.Second)
	if err := other.Release(ctx); err != nil {
		t.Fatal(err)
	}
	waitFile(t, filepath.Join(dir, "started"), 10*time.Second)
	removed, err := c.ForceRelease(ctx, "json-loss", 0)
	if err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 10*time.Second); code != exitLost {
		t.Fatalf("exit %d, want %d; stderr %s", code, exitLost, p.stderr.String())
	}
	msgs := jsonLines(t, p.stderr.String())

	waiting := find(t, msgs, "event", "waiting")
	if waiting["key"] != "json-loss" || waiting["holder"] != "host=other pid=1" || waiting["holder_fence"] != float64(other.Fence()) {
		t.Fatalf("waiting message %v", waiting)
	}
	if took := find(t, msgs, "event", "acquired"); took["fence"] != float64(removed.Fence) || took["level"] != "INFO" {
		t.Fatalf("acquired message %v, want fence %d", took, removed.Fence)
	}
	lost := find(t, msgs, "event", "lost")
	if lost["key"] != "json-loss" || lost["level"] != "ERROR" || lost["fence"] != float64(removed.Fence) ||
		!strings.Contains(str(lost["cause"]), "lease expired") || lost["command"] != "sh" {
		t.Fatalf("loss message %v", lost)
	}
	// The library's own report, through distlock.WithLogger.
	lib := find(t, msgs, "msg", "distlock: lock lost")
	if lib["key"] != "json-loss" || lib["cause"] != lost["cause"] || lib["fence"] != lost["fence"] {
		t.Fatalf("library loss message %v, want the same key, fence and cause as %v", lib, lost)
	}
}

// TestRunLogText: without --log-format, a loss is the one plain line it
// always was; the library's logs come only with -v.
func TestRunLogText(t *testing.T) {
	env, c, _ := server(t)
	dir := t.TempDir()
	p := startDL(t, dir, env, "run", "--ttl", "600ms", "--grace", "300ms", "text-loss", "--", "sh", "-c", `echo x > started; while :; do sleep 0.02; done`)
	waitFile(t, filepath.Join(dir, "started"), 10*time.Second)
	if _, err := c.ForceRelease(ctxT(t, 5*time.Second), "text-loss", 0); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 10*time.Second); code != exitLost {
		t.Fatalf("exit %d, want %d; stderr %s", code, exitLost, p.stderr.String())
	}
	want := `distlock run: lock "text-loss" lost (distlock: lock lost: lease expired); stopping sh: SIGTERM now, SIGKILL in 300ms` + "\n"
	if got := p.stderr.String(); got != want {
		t.Fatalf("stderr\n%q, want\n%q", got, want)
	}

	p = startDL(t, dir, env, "run", "-v", "--ttl", "600ms", "--grace", "300ms", "text-loss-v", "--", "sh", "-c", `echo x > started-v; while :; do sleep 0.02; done`)
	waitFile(t, filepath.Join(dir, "started-v"), 10*time.Second)
	if _, err := c.ForceRelease(ctxT(t, 5*time.Second), "text-loss-v", 0); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 10*time.Second); code != exitLost {
		t.Fatalf("-v: exit %d, want %d; stderr %s", code, exitLost, p.stderr.String())
	}
	if got := p.stderr.String(); !strings.Contains(got, `distlock run: level=WARN msg="distlock: lock lost" key=text-loss-v `) {
		t.Fatalf("-v: no library loss message in\n%s", got)
	}
}

// TestRunLogJSONRunner: the runner's own messages are JSON too (here a
// signal that ends the wait), and so is a usage error once the format is
// known.
func TestRunLogJSONRunner(t *testing.T) {
	env, c, _ := server(t)
	ctx := ctxT(t, 20*time.Second)
	l, err := c.TryLock(ctx, "json-wait")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	p := startDL(t, t.TempDir(), env, "run", "--log-format=json", "json-wait", "--", "true")
	waitInLine(t, c, "json-wait", p)
	signalProc(t, p, syscall.SIGTERM)
	if code := p.wait(t, 10*time.Second); code != 128+int(syscall.SIGTERM) {
		t.Fatalf("exit %d; stderr %s", code, p.stderr.String())
	}
	msgs := jsonLines(t, p.stderr.String())
	if m := find(t, msgs, "event", "interrupted"); m["key"] != "json-wait" || m["signal"] != "terminated" || m["level"] != "WARN" {
		t.Fatalf("interrupted message %v", m)
	}

	code, _, stderr := dl(t, env, "run", "--log-format", "json", "--ttl", "0", "k", "--", "true")
	if code != exitUsage {
		t.Fatalf("--ttl 0: exit %d", code)
	}
	if msgs := jsonLines(t, stderr); len(msgs) != 1 || msgs[0]["event"] != "usage" || !strings.Contains(str(msgs[0]["msg"]), "--ttl") {
		t.Fatalf("usage error %q, want one JSON line", stderr)
	}
}

func TestRunLogFormatUsage(t *testing.T) {
	code, _, stderr := dl(t, nil, "run", "--log-format", "xml", "k", "--", "true")
	if code != exitUsage || !strings.Contains(stderr, `invalid value "xml" for --log-format: want text or json`) {
		t.Fatalf("exit %d, stderr %q; want %d naming --log-format", code, stderr, exitUsage)
	}
}
