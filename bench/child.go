package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Cross-process timestamps are wall-clock nanoseconds: both processes read
// the same system clock, and ping-pong only compares them across processes.
func wall() int64 { return time.Now().UnixNano() }

// ppEvent is one hold in the ping-pong: Lock called, Lock returned,
// Release called (wall ns).
type ppEvent struct{ Asked, Got, Rel int64 }

const pingHold = 2 * time.Millisecond

// pingPongSide runs one side of the ping-pong. After each acquire it tells the
// peer (send), and after each release it waits for the peer's acquire (recv)
// before asking again, so every Lock call starts while the other side holds
// the lock and the measured gap is a real wake-up of a waiter. first says
// whether this side takes the lock first; recv returns false to stop.
func pingPongSide(l locker, key string, first bool, send func() error, recv func() (bool, error), stop func() bool) ([]ppEvent, error) {
	var evs []ppEvent
	if !first {
		if ok, err := recv(); err != nil || !ok {
			return evs, err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for {
		e := ppEvent{Asked: wall()}
		rel, err := l.lock(ctx, key)
		if err != nil {
			return evs, err
		}
		e.Got = wall()
		quit := stop()
		if !quit {
			if err := send(); err != nil {
				return evs, err
			}
		}
		time.Sleep(pingHold) // simulated work; also lets the peer start waiting
		e.Rel = wall()
		rctx, rcancel := releaseCtx()
		err = rel(rctx)
		rcancel()
		evs = append(evs, e)
		if err != nil || quit {
			return evs, err
		}
		if ok, err := recv(); err != nil || !ok {
			return evs, err
		}
	}
}

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
	case "pingpong":
		evs, err := pingPongSide(l, key, false,
			func() error { _, err := fmt.Println("G"); return err },
			func() (bool, error) {
				line, err := in.ReadString('\n')
				return strings.TrimSpace(line) == "G", err
			},
			func() bool { return false })
		if err != nil {
			return err
		}
		b, _ := json.Marshal(evs)
		fmt.Printf("R %s\n", b)
		return nil
	}
	return fmt.Errorf("unknown child mode %q", mode)
}

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

// --- 4. ping-pong between two processes ---

type pingResult struct {
	handoffs   []time.Duration
	notWaiting int // samples dropped: the waiter asked after the release
	violations int
}

func runPingPong(c contender, addr string, d time.Duration) (*pingResult, error) {
	const key = "bench:pp"
	l, err := c.open([]string{addr}, 10*time.Second)
	if err != nil {
		return nil, err
	}
	defer l.close()
	ch, err := startChild("pingpong", c, addr, key, 10*time.Second)
	if err != nil {
		return nil, err
	}
	defer ch.kill()
	deadline := time.Now().Add(d)
	evs, err := pingPongSide(l, key, true,
		func() error { _, err := io.WriteString(ch.in, "G\n"); return err },
		func() (bool, error) {
			line, err := ch.next(30 * time.Second)
			return line == "G", err
		},
		func() bool { return time.Now().After(deadline) })
	if err != nil {
		return nil, fmt.Errorf("parent side: %w (child: %s)", err, ch.stderr())
	}
	// Stop the child: it is waiting for our acquire notice.
	_, _ = io.WriteString(ch.in, "Q\n")
	var theirs []ppEvent
	for {
		line, err := ch.next(30 * time.Second)
		if err != nil {
			return nil, err
		}
		if b, ok := strings.CutPrefix(line, "R "); ok {
			if err := json.Unmarshal([]byte(b), &theirs); err != nil {
				return nil, err
			}
			break
		}
	}
	type owned struct {
		ppEvent
		side int
	}
	var all []owned
	for _, e := range evs {
		all = append(all, owned{e, 0})
	}
	for _, e := range theirs {
		all = append(all, owned{e, 1})
	}
	slices.SortFunc(all, func(a, b owned) int { return int(a.Got - b.Got) })
	r := &pingResult{}
	for k := 1; k < len(all); k++ {
		prev, cur := all[k-1], all[k]
		if cur.Got <= prev.Rel {
			r.violations++ // acquired before the previous holder released
		}
		if cur.side == prev.side {
			continue
		}
		if cur.Asked > prev.Rel {
			r.notWaiting++
			continue
		}
		r.handoffs = append(r.handoffs, time.Duration(cur.Got-prev.Rel))
	}
	return r, nil
}

// --- 5. crash recovery ---

// errRetryRound marks a round whose measurement is unusable because the
// machine stalled; the round is run again.
var errRetryRound = errors.New("round disturbed by a stall; retrying")

type crashResult struct {
	afterExpiry time.Duration // first waiter's acquire - lease expiry
	violations  int
}

func runCrash(c contender, addr string, ad *admin, waiters int, ttl time.Duration) (*crashResult, error) {
	const key = "bench:crash"
	ch, err := startChild("hold", c, addr, key, ttl)
	if err != nil {
		return nil, err
	}
	defer ch.kill()
	line, err := ch.next(30 * time.Second)
	var holderGot int64
	if err == nil {
		_, err = fmt.Sscanf(line, "H %d", &holderGot)
	}
	if err != nil {
		return nil, fmt.Errorf("holder did not report the lock: %q %v", line, err)
	}
	// Before any waiter exists, the keys with a TTL are the holder's lease
	// (fair-mode waiters add expiring keys of their own later).
	leaseKeys, err := ad.leases()
	if err != nil {
		return nil, err
	}
	if len(leaseKeys) == 0 {
		return nil, fmt.Errorf("holder's lock has no key with a TTL")
	}
	ls := make([]locker, waiters)
	defer func() {
		for _, l := range ls {
			if l != nil {
				l.close()
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*ttl+5*time.Second)
	defer cancel()
	type got struct {
		at  int64
		err error
	}
	first := make(chan got, waiters)
	var ex exclusion
	var wg sync.WaitGroup
	for i := range ls {
		if ls[i], err = c.open([]string{addr}, ttl); err != nil {
			return nil, err
		}
		wg.Add(1)
		go func(l locker) {
			defer wg.Done()
			rel, err := l.lock(ctx, key)
			if err != nil {
				first <- got{err: err}
				return
			}
			at := wall()
			ex.enter()
			first <- got{at: at}
			ex.leave()
			rctx, rcancel := releaseCtx()
			_ = rel(rctx)
			rcancel()
		}(ls[i])
	}
	time.Sleep(ttl / 10) // let the waiters start waiting on the live holder
	killAt := wall()
	ch.kill()
	// The dead holder renews nothing more: its lease ends at the keys' expiry.
	exp, err := ad.expiry(leaseKeys)
	snapAt := wall()
	if err != nil {
		return nil, err
	}
	g := <-first
	cancel() // the other waiters are not measured
	if err := waitGroup(&wg, 30*time.Second); err != nil {
		return nil, err
	}
	if g.err != nil {
		return nil, fmt.Errorf("waiter: %w", g.err)
	}
	if killAt >= exp*int64(time.Millisecond) || time.Duration(killAt-holderGot) > ttl/2 {
		return nil, errRetryRound // the machine stalled: the lease may have run out before the kill
	}
	r := &crashResult{afterExpiry: time.Duration(g.at - exp*int64(time.Millisecond)), violations: int(ex.violations.Load())}
	switch {
	case g.at < killAt:
		r.violations++ // taken while the holder was alive and its lease on
	case g.at < snapAt:
		return nil, errRetryRound // the expiry read may be the new holder's
	case r.afterExpiry < 0:
		r.violations++ // taken while the dead holder's lease was still on
	}
	return r, nil
}
