package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redistest"
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
	doc := docEvents(t)

	waiting := checkEvent(t, doc, msgs, evWaiting)
	if waiting["key"] != "json-loss" || waiting["holder"] != "host=other pid=1" || waiting["holder_fence"] != float64(other.Fence()) {
		t.Fatalf("waiting message %v", waiting)
	}
	if took := checkEvent(t, doc, msgs, evAcquired); took["fence"] != float64(removed.Fence) || took["level"] != "INFO" {
		t.Fatalf("acquired message %v, want fence %d", took, removed.Fence)
	}
	lost := checkEvent(t, doc, msgs, evLost)
	if lost["key"] != "json-loss" || lost["grace"] != float64(300*time.Millisecond) || lost["fence"] != float64(removed.Fence) ||
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
	doc := docEvents(t)
	if m := checkEvent(t, doc, msgs, evInterrupted); m["key"] != "json-wait" || m["signal"] != "terminated" {
		t.Fatalf("interrupted message %v", m)
	}

	code, _, stderr := dl(t, env, "run", "--log-format", "json", "--ttl", "0", "k", "--", "true")
	if code != exitUsage {
		t.Fatalf("--ttl 0: exit %d", code)
	}
	if msgs := jsonLines(t, stderr); len(msgs) != 1 || !strings.Contains(str(checkEvent(t, doc, msgs, evUsage)["msg"]), "--ttl") {
		t.Fatalf("usage error %q, want one JSON line", stderr)
	}
}

func TestRunLogFormatUsage(t *testing.T) {
	code, _, stderr := dl(t, nil, "run", "--log-format", "xml", "k", "--", "true")
	if code != exitUsage || !strings.Contains(stderr, `invalid value "xml" for --log-format: want text or json`) {
		t.Fatalf("exit %d, stderr %q; want %d naming --log-format", code, stderr, exitUsage)
	}
}

// docEvent is a row of docs/cli.md's table of JSON events: its level and
// the fields it may carry besides the common ones.
type docEvent struct {
	level  string
	fields []string
}

// docEvents reads the table of events in docs/cli.md, the contract the
// JSON messages are checked against.
func docEvents(t *testing.T) map[string]docEvent {
	t.Helper()
	_, table, ok := strings.Cut(readFile(t, "../../docs/cli.md"), "| event | level | when | fields |\n|---|---|---|---|\n")
	if !ok {
		t.Fatal("docs/cli.md has no table of events")
	}
	table, _, _ = strings.Cut(table, "\n\n")
	events := map[string]docEvent{}
	name := regexp.MustCompile("`([a-z_]+)`")
	for _, row := range strings.Split(table, "\n") {
		cols := strings.Split(row, "|")
		if len(cols) != 6 {
			t.Fatalf("docs/cli.md: event row %q", row)
		}
		ev := name.FindStringSubmatch(cols[1])
		if ev == nil {
			t.Fatalf("docs/cli.md: event row %q", row)
		}
		d := docEvent{level: strings.TrimSpace(cols[2])}
		for _, m := range name.FindAllStringSubmatch(cols[4], -1) {
			d.fields = append(d.fields, m[1])
		}
		events[ev[1]] = d
	}
	return events
}

// commonFields are on every message of distlock's own; key is absent from
// usage errors only.
var commonFields = []string{"time", "level", "msg", "event", "key"}

// fieldOK checks the type and sense of a field, by name: the same thing has
// the same name in every message. Durations are nanoseconds.
var fieldOK = map[string]func(any) bool{
	"holder":       isString,
	"holder_fence": isCount,
	"fence":        isCount,
	"wait":         isDuration,
	"waited":       isDuration,
	"grace":        isDuration,
	"ttl":          isDuration,
	"silence":      isDuration,
	"signal":       isText,
	"command":      isText,
	"error":        isText,
	"cause":        isText,
	"state":        isText,
	"pgid":         isCount,
	"dropped":      isCount,
}

func isString(v any) bool { _, ok := v.(string); return ok }
func isText(v any) bool   { return str(v) != "" }
func isDuration(v any) bool {
	f, ok := v.(float64)
	return ok && f >= 0 && f == float64(int64(f))
}
func isCount(v any) bool { f, ok := v.(float64); return ok && f > 0 && f == float64(int64(f)) }

