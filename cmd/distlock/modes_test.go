package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock"
)

// span is when one run's command ran, by the timestamps it logged.
type span struct {
	id         string
	start, end int64 // Unix nanoseconds; 0 if not logged
	extra      string
}

// readSpans reads lines "ID start NANOS [EXTRA]" and "ID end NANOS" that
// commands appended to path.
func readSpans(t *testing.T, path string) map[string]*span {
	t.Helper()
	spans := map[string]*span{}
	for _, line := range strings.Split(strings.TrimSpace(readFile(t, path)), "\n") {
		f := strings.SplitN(line, " ", 4)
		if len(f) < 3 {
			t.Fatalf("bad log line %q", line)
		}
		ns, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil {
			t.Fatalf("bad log line %q", line)
		}
		s := spans[f[0]]
		if s == nil {
			s = &span{id: f[0]}
			spans[f[0]] = s
		}
		switch f[1] {
		case "start":
			s.start = ns
			if len(f) == 4 {
				s.extra = f[3]
			}
		case "end":
			s.end = ns
		}
	}
	for _, s := range spans {
		if s.start == 0 || s.end == 0 {
			t.Fatalf("%s logged no start or no end: %+v", s.id, s)
		}
	}
	return spans
}

func overlap(a, b *span) bool { return a.start < b.end && b.start < a.end }

// maxConcurrent is the largest number of spans running at one moment.
func maxConcurrent(spans map[string]*span) int {
	type event struct {
		at    int64
		delta int
	}
	var evs []event
	for _, s := range spans {
		evs = append(evs, event{s.start, 1}, event{s.end, -1})
	}
	// At equal times an end comes first: it was logged before its release.
	sort.Slice(evs, func(i, j int) bool {
		if evs[i].at != evs[j].at {
			return evs[i].at < evs[j].at
		}
		return evs[i].delta < evs[j].delta
	})
	n, most := 0, 0
	for _, e := range evs {
		n += e.delta
		most = max(most, n)
	}
	return most
}

