package main

import (
	"encoding/json"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
)

// TestStatusJSONSchema pins the documented schema: field names and JSON
// types of every lock object.
func TestStatusJSONSchema(t *testing.T) {
	env, c, _ := server(t)
	ctx := ctxT(t, 10*time.Second)
	before := time.Now().Add(-time.Second)
	a, err := c.TryLock(ctx, "deploy:prod", distlock.WithMetadata("host=web-1 pid=4242 cmd=deploy"))
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := c.TryLock(ctx, "deploy:stage", distlock.WithOwner("ci"), distlock.WithMetadata("free text")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.TryLock(ctx, "backup"); err != nil {
		t.Fatal(err)
	}

	code, out, stderr := dl(t, env, "status", "deploy:*", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var raw map[string][]map[string]any
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	locks := raw["locks"]
	if len(raw) != 1 || len(locks) != 2 {
		t.Fatalf("want {\"locks\": [2 locks]}, got %s", out)
	}
	schema := map[string]string{
		"key": "string", "kind": "string", "limit": "number", "owner": "string", "holds": "number", "fence": "number",
		"ttl_ms": "number", "since": "string", "meta": "string", "host": "string",
		"pid": "number", "queued": "number", "listening": "number",
	}
	for _, l := range locks {
		var names []string
		for k, v := range l {
			names = append(names, k)
			want, ok := schema[k]
			if !ok {
				t.Errorf("undocumented field %q", k)
				continue
			}
			if got := jsonType(v); got != want {
				t.Errorf("%s: %s is a %s, want %s", l["key"], k, got, want)
			}
		}
		if len(names) != len(schema) {
			sort.Strings(names)
			t.Errorf("fields %v, want the %d documented ones", names, len(schema))
		}
	}
	prod, stage := locks[0], locks[1]
	if prod["key"] != "deploy:prod" || stage["key"] != "deploy:stage" {
		t.Fatalf("not sorted by key: %s", out)
	}
	if prod["owner"] != a.Token() || prod["fence"] != float64(a.Fence()) || prod["holds"] != 1.0 ||
		prod["host"] != "web-1" || prod["pid"] != 4242.0 || prod["meta"] != "host=web-1 pid=4242 cmd=deploy" {
		t.Fatalf("deploy:prod = %v", prod)
	}
	if ttl := prod["ttl_ms"].(float64); ttl <= 0 || ttl > float64(distlock.DefaultTTL.Milliseconds()) {
		t.Fatalf("ttl_ms %v", ttl)
	}
	since, err := time.Parse(time.RFC3339Nano, prod["since"].(string))
	if err != nil || since.Before(before) || since.After(time.Now()) {
		t.Fatalf("since %v (%v), want about now", prod["since"], err)
	}
	if stage["owner"] != "ci" || stage["holds"] != 2.0 || stage["host"] != "" || stage["pid"] != 0.0 {
		t.Fatalf("deploy:stage = %v", stage)
	}

	// A free KEY: an empty list and exit 1.
	code, out, _ = dl(t, env, "status", "--json", "nothing-here")
	if code != exitNone || strings.TrimSpace(out) != "{\n  \"locks\": []\n}" {
		t.Fatalf("free key: exit %d, %q", code, out)
	}
}

func jsonType(v any) string {
	switch v.(type) {
	case string:
		return "string"
	case float64:
		return "number"
	case nil:
		return "null"
	}
	return reflect.TypeOf(v).String()
}

func TestStatusTable(t *testing.T) {
	env, c, _ := server(t)
	ctx := ctxT(t, 10*time.Second)
	code, out, _ := dl(t, env, "status")
	if code != exitNone || out != "no locks held\n" {
		t.Fatalf("empty: exit %d %q", code, out)
	}
	if _, err := c.TryLock(ctx, "job:a", distlock.WithMetadata("host=h1 pid=1")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryLock(ctx, "job:b", distlock.WithMetadata("host=h2 pid=2\x1b[31m")); err != nil {
		t.Fatal(err)
	}
	code, out, _ = dl(t, env, "status")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 3 || !strings.HasPrefix(lines[0], "KEY ") ||
		!strings.HasPrefix(lines[1], "job:a ") || !strings.HasSuffix(lines[1], "host=h1 pid=1") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	if strings.Contains(out, "\x1b") {
		t.Fatalf("control characters reach the terminal: %q", out)
	}
	for _, col := range []string{"KIND", "FENCE", "TTL", "AGE", "HOLDS", "WAITERS", "HOLDER"} {
		if !strings.Contains(lines[0], col) {
			t.Fatalf("header %q lacks %s", lines[0], col)
		}
	}
	if code, out, _ = dl(t, env, "status", "job:b"); code != 0 || !strings.Contains(out, "job:b") || strings.Contains(out, "job:a") {
		t.Fatalf("one key: exit %d\n%s", code, out)
	}
	if code, out, _ = dl(t, env, "status", "job:z"); code != exitNone || out != "job:z is free\n" {
		t.Fatalf("free key: exit %d %q", code, out)
	}
	// A control character in the name cannot rewrite the terminal.
	if code, out, _ = dl(t, env, "status", "job:\x1bz\x07"); code != exitNone || out != "job:?z? is free\n" {
		t.Fatalf("free key with an escape: exit %d %q", code, out)
	}
	// A PATTERN matches whole names: "x{job:c" only ends with a match.
	if _, err := c.TryLock(ctx, "x{job:c"); err != nil {
		t.Fatal(err)
	}
	if code, out, _ = dl(t, env, "status", "job:*"); code != 0 || strings.Count(out, "\n") != 3 || strings.Contains(out, "job:c") {
		t.Fatalf("pattern: exit %d\n%s", code, out)
	}
	if code, _, stderr := dl(t, env, "status", "a", "b"); code != exitUsage || !strings.Contains(stderr, "one KEY or PATTERN") {
		t.Fatalf("two args: exit %d %q", code, stderr)
	}
}

// TestStatusKinds: status shows every kind of hold, a line each, with its
// KIND in the table and "kind" (and a permit's "limit") in the JSON.
func TestStatusKinds(t *testing.T) {
	env, c, _ := server(t)
	ctx := ctxT(t, 10*time.Second)
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(c.TryLock(ctx, "k:lock", distlock.WithMetadata("m=lock")))
	rw, err := c.NewRWMutex("k:rw")
	must(rw, err)
	must(rw.TryRLock(ctx, distlock.WithMetadata("m=r1")))
	must(rw.TryRLock(ctx, distlock.WithMetadata("m=r2")))
	w, err := c.NewRWMutex("k:w")
	must(w, err)
	must(w.TryLock(ctx, distlock.WithMetadata("m=w")))
	sem, err := c.NewSemaphore("k:sem", 3)
	must(sem, err)
	must(sem.TryAcquire(ctx, distlock.WithMetadata("m=p")))
	e, err := c.NewElection("k:lead")
	must(e, err)
	must(e.Campaign(ctx, "m=leader"))

	want := map[string]string{"m=lock": "lock", "m=r1": "read", "m=r2": "read", "m=w": "write", "m=p": "permit/3", "m=leader": "leader"}
	code, out, stderr := dl(t, env, "status", "k:*")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 1+len(want) || strings.Fields(lines[0])[1] != "KIND" {
		t.Fatalf("exit %d %s\n%s", code, stderr, out)
	}
	for _, line := range lines[1:] {
		f := strings.Fields(line)
		if kind := want[f[len(f)-1]]; kind != f[1] {
			t.Errorf("KIND %q, want %q in %q", f[1], kind, line)
		}
	}

	code, out, _ = dl(t, env, "status", "--json", "k:*")
	var st struct {
		Locks []lockJSON `json:"locks"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil || code != 0 || len(st.Locks) != len(want) {
		t.Fatalf("exit %d, %v: %s", code, err, out)
	}
	for _, l := range st.Locks {
		kind, limit, _ := strings.Cut(want[l.Meta], "/")
		if l.Kind != kind || (limit == "3") != (l.Limit == 3) || (limit == "" && l.Limit != 0) {
			t.Errorf("%s: kind %q limit %d, want %s", l.Key, l.Kind, l.Limit, want[l.Meta])
		}
	}

	// A KEY shows that name's holds of every kind.
	code, out, _ = dl(t, env, "status", "k:rw")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); code != 0 || len(lines) != 3 || !strings.Contains(out, "m=r1") || !strings.Contains(out, "m=r2") {
		t.Fatalf("status k:rw: exit %d\n%s", code, out)
	}
}

func TestReleaseForce(t *testing.T) {
	env, c, _ := server(t)
	ctx := ctxT(t, 10*time.Second)
	l, err := c.TryLock(ctx, "stuck", distlock.WithTTL(time.Second), distlock.WithMetadata("host=dead pid=9"))
	if err != nil {
		t.Fatal(err)
	}
	// The test's stdin is not a terminal: no confirmation is possible.
	code, _, stderr := dl(t, env, "release", "--force", "stuck")
	if code != exitUsage || !strings.Contains(stderr, "--yes") {
		t.Fatalf("without --yes: exit %d %q", code, stderr)
	}
	code, _, stderr = dl(t, env, "release", "stuck", "--yes")
	if code != exitUsage || !strings.Contains(stderr, "needs --force") {
		t.Fatalf("without --force: exit %d %q", code, stderr)
	}
	if info, _ := c.Inspect(ctx, "stuck"); !info.Held() {
		t.Fatal("refused releases removed the lock")
	}

	code, out, stderr := dl(t, env, "release", "--force", "stuck", "--yes", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var removed lockJSON
	if err := json.Unmarshal([]byte(out), &removed); err != nil {
		t.Fatal(err)
	}
	if removed.Key != "stuck" || removed.Fence != l.Fence() || removed.Owner != l.Token() || removed.Host != "dead" {
		t.Fatalf("removed %+v", removed)
	}
	select {
	case <-l.Lost():
	case <-time.After(3 * time.Second):
		t.Fatal("holder did not notice")
	}
	code, _, stderr = dl(t, env, "release", "--force", "--yes", "stuck")
	if code != exitNone || !strings.Contains(stderr, "nothing released") {
		t.Fatalf("free lock: exit %d %q", code, stderr)
	}

	// A read hold is not freed, and not called free either.
	rw, _ := c.NewRWMutex("shared")
	if _, err := rw.TryRLock(ctx); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = dl(t, env, "release", "--force", "--yes", "shared")
	if code != exitNone || !strings.Contains(stderr, "held as a read") || strings.Contains(stderr, "is free") {
		t.Fatalf("read hold: exit %d %q", code, stderr)
	}
}

// status finds a held lock whose name is not UTF-8 ("exit status 1 if
// nothing holds it"): names are bytes.
func TestStatusKeyWithNonUTF8Byte(t *testing.T) {
	env, c, _ := server(t)
	ctx := ctxT(t, 10*time.Second)
	const name = "caf\xe9-report" // a Latin-1 name
	if _, err := c.TryLock(ctx, name); err != nil {
		t.Fatal(err)
	}
	if code, out, stderr := dl(t, env, "status", name); code != 0 {
		t.Fatalf("status of a held lock: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
}
