package distlock_test

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// exampleAddr is the redis-server that TestMain starts for Example functions.
var exampleAddr string

// TestMain runs helper processes (re-executions of this test binary) and
// starts the server the examples use.
func TestMain(m *testing.M) {
	if mode := os.Getenv("DISTLOCK_HELPER"); mode != "" {
		os.Exit(runHelper(mode))
	}
	os.Exit(redistest.RunMain(m, func(addr string) { exampleAddr = addr }))
}

// setup starts a redis-server and returns a distlock Client and a plain
// client on it, both closed when the test ends.
func setup(t *testing.T, opts ...distlock.ClientOption) (*distlock.Client, *redis.Client, *redistest.Server) {
	t.Helper()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	c := distlock.New(rdb, opts...)
	t.Cleanup(func() { c.Close() })
	return c, rdb, srv
}

// ctxT returns a context that ends before the test's own timeout, so a broken
// test fails instead of hanging.
func ctxT(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// helperProc is a re-executed test binary running one helper mode.
type helperProc struct {
	cmd   *exec.Cmd
	lines chan string
	stdin io.Writer // for helpers that wait for the test's go-ahead
}

// startHelper runs this test binary in helper mode with env; its stdout lines
// arrive on lines.
func startHelper(t *testing.T, mode string, env ...string) *helperProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), "DISTLOCK_HELPER="+mode), env...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &helperProc{cmd: cmd, lines: make(chan string, 1024), stdin: in}
	go h.read(out)
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT) // a frozen helper must run to die
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return h
}

func (h *helperProc) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		h.lines <- sc.Text()
	}
	close(h.lines)
}

// expect waits for the next line starting with prefix and returns the rest.
func (h *helperProc) expect(t *testing.T, prefix string, within time.Duration) string {
	t.Helper()
	timeout := time.After(within)
	for {
		select {
		case line, ok := <-h.lines:
			if !ok {
				t.Fatalf("helper exited before printing %q", prefix)
			}
			if rest, found := strings.CutPrefix(line, prefix); found {
				return rest
			}
		case <-timeout:
			t.Fatalf("helper did not print %q within %v", prefix, within)
		}
	}
}

// wait waits for the helper to exit and fails the test if it did not exit 0.
func (h *helperProc) wait(t *testing.T, within time.Duration) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- h.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("helper failed: %v", err)
		}
	case <-time.After(within):
		t.Fatalf("helper still running after %v", within)
	}
}