// waitQueued waits until the holds of name show at least n waiters.
func waitQueued(t *testing.T, c *distlock.Client, name string, n int64) {
	t.Helper()
	ctx := ctxT(t, 15*time.Second)
	deadline := time.Now().Add(10 * time.Second)
	for {
		infos, err := c.List(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range infos {
			if in.Key == name && in.Queued >= n {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%q: fewer than %d waiters in line: %+v", name, n, infos)
		}
		time.Sleep(5 * time.Millisecond) // polling other processes' progress
	}
}

// TestRunShared: --shared runs of a KEY run at once; a --write run of it
// runs alone, and a --shared run that comes while it waits queues behind
// it. A plain run of the same KEY is another lock, unaffected.
func TestRunShared(t *testing.T) {
	env, c, _ := server(t)
	dir := t.TempDir()
	// Each of the first two readers waits (at most 10s) until both have
	// started, which they can only if they overlap, and until the test says
	// go, once the writer and a third reader wait in line.
	reader := `echo "$ID start $(date +%s%N)" >> log; echo x > "started.$ID"; i=0
while { [ ! -f started.R1 ] || [ ! -f started.R2 ] || [ ! -f go ]; } && [ $i -lt 400 ]; do sleep 0.025; i=$((i+1)); done
echo "$ID end $(date +%s%N)" >> log`
	quick := `echo "$ID start $(date +%s%N) $DISTLOCK_FENCE" >> log; echo "$ID end $(date +%s%N)" >> log`
	r1 := startDL(t, dir, append(env, "ID=R1"), "run", "--shared", "catalog", "--", "sh", "-c", reader)
	r2 := startDL(t, dir, append(env, "ID=R2"), "run", "catalog", "--shared", "--", "sh", "-c", reader)
	waitFile(t, filepath.Join(dir, "started.R1"), 10*time.Second)
	waitFile(t, filepath.Join(dir, "started.R2"), 10*time.Second)

	// A plain lock of the same name is not the read-write lock.
	if code, _, stderr := dl(t, env, "run", "-n", "catalog", "--", "true"); code != 0 {
		t.Fatalf("plain run while readers hold the read-write lock: exit %d %s", code, stderr)
	}
	if code, _, stderr := dl(t, env, "run", "--write", "-n", "catalog", "--", "true"); code != exitNotObtained || !strings.Contains(stderr, `"catalog" is held (read, fence`) {
		t.Fatalf("--write -n while read-held: exit %d %q", code, stderr)
	}
	w := startDL(t, dir, append(env, "ID=W"), "run", "--write", "catalog", "--", "sh", "-c", quick)
	waitQueued(t, c, "catalog", 1)
	r3 := startDL(t, dir, append(env, "ID=R3"), "run", "--shared", "catalog", "--", "sh", "-c", quick)
	waitQueued(t, c, "catalog", 2)
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*proc{r1, r2, w, r3} {
		if code := p.wait(t, 20*time.Second); code != 0 {
			t.Fatalf("%v: exit %d: %s", p.cmd.Args[1:], code, p.stderr.String())
		}
	}
	spans := readSpans(t, filepath.Join(dir, "log"))
	R1, R2, W, R3 := spans["R1"], spans["R2"], spans["W"], spans["R3"]
	if !overlap(R1, R2) {
		t.Fatalf("the readers did not overlap: %+v %+v", R1, R2)
	}
	for _, r := range []*span{R1, R2, R3} {
		if overlap(W, r) {
			t.Fatalf("the writer overlapped reader %s: %+v %+v", r.id, W, r)
		}
	}
	if R3.start < W.end {
		t.Fatalf("the reader that came while the writer waited ran before it: %+v %+v", R3, W)
	}
	t.Logf("readers overlapped %v; writer started %v after the last reader's end",
		time.Duration(min(R1.end, R2.end)-max(R1.start, R2.start)).Round(time.Millisecond),
		time.Duration(W.start-max(R1.end, R2.end)).Round(time.Millisecond))
}

// TestRunLimit: four --limit 2 runs never run more than two at once, and
// two do run at once.
func TestRunLimit(t *testing.T) {
	env, c, _ := server(t)
	dir := t.TempDir()
	// A run waits (at most 10s) until the run it is paired with has started
	// too: the first two together, then the next two. Were the limit not
	// kept, they would all start at once, and be seen to.
	script := `echo "$ID start $(date +%s%N)" >> log
n=$(grep -c ' start ' log); want=$(( (n + 1) / 2 * 2 )); i=0
while [ "$(grep -c ' start ' log)" -lt $want ] && [ $i -lt 400 ]; do sleep 0.025; i=$((i+1)); done
echo "$ID end $(date +%s%N)" >> log`
	var procs []*proc
	for i := 1; i <= 4; i++ {
		procs = append(procs, startDL(t, dir, append(env, fmt.Sprintf("ID=P%d", i)), "run", "--limit", "2", "exports", "--", "sh", "-c", script))
	}
	start := time.Now()
	for _, p := range procs {
		if code := p.wait(t, 30*time.Second); code != 0 {
			t.Fatalf("exit %d: %s", code, p.stderr.String())
		}
	}
	spans := readSpans(t, filepath.Join(dir, "log"))
	if len(spans) != 4 {
		t.Fatalf("%d runs logged, want 4", len(spans))
	}
	if n := maxConcurrent(spans); n != 2 {
		t.Fatalf("%d runs at once at most, want exactly 2: %+v", n, spans)
	}
	t.Logf("4 runs, at most 2 at once, in %v", time.Since(start).Round(time.Millisecond))

	// The limit is the semaphore's while it is in use.
	ctx := ctxT(t, 10*time.Second)
	sem, err := c.NewSemaphore("slots", 2)
	if err != nil {
		t.Fatal(err)
	}
	p, err := sem.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release(ctx)
	if code, _, stderr := dl(t, env, "run", "--limit", "3", "slots", "--", "true"); code != exitUsage || !strings.Contains(stderr, `"slots" has 2 permits, not 3`) {
		t.Fatalf("--limit 3 on a semaphore of 2: exit %d %q", code, stderr)
	}
	if _, err := sem.TryAcquire(ctx); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := dl(t, env, "run", "-n", "--limit", "2", "slots", "--", "true"); code != exitNotObtained || !strings.Contains(stderr, `"slots" has no free permit (permit of 2`) {
		t.Fatalf("--limit 2 -n on a full semaphore: exit %d %q", code, stderr)
	}
}

// TestRunLimitForgotten: docs/cli.md "Every run of KEY must give the same N
// while any runs: a run with another N exits with status 64 and says so
// [...]. Once the last permit is returned the N is forgotten." While a
// --limit 2 run holds a permit, a --limit 3 run of the same KEY is refused
// without running its COMMAND; once that run has exited, nothing of the
// semaphore is held and a --limit 3 run runs.
func TestRunLimitForgotten(t *testing.T) {
	env, c, _ := server(t)
	dir := t.TempDir()
	first := startDL(t, dir, env, "run", "--limit", "2", "forget", "--", "sh", "-c", `echo x > started; while [ ! -e go ]; do sleep 0.02; done`)
	waitFile(t, filepath.Join(dir, "started"), 10*time.Second)
	ctx := ctxT(t, 30*time.Second)
	if infos, err := c.List(ctx, "forget"); err != nil || len(infos) != 1 || infos[0].Kind != "permit" || infos[0].Limit != 2 {
		t.Fatalf("while the --limit 2 run runs, Redis shows %+v (%v); want its permit of 2", infos, err)
	}

	code, stdout, stderr := dl(t, env, "run", "--limit", "3", "forget", "--", "echo", "ran")
	if code != exitUsage || stdout != "" || !strings.HasPrefix(stderr, `distlock run: semaphore in use with another limit: "forget" has 2 permits, not 3; `) ||
		strings.Count(stderr, "\n") != 1 {
		t.Fatalf("--limit 3 while a --limit 2 run holds a permit: exit %d, stdout %q, stderr %q; want %d, nothing run, and why",
			code, stdout, stderr, exitUsage)
	}

	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := first.wait(t, 10*time.Second); code != 0 {
		t.Fatalf("the --limit 2 run: exit %d, want 0; stderr %s", code, first.stderr.String())
	}
	infos, err := c.List(ctx, "forget")
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 0 {
		t.Fatalf("after the last run of \"forget\" exited, Redis still shows: %+v", infos)
	}

	code, stdout, stderr = dl(t, env, "run", "--limit", "3", "forget", "--", "echo", "ran")
	if code != 0 || stdout != "ran\n" {
		t.Fatalf("--limit 3 once the semaphore is idle: exit %d, stdout %q, stderr %q; want 0 and COMMAND run (the 2 forgotten)", code, stdout, stderr)
	}
}

// TestRunSeveralKeys: runs taking "a b" and "b a", 20 times each at once,
// never deadlock and never overlap; the command sees the keys as given and
// a fence per key; losing any one key stops it.
func TestRunSeveralKeys(t *testing.T) {
	env, _, _ := server(t)
	dir := t.TempDir()
	script := `echo "$ID start $(date +%s%N) $DISTLOCK_KEY|$DISTLOCK_FENCE" >> log; echo "$ID end $(date +%s%N)" >> log`
	const rounds = 20
	bin := binary(t)
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 2*rounds)
	for _, keys := range [][]string{{"a", "b"}, {"b", "a"}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				id := fmt.Sprintf("%s%s%d", keys[0], keys[1], i)
				args := append(append([]string{"run"}, keys...), "--", "sh", "-c", script)
				if code, stderr, err := runBounded(bin, dir, append(env, "ID="+id), 20*time.Second, args...); err != nil || code != 0 {
					errs <- fmt.Errorf("%s: exit %d, %v: %s", id, code, err, stderr)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	spans := readSpans(t, filepath.Join(dir, "log"))
	if len(spans) != 2*rounds {
		t.Fatalf("%d runs logged, want %d", len(spans), 2*rounds)
	}
	all := make([]*span, 0, len(spans))
	for _, s := range spans {
		all = append(all, s)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].start < all[j].start })
	lastFence := map[string]int64{}
	for i, s := range all {
		if i > 0 && s.start < all[i-1].end {
			t.Fatalf("%s overlapped %s", s.id, all[i-1].id)
		}
		keys, fences, _ := strings.Cut(s.extra, "|")
		k, f := strings.Fields(keys), strings.Fields(fences)
		if len(k) != 2 || len(f) != 2 || k[0] != s.id[:1] || k[1] != s.id[1:2] {
			t.Fatalf("%s: DISTLOCK_KEY|DISTLOCK_FENCE = %q, want its keys in its order and a fence each", s.id, s.extra)
		}
		for j, key := range k { // fences rise per key, in the order the runs held it
			n, _ := strconv.ParseInt(f[j], 10, 64)
			if n <= lastFence[key] {
				t.Fatalf("%s: fence %d of %q not above %d", s.id, n, key, lastFence[key])
			}
			lastFence[key] = n
		}
	}
	t.Logf("%d runs of {a,b} and {b,a}, none overlapping, in %v", 2*rounds, elapsed.Round(time.Millisecond))

	t.Run("loss of one key", func(t *testing.T) {
		dir := t.TempDir()
		held := `trap 'echo term > marker; exit 0' TERM
echo x > started
while :; do sleep 0.02; done`
		p := startDL(t, dir, env, "run", "--ttl", "1500ms", "x", "y", "--", "sh", "-c", held)
		waitFile(t, filepath.Join(dir, "started"), 10*time.Second)
		if code, _, stderr := dl(t, env, "release", "--force", "--yes", "y"); code != 0 {
			t.Fatalf("release: %d %s", code, stderr)
		}
		waitFile(t, filepath.Join(dir, "marker"), 5*time.Second)
		if code := p.wait(t, 10*time.Second); code != exitLost || !strings.Contains(p.stderr.String(), `locks "x", "y" lost ("y": `) {
			t.Fatalf("exit %d, want %d; stderr %q", code, exitLost, p.stderr.String())
		}
		if code, out, _ := dl(t, env, "status", "x"); code != exitNone {
			t.Fatalf("x still held after the run: %s", out)
		}
	})
}

// runBounded runs distlock to completion, for goroutines other than the
// test's: it fails by returning an error, not through t.
func runBounded(bin, dir string, env []string, within time.Duration, args ...string) (int, string, error) {
	var stderr lockedBuffer
	cmd := exec.Command(bin, args...)
	cmd.Dir, cmd.Env, cmd.Stderr = dir, append(cleanEnv(), env...), &stderr
	if err := cmd.Start(); err != nil {
		return -1, "", err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
		return cmd.ProcessState.ExitCode(), stderr.String(), nil
	case <-time.After(within):
		_ = cmd.Process.Kill()
		<-done
		return -1, stderr.String(), fmt.Errorf("still running after %v (deadlock?)", within)
	}
}

// TestRunModeUsage: what does not go together is refused (64) before
// anything is taken; several KEYs need the "--".
func TestRunModeUsage(t *testing.T) {
	env, _, _ := server(t)
	cases := []struct {
		name   string
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{"shared and write", []string{"run", "--shared", "--write", "k", "--", "true"}, exitUsage, "", "exclude each other"},
		{"shared and limit", []string{"run", "--shared", "--limit", "2", "k", "--", "true"}, exitUsage, "", "does not go with"},
		{"limit 0", []string{"run", "--limit", "0", "k", "--", "true"}, exitUsage, "", "--limit 0"},
		{"shared, several keys", []string{"run", "--shared", "a", "b", "--", "true"}, exitUsage, "", "--shared takes one KEY"},
		{"limit, several keys", []string{"run", "a", "--limit", "2", "b", "--", "true"}, exitUsage, "", "--limit takes one KEY"},
		{"owner with shared", []string{"run", "--owner", "me", "--shared", "k", "--", "true"}, exitUsage, "", "--owner"},
		{"key twice", []string{"run", "a", "b", "a", "--", "true"}, exitUsage, "", `"a" given twice`},
		{"key with space", []string{"run", "a b", "c", "--", "true"}, exitUsage, "", "white space"},
		{"several keys", []string{"run", "a", "b", "--wait", "0", "--", "sh", "-c", `echo "$DISTLOCK_KEY"`}, 0, "a b\n", ""},
		// Without a "--" that ends distlock's flags, the argument after KEY
		// starts COMMAND, as it always has.
		{"command with --", []string{"run", "k", "sh", "-c", `echo "$1"`, "--", "x"}, 0, "x\n", ""},
		{"no --", []string{"run", "k", "sh", "-c", "exit 3"}, 3, "", ""},
		{"elect -n", []string{"elect", "-n", "e", "--", "true"}, exitUsage, "", "cannot give up at once"},
		{"elect two names", []string{"elect", "e", "f", "--", "true"}, exitUsage, "", "one NAME"},
		{"elect --shared", []string{"elect", "--shared", "e", "--", "true"}, exitUsage, "", "unknown flag --shared"},
		{"elect no command", []string{"elect", "e"}, exitUsage, "", "missing COMMAND after NAME"},
		{"leader no name", []string{"leader"}, exitUsage, "", "one NAME"},
		{"help elect", []string{"help", "elect"}, 0, "usage: distlock elect", ""},
		{"leader --help", []string{"leader", "--help"}, 0, "usage: distlock leader", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := dl(t, env, tc.args...)
			if code != tc.code || !strings.Contains(stdout, tc.stdout) || !strings.Contains(stderr, tc.stderr) {
				t.Fatalf("%q: exit %d, stdout %q, stderr %q; want %d, %q, %q", tc.args, code, stdout, stderr, tc.code, tc.stdout, tc.stderr)
			}
		})
	}
}

