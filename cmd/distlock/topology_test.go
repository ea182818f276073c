package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redistest"
)

// TestClusterURL: through a redis-cluster:// URL naming one node, run takes
// a lock, status finds locks on every master, release removes one.
func TestClusterURL(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	lib := distlock.New(cl.Client(t))
	t.Cleanup(func() { lib.Close() })
	ctx := ctxT(t, 20*time.Second)
	masters := map[string]bool{}
	const n = 12
	for i := range n {
		key := fmt.Sprintf("c:%02d", i)
		if _, err := lib.TryLock(ctx, key, distlock.WithTTL(time.Minute)); err != nil {
			t.Fatal(err)
		}
		masters[cl.MasterOf(t, "distlock:{"+key+"}").Addr] = true
	}
	if len(masters) < 2 {
		t.Fatalf("the %d locks all landed on one master", n)
	}
	env := []string{"DISTLOCK_REDIS_URL=redis-cluster://" + cl.Nodes[0].Addr}

	code, out, stderr := dl(t, env, "status", "--json", "c:*")
	if code != 0 {
		t.Fatalf("status: exit %d %s", code, stderr)
	}
	var st struct{ Locks []lockJSON }
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Locks) != n || st.Locks[0].Key != "c:00" || st.Locks[n-1].Key != fmt.Sprintf("c:%02d", n-1) {
		t.Fatalf("status over %d masters listed %d locks: %s", len(masters), len(st.Locks), out)
	}

	dir := t.TempDir()
	p := startDL(t, dir, env, "run", "--wait", "0", "c:job", "--", "sh", "-c", `echo "$DISTLOCK_FENCE" > fence`)
	if code := p.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("run: exit %d %s", code, p.stderr.String())
	}
	fenceOf(t, filepath.Join(dir, "fence"))
	if code, _, stderr := dl(t, env, "run", "--wait", "0", "c:03", "--", "true"); code != exitNotObtained {
		t.Fatalf("run on a held key: exit %d %s", code, stderr)
	}
	if code, _, stderr := dl(t, env, "release", "--force", "--yes", "c:03"); code != 0 {
		t.Fatalf("release: exit %d %s", code, stderr)
	}
	if info, err := lib.Inspect(ctx, "c:03"); err != nil || info.Held() {
		t.Fatalf("after release: %+v %v", info, err)
	}
}

// TestSentinelURL: a redis-sentinel:// URL finds the master, and finds the
// new one after a failover.
func TestSentinelURL(t *testing.T) {
	s := redistest.StartSentinel(t)
	url := "redis-sentinel://" + strings.Join(s.SentinelAddrs(), ",") + "/" + redistest.MasterName
	env := []string{"DISTLOCK_REDIS_URL=" + url, "BIN=" + binary(t)}
	script := `echo "$DISTLOCK_FENCE" > fence; "$BIN" status --json "$DISTLOCK_KEY" > status.json`

	var first int64
	for round := range 2 {
		dir := t.TempDir()
		p := startDL(t, dir, env, "run", "--wait", "5s", "s:job", "--", "sh", "-c", script)
		if code := p.wait(t, 20*time.Second); code != 0 {
			t.Fatalf("round %d: exit %d %s", round, code, p.stderr.String())
		}
		// The counter reached the new master, which lifted it to its clock
		// as the scripts were loaded there again: the next fence is larger.
		if f := fenceOf(t, filepath.Join(dir, "fence")); round == 0 {
			first = f
		} else if f <= first {
			t.Fatalf("round %d: fence %d, want more than %d", round, f, first)
		}
		if st := readFile(t, filepath.Join(dir, "status.json")); !strings.Contains(st, `"key": "s:job"`) {
			t.Fatalf("round %d: status: %s", round, st)
		}
		if round == 0 {
			// The fence counter must reach the replica before it takes over.
			if n, err := s.Admin(s.Master).Do(ctxT(t, 5*time.Second), "WAIT", 1, 3000).Int(); err != nil || n != 1 {
				t.Fatalf("WAIT: %d replicas, %v", n, err)
			}
			s.Failover(t)
		}
	}
}

// fenceOf reads the DISTLOCK_FENCE a COMMAND wrote to path: a positive
// integer (a fresh counter starts from the server's clock in µs, not 1).
func fenceOf(t *testing.T, path string) int64 {
	t.Helper()
	f, err := strconv.ParseInt(strings.TrimSpace(readFile(t, path)), 10, 64)
	if err != nil || f <= 0 {
		t.Fatalf("fence %q: %v", readFile(t, path), err)
	}
	return f
}