// checkEvent finds the one message of event in msgs and checks it against
// docs/cli.md: its level, and exactly the common fields and the event's
// own, each of the right type. fields, if given, are the documented fields
// this situation carries (the table says when some are absent); otherwise
// all of them.
func checkEvent(t *testing.T, doc map[string]docEvent, msgs []map[string]any, event string, fields ...string) map[string]any {
	t.Helper()
	d, ok := doc[event]
	if !ok {
		t.Fatalf("event %q is not in docs/cli.md's table", event)
	}
	if fields == nil {
		fields = d.fields
	}
	var found []map[string]any
	for _, m := range msgs {
		if m["event"] == event {
			found = append(found, m)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d messages of event %q, want 1: %v", len(found), event, msgs)
	}
	m := found[0]
	if m["level"] != d.level {
		t.Errorf("%s: level %v, docs/cli.md says %s: %v", event, m["level"], d.level, m)
	}
	want := map[string]bool{}
	for _, f := range commonFields {
		want[f] = true
	}
	if event == evUsage {
		if _, ok := m["key"]; !ok {
			delete(want, "key")
		}
	}
	for _, f := range fields {
		if !slices.Contains(d.fields, f) {
			t.Fatalf("%s: field %q is not in docs/cli.md's table (%v)", event, f, d.fields)
		}
		want[f] = true
	}
	for f := range want {
		if _, ok := m[f]; !ok {
			t.Errorf("%s: no field %q: %v", event, f, m)
		}
	}
	for f, v := range m {
		switch {
		case !want[f]:
			t.Errorf("%s: field %q not in docs/cli.md's table (%v): %v", event, f, fields, m)
		case f == "key" && !isText(v):
			t.Errorf("%s: key %v", event, v)
		case slices.Contains(commonFields, f):
		case fieldOK[f] == nil:
			t.Errorf("%s: the test does not know field %q", event, f)
		case !fieldOK[f](v):
			t.Errorf("%s: %s %#v", event, f, v)
		}
	}
	return m
}

// index is the position of event's first message in msgs, -1 if none.
func index(msgs []map[string]any, event string) int {
	return slices.IndexFunc(msgs, func(m map[string]any) bool { return m["event"] == event })
}

// TestRunLogEventsDocumented: every event distlock names is in
// docs/cli.md's table, and nothing else is.
func TestRunLogEventsDocumented(t *testing.T) {
	doc := docEvents(t)
	ours := []string{evWaiting, evAcquired, evNotObtained, evInterrupted, evCannotRun, evLost, evKill, evRunnerDied,
		evKeeperDied, evKeeperStalled, evLeftRunning, evReleased, evReleaseFail, evUsage, evError, evDropped}
	for _, ev := range ours {
		if _, ok := doc[ev]; !ok {
			t.Errorf("event %q is not in docs/cli.md", ev)
		}
	}
	for ev, d := range doc {
		if !slices.Contains(ours, ev) {
			t.Errorf("docs/cli.md lists event %q, which distlock does not have", ev)
		}
		for _, f := range d.fields {
			if fieldOK[f] == nil {
				t.Errorf("docs/cli.md: %s has field %q, which the tests do not know", ev, f)
			}
		}
	}
}

// TestRunLogJSONEvents: each of distlock's own JSON messages that the tests
// above do not produce, in the situation that produces it, has the level
// and exactly the fields docs/cli.md's table gives it.
func TestRunLogJSONEvents(t *testing.T) {
	doc := docEvents(t)
	env, c, _ := server(t)
	ctx := ctxT(t, 60*time.Second)
	// COMMAND's own stderr (sh's complaints) would mix with the JSON lines.
	const quiet = "exec 2>/dev/null\n"

	run := func(t *testing.T, dir string, env []string, args ...string) *proc {
		t.Helper()
		return startDL(t, dir, env, append([]string{"run", "--log-format", "json"}, args...)...)
	}
	exit := func(t *testing.T, p *proc, want int) []map[string]any {
		t.Helper()
		if code := p.wait(t, 10*time.Second); code != want {
			t.Fatalf("exit %d, want %d; stderr %s", code, want, p.stderr.String())
		}
		return jsonLines(t, p.stderr.String())
	}

	t.Run("not_obtained", func(t *testing.T) {
		l, err := c.TryLock(ctx, "ev-busy", distlock.WithMetadata("host=other pid=1"))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
		msgs := exit(t, run(t, t.TempDir(), env, "--wait", "100ms", "ev-busy", "--", "true"), exitNotObtained)
		m := checkEvent(t, doc, msgs, evNotObtained)
		if m["key"] != "ev-busy" || m["holder"] != "host=other pid=1" || m["holder_fence"] != float64(l.Fence()) ||
			m["wait"] != float64(100*time.Millisecond) {
			t.Fatalf("not_obtained %v", m)
		}
	})

	t.Run("cannot_run", func(t *testing.T) {
		dir := t.TempDir()
		// Executable, so found, but its interpreter is not: exec fails
		// (EACCES) in the shim that becomes COMMAND, after the runner's
		// checks. (A file that is no program at all runs under /bin/sh,
		// as under execvp(3).)
		interp := filepath.Join(dir, "interp")
		if err := os.WriteFile(interp, []byte("not a program\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "junk"), []byte("#!"+interp+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			command string
			code    int
			err     string
		}{
			{"no-such-command-xyz", exitNotFound, "not found"},               // the runner's
			{filepath.Join(dir, "junk"), exitCannotRun, "permission denied"}, // the shim's
		} {
			m := checkEvent(t, doc, exit(t, run(t, dir, env, "ev-cannot", "--", tc.command), tc.code), evCannotRun)
			if m["key"] != "ev-cannot" || m["command"] != tc.command || !strings.Contains(str(m["error"]), tc.err) {
				t.Fatalf("cannot_run %v, want command %q and an error with %q", m, tc.command, tc.err)
			}
		}
	})

	t.Run("left_running and released", func(t *testing.T) {
		dir := t.TempDir()
		p := run(t, dir, env, "-v", "ev-left", "--", "sh", "-c", quiet+`(while [ ! -e go ]; do sleep 0.02; done) >/dev/null &
echo $$ > pgid; exit 3`)
		pgid, _ := strconv.Atoi(strings.TrimSpace(waitFile(t, filepath.Join(dir, "pgid"), 10*time.Second)))
		t.Cleanup(func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) })
		waitStderr(t, p, `"event":"left_running"`, 10*time.Second)
		if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		msgs := exit(t, p, 3)
		if m := checkEvent(t, doc, msgs, evLeftRunning); m["key"] != "ev-left" || m["command"] != "sh" || m["pgid"] != float64(pgid) {
			t.Fatalf("left_running %v, want pgid %d", m, pgid)
		}
		took := checkEvent(t, doc, msgs, evAcquired)
		if m := checkEvent(t, doc, msgs, evReleased); m["key"] != "ev-left" || m["fence"] != took["fence"] {
			t.Fatalf("released %v, want the fence of %v", m, took)
		}
	})

	t.Run("sigkill by the keeper", func(t *testing.T) {
		// A loss: the keeper stops COMMAND, and kills it after --grace.
		dir := t.TempDir()
		p := run(t, dir, env, "--ttl", "600ms", "--grace", "300ms", "ev-kill", "--", "sh", "-c", quiet+`trap '' TERM
echo $$ > started; while :; do sleep 0.02; done`)
		pid, _ := strconv.Atoi(strings.TrimSpace(waitFile(t, filepath.Join(dir, "started"), 10*time.Second)))
		t.Cleanup(func() { _ = syscall.Kill(-pid, syscall.SIGKILL) })
		if _, err := c.ForceRelease(ctx, "ev-kill", 0); err != nil {
			t.Fatal(err)
		}
		msgs := exit(t, p, exitLost)
		checkEvent(t, doc, msgs, evLost)
		if m := checkEvent(t, doc, msgs, evKill); m["key"] != "ev-kill" || m["command"] != "sh" || m["grace"] != float64(300*time.Millisecond) {
			t.Fatalf("sigkill %v", m)
		}
		if index(msgs, evKill) < index(msgs, evLost) {
			t.Fatalf("sigkill before lost: %v", msgs)
		}
	})

	t.Run("keeper_stalled, keeper_died and sigkill by the runner", func(t *testing.T) {
		// A window of max(600ms/6, 100ms): the stopped keeper is given up
		// after two, 200ms of silence; the runner stops COMMAND itself.
		dir := t.TempDir()
		p := run(t, dir, env, "--ttl", "600ms", "--grace", "300ms", "ev-stalled", "--", "sh", "-c", quiet+`trap '' TERM
echo $$ > started; while :; do sleep 0.02; done`)
		pid, _ := strconv.Atoi(strings.TrimSpace(waitFile(t, filepath.Join(dir, "started"), 10*time.Second)))
		t.Cleanup(func() { _ = syscall.Kill(-pid, syscall.SIGKILL) })
		keeper := childWithArg(t, p.cmd.Process.Pid, keeperCmd)
		t.Cleanup(func() { _ = syscall.Kill(keeper, syscall.SIGKILL) })
		stopped := time.Now()
		if err := syscall.Kill(keeper, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		msgs := exit(t, p, exitLost)
		// The silence is measured: at least the two windows, at most the
		// time since the stop and a window (a ping may have gone out just
		// before it).
		m := checkEvent(t, doc, msgs, evKeeperStalled)
		silence := time.Duration(m["silence"].(float64))
		if m["key"] != "ev-stalled" || silence < 2*heartbeatMin || silence > time.Since(stopped)+heartbeatMin {
			t.Fatalf("keeper_stalled %v (silence %v, %v after the stop)", m, silence, time.Since(stopped))
		}
		if m := checkEvent(t, doc, msgs, evKeeperDied); m["command"] != "sh" || m["grace"] != float64(300*time.Millisecond) ||
			!strings.Contains(str(m["state"]), "killed") {
			t.Fatalf("keeper_died %v", m)
		}
		if m := checkEvent(t, doc, msgs, evKill); m["command"] != "sh" || m["grace"] != float64(300*time.Millisecond) {
			t.Fatalf("sigkill %v", m)
		}
		if !(index(msgs, evKeeperStalled) < index(msgs, evKeeperDied) && index(msgs, evKeeperDied) < index(msgs, evKill)) {
			t.Fatalf("not keeper_stalled, keeper_died, sigkill in that order: %v", msgs)
		}
	})

	t.Run("runner_died", func(t *testing.T) {
		dir := t.TempDir()
		p := run(t, dir, env, "-v", "ev-runner", "--", "sh", "-c", quiet+`echo $$ > started; while :; do sleep 0.02; done`)
		pid, _ := strconv.Atoi(strings.TrimSpace(waitFile(t, filepath.Join(dir, "started"), 10*time.Second)))
		t.Cleanup(func() { _ = syscall.Kill(-pid, syscall.SIGKILL) })
		signalProc(t, p, syscall.SIGKILL)
		// The keeper, which shares the runner's stderr, writes on.
		msgs := exit(t, p, -1)
		if m := checkEvent(t, doc, msgs, evRunnerDied); m["key"] != "ev-runner" || m["command"] != "sh" {
			t.Fatalf("runner_died %v", m)
		}
		checkEvent(t, doc, msgs, evReleased)
	})

	t.Run("lost at release", func(t *testing.T) {
		// Force-released just before COMMAND exits, long before the next
		// renewal (10s): the release finds the loss.
		dir := t.TempDir()
		p := run(t, dir, env, "--ttl", "30s", "ev-lost", "--", "sh", "-c", quiet+`echo x > started; while [ ! -e go ]; do sleep 0.02; done`)
		waitFile(t, filepath.Join(dir, "started"), 10*time.Second)
		if _, err := c.ForceRelease(ctx, "ev-lost", 0); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		m := checkEvent(t, doc, exit(t, p, exitLost), evLost)
		if !strings.Contains(str(m["msg"]), "was lost before sh finished") || !strings.Contains(str(m["cause"]), "lost") {
			t.Fatalf("lost %v", m)
		}
	})

	t.Run("error", func(t *testing.T) { // usage: TestRunLogJSONRunner
		down, _ := redistest.FreePort()
		msgs := exit(t, run(t, t.TempDir(), []string{fmt.Sprintf("DISTLOCK_REDIS_URL=redis://127.0.0.1:%d", down)}, "ev-error", "--", "true"), exitRedis)
		if m := checkEvent(t, doc, msgs, evError); m["key"] != "ev-error" || !strings.Contains(str(m["msg"]), "connection refused") {
			t.Fatalf("error %v", m)
		}
	})

	t.Run("release_failed", func(t *testing.T) {
		// Redis gone when COMMAND exits: the release fails, the lease
		// runs out; COMMAND's status stands.
		env, _, srv := server(t)
		dir := t.TempDir()
		p := run(t, dir, env, "--ttl", "3s", "ev-release", "--", "sh", "-c", quiet+`echo x > started; while [ ! -e go ]; do sleep 0.02; done; exit 4`)
		waitFile(t, filepath.Join(dir, "started"), 10*time.Second)
		srv.Kill()
		if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		m := checkEvent(t, doc, exit(t, p, 4), evReleaseFail)
		if m["key"] != "ev-release" || m["ttl"] != float64(3*time.Second) || !strings.Contains(str(m["error"]), "refused") {
			t.Fatalf("release_failed %v", m)
		}
	})
}
