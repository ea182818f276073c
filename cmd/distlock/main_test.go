package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redistest"
)

// binDir holds the distlock binary that the end-to-end tests build once,
// on first use (fuzzing workers never build it).
var (
	binDir    string
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// raceEnabled builds the binary with -race when the tests run with it.
var raceEnabled bool

func TestMain(m *testing.M) {
	var err error
	if binDir, err = os.MkdirTemp("", "distlock-cli-test"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(binDir)
	os.Exit(code)
}

// binary returns the path of the distlock binary, building it first.
// DISTLOCK_TEST_BIN names a prebuilt binary instead, to run the tests
// against another version (e.g. to see a new test fail on an old one).
func binary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		if bin := os.Getenv("DISTLOCK_TEST_BIN"); bin != "" {
			binPath = bin
			return
		}
		path := filepath.Join(binDir, "distlock")
		args := []string{"build", "-o", path}
		if raceEnabled {
			args = append(args, "-race")
		}
		out, err := exec.Command(goTool(), append(args, ".")...).CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("building distlock: %v\n%s", err, out)
			return
		}
		binPath = path
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// lockedBuffer collects a process's output; the test reads it while the
// process may still write.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// proc is one running distlock process.
type proc struct {
	cmd            *exec.Cmd
	stdout, stderr lockedBuffer
	done           chan struct{}
	started        time.Time
}

// startDL runs the binary in dir with env added to the environment.
func startDL(t *testing.T, dir string, env []string, args ...string) *proc {
	t.Helper()
	return startProc(t, dir, env, binary(t), args...)
}

// startProc is startDL for another program, such as a shell that sets
// distlock's signal dispositions up and execs it.
func startProc(t *testing.T, dir string, env []string, path string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(path, args...), done: make(chan struct{})}
	p.cmd.Dir = dir
	p.cmd.Env = append(cleanEnv(), env...)
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	p.started = time.Now()
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

// cleanEnv is the test's environment without distlock's own variables. A
// race-enabled binary would sleep a second at exit waiting for late race
// reports; 100ms is enough for these short-lived processes.
func cleanEnv() []string {
	env := []string{"GORACE=atexit_sleep_ms=100"}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DISTLOCK_") && !strings.HasPrefix(kv, "GORACE=") {
			env = append(env, kv)
		}
	}
	return env
}

// wait returns the exit code, failing the test if the process runs longer
// than within.
func (p *proc) wait(t *testing.T, within time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(within):
		t.Fatalf("distlock %v still running after %v\nstderr: %s", p.cmd.Args[1:], within, p.stderr.String())
		return -1
	}
}

// dl runs distlock to completion (at most 20s) and returns its exit code,
// stdout and stderr.
func dl(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	p := startDL(t, t.TempDir(), env, args...)
	code := p.wait(t, 20*time.Second)
	return code, p.stdout.String(), p.stderr.String()
}

// server starts a redis-server and returns the env that points distlock at
// it and a library client on it.
func server(t *testing.T) ([]string, *distlock.Client, *redistest.Server) {
	t.Helper()
	srv := redistest.Start(t)
	c := distlock.New(srv.Client(t))
	t.Cleanup(func() { c.Close() })
	return []string{"DISTLOCK_REDIS_URL=redis://" + srv.Addr}, c, srv
}

// waitFile waits until path exists and returns its contents.
func waitFile(t *testing.T, path string, within time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
			return string(b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not written within %v", filepath.Base(path), within)
		}
		time.Sleep(5 * time.Millisecond) // polling a file another process writes
	}
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// waitInLine waits until distlock process p waits for key: it is in the
// lock's line (or, for a quorum, listens for releases).
func waitInLine(t *testing.T, c *distlock.Client, key string, p *proc) {
	t.Helper()
	ctx := ctxT(t, 20*time.Second)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) { // polling another process's progress
		info, err := c.Inspect(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if info.Queued+info.Listening > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("distlock %v not waiting for %q: %+v; stderr %s", p.cmd.Args[1:], key, info, p.stderr.String())
		}
	}
}

func signalProc(t *testing.T, p *proc, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}
