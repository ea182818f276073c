package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// childMain runs in the re-executed bench binary.
func childMain(mode, lib, cfg, addr, key string, ttl time.Duration) error {
	c, ok := findContender(lib, cfg)
	if !ok {
		return fmt.Errorf("unknown contender %s %s", lib, cfg)
	}
	l, err := c.open([]string{addr}, ttl)
	if err != nil {
		return err
	}
	defer l.close()
	in := bufio.NewReader(os.Stdin)
	switch mode {
	case "hold":
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := l.lock(ctx, key); err != nil {
			return err
		}
		fmt.Println("H", wall())
		_, _ = in.ReadString('\n') // held until the parent kills this process
		return nil
	case "pairs":
		return countedPairs(l, key, in)
	case "pingpong":
		cpu0 := selfCPU()
		evs, err := pingPongSide(l, key, false,
			func() error { _, err := fmt.Println("G"); return err },
			func() (bool, error) {
				line, err := in.ReadString('\n')
				return strings.TrimSpace(line) == "G", err
			},
			func() bool { return false })
		if err != nil {
			// The holds so far, for the parent to check: a lock that let
			// both sides in typically fails a release next.
			b, _ := json.Marshal(evs)
			fmt.Printf("R %s\n", b)
			return err
		}
		// This side's CPU over its turns, startup excluded: the parent adds
		// it to its own for the CPU per handoff.
		fmt.Printf("C %d\n", selfCPU()-cpu0)
		b, _ := json.Marshal(evs)
		fmt.Printf("R %s\n", b)
		return nil
	}
	return fmt.Errorf("unknown child mode %q", mode)
}

// countedPairs runs the uncontended scenario's pairs for an outside counter
// (callgrind.sh): warm-up pairs, then "R" and a line read from in, then
// pairsPerCount pairs, then "D" and a line read from in, so that the counter
// can be reset and dumped around exactly those pairs.
func countedPairs(l locker, key string, in *bufio.Reader) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var ex exclusion
	step := func(n int, mark string) error {
		if _, err := pairs(ctx, l, key, n, &ex, nil); err != nil {
			return err
		}
		fmt.Println(mark)
		_, err := in.ReadString('\n')
		return err
	}
	if err := step(warmPairs*10, "R"); err != nil {
		return err
	}
	return step(pairsPerCount, "D")
}

// pairsPerCount is how many pairs callgrind.sh counts: callgrind runs a
// process about 50 times slower, and more pairs did not make the count per
// pair steadier (see callgrind.sh).
const pairsPerCount = 5000

// child is a re-executed bench process.
type child struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	lines  chan string
	exited chan struct{} // closed once the process is reaped
	errb   *strings.Builder
}

func startChild(mode string, c contender, addr, key string, ttl time.Duration) (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, "-child", mode, "-lib", c.lib, "-cfg", c.cfg, "-addr", addr, "-key", key, "-ttl", ttl.String())
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	ch := &child{cmd: cmd, lines: make(chan string, 1024), exited: make(chan struct{}), errb: &strings.Builder{}}
	if ch.in, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = &lockedWriter{w: ch.errb}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	var reading sync.WaitGroup
	reading.Add(1)
	go func() {
		defer reading.Done()
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			ch.lines <- sc.Text()
		}
		close(ch.lines)
	}()
	go func() {
		reading.Wait()
		_ = cmd.Wait()
		close(ch.exited)
	}()
	return ch, nil
}

// next returns the child's next output line within limit.
func (ch *child) next(limit time.Duration) (string, error) {
	select {
	case line, ok := <-ch.lines:
		if !ok {
			return "", fmt.Errorf("child exited: %s", ch.stderr())
		}
		return line, nil
	case <-time.After(limit):
		return "", fmt.Errorf("child silent for %v: %s", limit, ch.stderr())
	}
}

func (ch *child) stderr() string {
	if lw, ok := ch.cmd.Stderr.(*lockedWriter); ok {
		return lw.String()
	}
	return ""
}

// kill sends SIGKILL and waits for the process to be gone.
func (ch *child) kill() {
	_ = ch.cmd.Process.Kill()
	select {
	case <-ch.exited:
	case <-time.After(10 * time.Second):
	}
}

type lockedWriter struct {
	mu sync.Mutex
	w  *strings.Builder
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.w.Len() < 1<<16 {
		l.w.Write(p)
	}
	return len(p), nil
}

func (l *lockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.String()
}
