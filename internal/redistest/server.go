// Package redistest starts real redis-server processes for tests: on free
// loopback ports, without persistence, killed when the test ends. The
// processes themselves are managed by internal/redisproc, which the shipped
// binary may use; this package adds what needs a testing.TB.
package redistest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock/internal/redisproc"
	"github.com/redis/go-redis/v9"
)

// Binary is the redis-server executable the harness runs.
const Binary = redisproc.Binary

// startTimeout bounds how long a server may take to answer PING.
const startTimeout = 10 * time.Second

// Server is one redis-server process: Addr, Port, Dir, Kill, Alive, Signal
// and LogTail come from redisproc.Server.
type Server struct {
	*redisproc.Server
}

// Start runs a redis-server on a free loopback port with persistence off and
// extra appended to its arguments. It is killed in t.Cleanup.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	RequireBinary(t)
	s, err := Launch(t.TempDir(), extra...)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(s.Kill)
	return s
}

// Launch starts a server with its files in dir, for callers without a
// testing.TB (TestMain). The caller must Kill it.
func Launch(dir string, extra ...string) (*Server, error) {
	p, err := redisproc.Launch(dir, extra...)
	if err != nil {
		return nil, err
	}
	return &Server{p}, nil
}

// RunMain is the body of a TestMain that starts one server for the whole
// package (its Example functions need one): it calls started with the
// server's address, runs the tests, stops the server and returns the exit
// code for os.Exit.
func RunMain(m *testing.M, started func(addr string)) int {
	dir, err := os.MkdirTemp("", "distlock-main")
	if err != nil {
		fmt.Fprintln(os.Stderr, "redistest:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	srv, err := Launch(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "redistest:", err)
		return 1
	}
	defer srv.Kill()
	started(srv.Addr)
	return m.Run()
}

// StartN starts n independent servers.
func StartN(t testing.TB, n int, extra ...string) []*Server {
	t.Helper()
	servers := make([]*Server, n)
	for i := range servers {
		servers[i] = Start(t, extra...)
	}
	return servers
}

// RequireBinary fails the test with how to get redis-server when it is
// missing.
func RequireBinary(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath(Binary); err != nil {
		t.Fatalf("redistest: %s not found in PATH: run `make test`, which installs it (Debian: apt-get install -y redis-server)", Binary)
	}
}

// Restart kills the server and starts it again on the same port, empty.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	if err := s.Server.Restart(); err != nil {
		t.Fatalf("redistest: restart %s: %v", s.Addr, err)
	}
}

// Options returns client options for the server, with context deadlines
// honoured so that tests fail within their own timeouts.
func (s *Server) Options() *redis.Options {
	return &redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true, DialTimeout: time.Second}
}

// Client returns a client for the server, closed in t.Cleanup.
func (s *Server) Client(t testing.TB) *redis.Client {
	c := redis.NewClient(s.Options())
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// StartReplica starts a server replicating s and waits until it is in sync.
func (s *Server) StartReplica(t testing.TB, extra ...string) *Server {
	t.Helper()
	// The default 5s delay before a diskless full sync would dominate tests.
	if err := s.Client(t).ConfigSet(context.Background(), "repl-diskless-sync-delay", "0").Err(); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	r := Start(t, append([]string{"--replicaof", "127.0.0.1", strconv.Itoa(s.Port)}, extra...)...)
	c, m := r.Client(t), s.Client(t)
	deadline := time.Now().Add(startTimeout)
	for {
		info, _ := c.Info(context.Background(), "replication").Result()
		minfo, _ := m.Info(context.Background(), "replication").Result()
		// Both sides must agree: WAIT counts only replicas the master sees online.
		if strings.Contains(info, "master_link_status:up") && strings.Contains(minfo, "port="+strconv.Itoa(r.Port)+",state=online") &&
			replicated(m) {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: replica %s not in sync with %s:\n%s", r.Addr, s.Addr, info)
		}
		time.Sleep(10 * time.Millisecond) // polling replication state
	}
}

// replicated reports whether a fresh write reaches a replica: right after a
// sync, replicas can take a few hundred ms to acknowledge anything.
func replicated(m *redis.Client) bool {
	ctx := context.Background()
	if err := m.Incr(ctx, "redistest:sync").Err(); err != nil {
		return false
	}
	ok := m.Wait(ctx, 1, 100*time.Millisecond).Val() >= 1
	m.Del(ctx, "redistest:sync")
	return ok
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort() (int, error) { return redisproc.FreePort() }
