package main

import (
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/distlock/distlock"
)

// TestStatusWatchTerminal (issue 14): on a terminal, --watch redraws one
// table in place: each frame starts at the top left corner, erases what the
// previous frame left, and never clears the whole screen first.
func TestStatusWatchTerminal(t *testing.T) {
	env, c, _ := server(t)
	master, slave := openPTY(t)
	cmd := exec.Command(binary(t), "status", "--watch", "--interval", "100ms")
	cmd.Env = append(cleanEnv(), append(env, "TERM=xterm")...)
	var stderr lockedBuffer
	cmd.Stdout, cmd.Stderr = slave, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	sh := &shell{master: master}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			sh.out.Write(buf[:n])
			if err != nil {
				return
			}
		}
	}()

	sh.expect(t, "no locks held\033[K", 10*time.Second)
	sh.expect(t, ansiClearDown, 10*time.Second)
	l, err := c.TryLock(ctxT(t, 5*time.Second), "tty-watch", distlock.WithMetadata("host=h3 pid=9"))
	if err != nil {
		t.Fatal(err)
	}
	sh.expect(t, ansiHome, 10*time.Second)
	sh.expect(t, "tty-watch ", 10*time.Second)
	sh.expect(t, "host=h3 pid=9\033[K", 10*time.Second)
	sh.expect(t, ansiClearDown, 10*time.Second)
	if err := l.Release(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	sh.expect(t, "no locks held\033[K", 10*time.Second)

	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("still running 10s after SIGINT")
	}
	if code := cmd.ProcessState.ExitCode(); code != 0 || stderr.String() != "" {
		t.Fatalf("exit %d, stderr %q; want 0", code, stderr.String())
	}
	out := sh.out.String()
	if n := strings.Count(out, ansiHome); n < 3 {
		t.Fatalf("%d frames, want a redraw per refresh:\n%q", n, out)
	}
	if strings.Contains(out, "\033[2J") {
		t.Fatalf("the whole screen is cleared (flicker):\n%q", out)
	}
	// Every frame erases down from its end, and nothing else is written.
	frames := strings.Split(out, ansiHome)
	for _, f := range frames[1 : len(frames)-1] {
		if !strings.HasSuffix(f, ansiClearDown) {
			t.Fatalf("frame does not end by erasing the rest of the screen: %q", f)
		}
	}
}