// `distlock run` takes every KEY however many there are: the keeper's
// "locked FENCES TOKENS" line grows with them (about 40 bytes each), and
// past 64 KiB, some 1,650 KEYs, the runner's line reader (bufio.Scanner's
// default limit) took it for the keeper's EOF: distlock waited 15 s,
// killed its keeper, said "the lock keeper died", exited 69 without
// running COMMAND and left every key held until its TTL.
func TestRunThousandsOfKeys(t *testing.T) {
	env, _, srv := server(t)
	const n = 2000
	args := []string{"run", "--ttl", "5s"}
	for i := range n {
		args = append(args, fmt.Sprintf("key%d", i))
	}
	args = append(args, "--", "sh", "-c", `echo "ran $(echo $DISTLOCK_FENCE | wc -w)"`)
	p := startDL(t, t.TempDir(), env, args...)
	code := p.wait(t, 60*time.Second)
	if code != 0 || strings.TrimSpace(p.stdout.String()) != fmt.Sprintf("ran %d", n) {
		t.Fatalf("%d keys: exit %d, stdout %q, stderr %q; want 0 and COMMAND run with %d fences",
			n, code, p.stdout.String(), p.stderr.String(), n)
	}
	keys, err := srv.Client(t).Keys(ctxT(t, 5*time.Second), "*{key*").Result()
	if err != nil || len(keys) != 0 {
		t.Fatalf("after the run, %d lock keys left in Redis (%v), e.g. %q", len(keys), err, keys[:min(len(keys), 3)])
	}
}
