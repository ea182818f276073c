// Package redisproc starts and stops throwaway redis-server processes on free
// loopback ports, without persistence. It is the part of the test harness
// that the shipped distlock binary needs (for `distlock demo`), so it must not
// import testing; internal/redistest builds the test helpers on it.
package redisproc

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
	"time"

	"github.com/redis/go-redis/v9"
)

// Binary is the redis-server executable that is run.
const Binary = "redis-server"

// startTimeout bounds how long a server may take to answer PING.
const startTimeout = 10 * time.Second

// Server is one redis-server process.
type Server struct {
	Addr string
	Port int
	Dir  string

	args func(port int) ([]string, error)
	cmd  *exec.Cmd
	exit chan struct{}
}

// Launch starts a redis-server on a free loopback port with its files in
// dir, persistence off and extra appended to its arguments. The caller must
// Kill it.
func Launch(dir string, extra ...string) (*Server, error) {
	return LaunchWith(dir, func(port int) ([]string, error) {
		return append([]string{
			"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", dir,
			"--protected-mode", "no", "--daemonize", "no",
			"--logfile", "redis.log",
		}, extra...), nil
	})
}

// LaunchWith starts redis-server with the arguments that args returns for a
// free loopback port (a Sentinel, say, needs a config file naming it), and
// waits until it answers PING. The caller must Kill it.
func LaunchWith(dir string, args func(port int) ([]string, error)) (*Server, error) {
	if _, err := exec.LookPath(Binary); err != nil {
		return nil, fmt.Errorf("%s not found in PATH (Debian/Ubuntu: apt-get install -y redis-server; `make test` and `make demo` install it)", Binary)
	}
	s := &Server{Dir: dir, args: args}
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
	return nil, fmt.Errorf("start %s: %w", Binary, err)
}

func (s *Server) start() error {
	args, err := s.args(s.Port)
	if err != nil {
		return err
	}
	s.cmd = exec.Command(Binary, args...)
	s.cmd.Dir = s.Dir
	// Its own process group: a Ctrl-C meant for the caller's terminal job is
	// not what stops it; Kill is.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	dieWithParent(s.cmd.SysProcAttr)
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
			return fmt.Errorf("%s on %s exited at start", Binary, s.Addr)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s on %s not answering PING: %v", Binary, s.Addr, err)
		}
		time.Sleep(10 * time.Millisecond) // polling a process we do not control
	}
}

// Restart kills the server and starts it again on the same port, empty.
func (s *Server) Restart() error {
	s.Kill()
	return s.start()
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

// Signal sends sig (e.g. SIGSTOP, SIGCONT) to the server process.
func (s *Server) Signal(sig syscall.Signal) {
	_ = s.cmd.Process.Signal(sig)
}

// LogTail returns the end of the server's log, for error messages.
func (s *Server) LogTail() string {
	b, _ := os.ReadFile(filepath.Join(s.Dir, "redis.log"))
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return strings.Join(lines, "\n")
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
