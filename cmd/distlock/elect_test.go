package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestElect: of two `distlock elect` runs only one runs its COMMAND; a
// SIGKILL on the leader's runner kills its COMMAND (process group), and the
// other candidate leads and starts its own, with a higher term. `leader`
// shows the value; `leader --watch` prints the change.
func TestElect(t *testing.T) {
	env, c, _ := server(t)
	dir := t.TempDir()
	const ttl = 3 * time.Second
	// The first leader's COMMAND has a background child: the whole group
	// must go when its runner is killed.
	script := `if [ "$ID" = A ]; then sleep 600 & child=$!; else child=$$; fi
echo "$$ $child $DISTLOCK_FENCE $DISTLOCK_KEY" > "lead.$ID"
trap 'exit 0' TERM
while :; do sleep 0.02; done`

	watch := startDL(t, dir, env, "leader", "--watch", "--json", "sched")
	waitStdout(t, watch, `"elected":false`, 10*time.Second) // watching before anyone leads
	a := startDL(t, dir, append(env, "ID=A"), "elect", "--ttl", ttl.String(), "--value", "host-a:8080", "sched", "--", "sh", "-c", script)
	leadA := strings.Fields(waitFile(t, filepath.Join(dir, "lead.A"), 10*time.Second))
	t.Cleanup(func() { // it holds the test's output pipes: do not leave it
		pgid, _ := strconv.Atoi(leadA[0])
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	})
	b := startDL(t, dir, append(env, "ID=B"), "elect", "--ttl", ttl.String(), "sched", "--", "sh", "-c", script)
	waitQueued(t, c, "sched", 1)
	if _, err := os.Stat(filepath.Join(dir, "lead.B")); err == nil {
		t.Fatal("the second candidate runs its command while the first leads")
	}
	termA, _ := strconv.ParseInt(leadA[2], 10, 64)
	if len(leadA) != 4 || leadA[3] != "sched" || termA < 1 {
		t.Fatalf("leader's environment: %q", leadA)
	}

	code, out, stderr := dl(t, env, "leader", "sched")
	if want := "host-a:8080 (term " + leadA[2] + ", for "; code != 0 || !strings.HasPrefix(out, want) {
		t.Fatalf("leader: exit %d, %q %q; want %q...", code, out, stderr, want)
	}
	code, out, _ = dl(t, env, "status", "sched")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); code != 0 || len(lines) != 2 || strings.Fields(lines[1])[1] != "leader" || !strings.HasSuffix(lines[1], "host-a:8080") {
		t.Fatalf("status: exit %d\n%s", code, out)
	}

	killed := time.Now()
	signalProc(t, a, syscall.SIGKILL)
	for _, f := range leadA[:2] {
		pid, _ := strconv.Atoi(f)
		waitDead(t, pid, ttl/3, killed)
	}
	leadB := strings.Fields(waitFile(t, filepath.Join(dir, "lead.B"), 10*time.Second))
	t.Logf("the old leader's command and its child gone, and the new leader's command started %v after kill -9", time.Since(killed).Round(time.Millisecond))
	if termB, _ := strconv.ParseInt(leadB[2], 10, 64); termB <= termA {
		t.Fatalf("new term %d not above %d", termB, termA)
	}
	host, _ := os.Hostname()
	valueB := host + ":" + strconv.Itoa(b.cmd.Process.Pid) // the default value
	code, out, _ = dl(t, env, "leader", "--json", "sched")
	var got leaderJSON
	if err := json.Unmarshal([]byte(out), &got); err != nil || code != 0 || got.Value != valueB || strconv.FormatInt(got.Term, 10) != leadB[2] || !got.Elected || got.Since == nil {
		t.Fatalf("leader --json: exit %d %q (%v), want value %s term %s", code, out, err, valueB, leadB[2])
	}

	// The watch saw nobody, A, then B (maybe nobody between them).
	waitStdout(t, watch, `"value":"`+valueB+`"`, 10*time.Second)
	signalProc(t, watch, syscall.SIGINT)
	if code := watch.wait(t, 10*time.Second); code != 0 {
		t.Fatalf("leader --watch: exit %d on SIGINT: %s", code, watch.stderr.String())
	}
	var seen []string
	for _, line := range strings.Split(strings.TrimSpace(watch.stdout.String()), "\n") {
		var l leaderJSON
		if err := json.Unmarshal([]byte(line), &l); err != nil || l.Time == "" || l.Name != "sched" {
			t.Fatalf("watch line %q: %v", line, err)
		}
		if len(seen) == 0 || seen[len(seen)-1] != l.Value {
			seen = append(seen, l.Value)
		}
	}
	if s := strings.Join(seen, ","); s != ",host-a:8080,"+valueB && s != ",host-a:8080,,"+valueB {
		t.Fatalf("watch saw leaders %q", seen)
	}

	signalProc(t, b, syscall.SIGTERM) // passed on to COMMAND, which exits 0
	if code := b.wait(t, 10*time.Second); code != 0 {
		t.Fatalf("second candidate: exit %d: %s", code, b.stderr.String())
	}
	if code, out, _ := dl(t, env, "leader", "sched"); code != exitNone || out != "nobody leads \"sched\"\n" {
		t.Fatalf("after the last leader: exit %d %q", code, out)
	}
}

// waitStdout waits until p's stdout contains want.
func waitStdout(t *testing.T, p *proc, want string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !strings.Contains(p.stdout.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("stdout does not show %q within %v: %q", want, within, p.stdout.String())
		}
		time.Sleep(5 * time.Millisecond) // polling another process's output
	}
}
