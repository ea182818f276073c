package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestDemoInterruptedLeavesNothingBehind: `make demo` stopped with Ctrl-C
// (SIGINT to its process group), or distlock alone sent SIGTERM, stops its
// workers and its redis-server and removes its directory, as its usage
// says ("stops everything it started"). Before, Go's default exit on the
// signal skipped the cleanup: the directory stayed in $TMPDIR, and after a
// SIGTERM the workers ran on, orphaned.
func TestDemoInterruptedLeavesNothingBehind(t *testing.T) {
	for _, tc := range []struct {
		name  string
		sig   syscall.Signal
		group bool
	}{
		{"Ctrl-C", syscall.SIGINT, true},
		{"SIGTERM to distlock", syscall.SIGTERM, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tmp := t.TempDir()
			p := &proc{cmd: exec.Command(binary(t), "demo", "--stock", "100000000"), done: make(chan struct{})}
			p.cmd.Env = append(cleanEnv(), "TMPDIR="+tmp)
			p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
			p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // its own group, as a terminal's job
			if err := p.cmd.Start(); err != nil {
				t.Fatal(err)
			}
			pgid := p.cmd.Process.Pid
			go func() {
				_ = p.cmd.Wait()
				close(p.done)
			}()
			t.Cleanup(func() {
				_ = syscall.Kill(-pgid, syscall.SIGKILL)
				<-p.done
			})

			// Wait until the workers are selling.
			ctx := ctxT(t, 30*time.Second)
			addr := waitOutput(t, ctx, p, regexp.MustCompile(`redis-server on (\S+);`))
			rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
			defer rdb.Close()
			for n, _ := rdb.Get(ctx, "demo:sold").Int(); n == 0; n, _ = rdb.Get(ctx, "demo:sold").Int() {
				if ctx.Err() != nil {
					t.Fatalf("the workers sold nothing\nstderr: %s", p.stderr.String())
				}
				time.Sleep(10 * time.Millisecond) // polling the demo's counter
			}

			target := pgid
			if tc.group {
				target = -pgid
			}
			if err := syscall.Kill(target, tc.sig); err != nil {
				t.Fatal(err)
			}
			code := p.wait(t, 20*time.Second)

			// Its workers (in its group) are gone, and so is its directory.
			for syscall.Kill(-pgid, 0) == nil {
				if ctx.Err() != nil {
					t.Fatalf("%v: the demo's workers still run after it exited", tc.sig)
				}
				time.Sleep(10 * time.Millisecond) // polling for the workers' exit
			}
			entries, err := os.ReadDir(tmp)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range entries {
				t.Errorf("%v: distlock demo (exit %d) left %s behind", tc.sig, code, e.Name())
			}
			if code != 128+int(tc.sig) {
				t.Errorf("%v: exit %d, want %d\nstderr: %s", tc.sig, code, 128+int(tc.sig), p.stderr.String())
			}
			if err := rdb.Ping(ctx).Err(); err == nil || errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%v: the demo's redis-server still answers: %v", tc.sig, err)
			}
		})
	}
}

// waitOutput waits until p's stdout matches re and returns the first
// submatch.
func waitOutput(t *testing.T, ctx context.Context, p *proc, re *regexp.Regexp) string {
	t.Helper()
	for {
		if m := re.FindStringSubmatch(p.stdout.String()); m != nil {
			return m[1]
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no %q in the output\nstdout: %s\nstderr: %s", re, p.stdout.String(), p.stderr.String())
		case <-p.done:
			t.Fatalf("exited before printing %q\nstdout: %s\nstderr: %s", re, p.stdout.String(), p.stderr.String())
		case <-time.After(10 * time.Millisecond): // polling another process's output
		}
	}
}
