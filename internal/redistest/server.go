// Package redistest starts real redis-server processes for tests: on free
// loopback ports, without persistence, killed when the test ends.
package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Binary is the redis-server executable the harness runs.
const Binary = "redis-server"

// startTimeout bounds how long a server may take to answer PING.
const startTimeout = 10 * time.Second

// Server is one redis-server process.
type Server struct {
	Addr string
	Port int
	Dir  string

	args []string
	cmd  *exec.Cmd
	exit chan struct{}
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
// testing.TB (TestMain, make demo). The caller must Kill it.
func Launch(dir string, extra ...string) (*Server, error) {
	if _, err := exec.LookPath(Binary); err != nil {
		return nil, fmt.Errorf("%s not found in PATH: run `make test`, which installs it", Binary)
	}
	s := &Server{Dir: dir, args: extra}
	var err error
	for try := 0; try < 5; try++ { // a free port can be taken before we bind it
		if s.Port, err = FreePort(); err != nil {
			return nil, err
		}
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port))
		if err = s.start(); err == nil {
			return s, nil
		}
	}
	return nil, fmt.Errorf("start redis-server: %w", err)
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

func (s *Server) start() error {
	args := append([]string{
		"--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.Dir,
		"--protected-mode", "no", "--daemonize", "no",
		"--logfile", "redis.log",
	}, s.args...)
	s.cmd = exec.Command(Binary, args...)
	s.cmd.Dir = s.Dir
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		return err
	}
	s.exit = make(chan struct{})
	go func(cmd *exec.Cmd, exit chan struct{}) {
		_ = cmd.Wait()
		close(exit)
	}(s.cmd, s.exit)
	if err := s.waitReady(); err != nil {
		s.Kill()
		return fmt.Errorf("%w\n%s", err, s.LogTail())
	}
	return nil
}

func (s *Server) waitReady() error {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case <-s.exit:
			return fmt.Errorf("redis-server on %s exited at start", s.Addr)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on %s not answering PING: %v", s.Addr, err)
		}
		time.Sleep(10 * time.Millisecond) // polling a process we do not control
	}
}

// Kill stops the server with SIGKILL and waits for it to exit.
func (s *Server) Kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.exit
}

// Alive reports whether the process is running.
func (s *Server) Alive() bool {
	select {
	case <-s.exit:
		return false
	default:
		return true
	}
}

// Restart kills the server and starts it again on the same port, empty.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Kill()
	if err := s.start(); err != nil {
		t.Fatalf("redistest: restart %s: %v", s.Addr, err)
	}
}

// Signal sends sig (e.g. SIGSTOP, SIGCONT) to the server process.
func (s *Server) Signal(sig syscall.Signal) {
	_ = s.cmd.Process.Signal(sig)
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

// LogTail returns the end of the server's log, for failure messages.
func (s *Server) LogTail() string {
	b, _ := os.ReadFile(filepath.Join(s.Dir, "redis.log"))
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return strings.Join(lines, "\n")
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
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
