package main

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/distlock/distlock"
)

// openPTY returns the two ends of a new pseudo-terminal.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("no pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	var unlock int32
	if err := ioctl(m, syscall.TIOCSPTLCK, unsafe.Pointer(&unlock)); err != nil {
		t.Fatal(err)
	}
	var n uint32
	if err := ioctl(m, syscall.TIOCGPTN, unsafe.Pointer(&n)); err != nil {
		t.Fatal(err)
	}
	s, err := os.OpenFile("/dev/pts/"+strconv.Itoa(int(n)), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return m, s
}

// TestReleaseConfirmOnTerminal answers the prompt on a terminal: "n"
// keeps the lock, "y" removes it.
// ioctl runs request on f's descriptor through SyscallConn, not Fd: Fd
// would put f in blocking mode, and then Close could not end a Read
// blocked on it, nor so close the terminal's master end.
func ioctl(f *os.File, request uintptr, arg unsafe.Pointer) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var errno syscall.Errno
	if err := rc.Control(func(fd uintptr) {
		_, _, errno = syscall.Syscall(syscall.SYS_IOCTL, fd, request, uintptr(arg))
	}); err != nil {
		return err
	}
	if errno != 0 {
		return errno
	}
	return nil
}

func TestReleaseConfirmOnTerminal(t *testing.T) {
	env, c, _ := server(t)
	ctx := ctxT(t, 20*time.Second)
	l, err := c.TryLock(ctx, "ask", distlock.WithMetadata("host=h pid=1"))
	if err != nil {
		t.Fatal(err)
	}
	for _, answer := range []string{"n", "y"} {
		master, slave := openPTY(t)
		cmd := exec.Command(binary(t), "release", "--force", "ask")
		cmd.Env = append(cleanEnv(), env...)
		cmd.Stdin = slave
		var out, errOut lockedBuffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if _, err := master.Write([]byte(answer + "\n")); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			t.Fatalf("answer %q: still waiting; stderr %q", answer, errOut.String())
		}
		held, err := c.Inspect(ctx, "ask")
		if err != nil {
			t.Fatalf("answer %q: inspect after the run: %v", answer, err)
		}
		code := cmd.ProcessState.ExitCode()
		switch answer {
		case "n":
			if code != exitNone || !held.Held() || !strings.Contains(errOut.String(), "host=h pid=1") {
				t.Fatalf("answer n: exit %d, held %v, stderr %q", code, held.Held(), errOut.String())
			}
		case "y":
			if code != 0 || held.Held() || !strings.HasPrefix(out.String(), "released ask: fence "+strconv.FormatInt(l.Fence(), 10)) {
				t.Fatalf("answer y: exit %d, held %v, stdout %q, stderr %q", code, held.Held(), out.String(), errOut.String())
			}
		}
	}
}
