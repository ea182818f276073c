package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
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

// --- 4. ping-pong between two processes ---

type pingResult struct {
	handoffs   []time.Duration
	notWaiting int // samples dropped: the waiter asked after the release
	violations int
	holds      int   // both sides' holds
	use        usage // both processes and the server
}

func runPingPong(c contender, addr string, ad *admin, d time.Duration) (*pingResult, error) {
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
	p, err := startProbe(ad)
	if err != nil {
		return nil, err
	}
	var early []ppEvent // the child's holds, when it failed (see childMain)
	evs, err := pingPongSide(l, key, true,
		func() error { _, err := io.WriteString(ch.in, "G\n"); return err },
		func() (bool, error) {
			line, err := ch.next(30 * time.Second)
			if b, ok := strings.CutPrefix(line, "R "); ok {
				_ = json.Unmarshal([]byte(b), &early)
			}
			return line == "G", err
		},
		func() bool { return time.Now().After(deadline) })
	// A lock that lets both sides in typically fails a release next ("not
	// held"), on either side: the round is unusable, but what it broke is
	// reported, from the holds of both sides when the child told them.
	broken := func(err error) (*pingResult, error) {
		r := &pingResult{}
		if early != nil {
			r.judge(evs, early)
		}
		return r, err
	}
	if err != nil {
		_, _ = io.WriteString(ch.in, "Q\n")
		if early == nil {
			early, _, _ = childResult(ch, 5*time.Second)
		}
		return broken(fmt.Errorf("parent side: %w (child: %s)", err, ch.stderr()))
	}
	// Stop the child: it is waiting for our acquire notice.
	_, _ = io.WriteString(ch.in, "Q\n")
	theirs, childCPU, err := childResult(ch, 30*time.Second)
	if err != nil {
		return broken(err)
	}
	use, err := p.stop()
	if err != nil {
		return nil, err
	}
	use.children = time.Duration(childCPU)
	r := &pingResult{use: use}
	r.judge(evs, theirs)
	return r, nil
}

// childResult reads the ping-pong child's report once it stops: its CPU
// (ns) and its holds.
func childResult(ch *child, limit time.Duration) (theirs []ppEvent, cpu int64, err error) {
	for {
		line, err := ch.next(limit)
		if err != nil {
			return nil, 0, err
		}
		if c, ok := strings.CutPrefix(line, "C "); ok {
			if _, err := fmt.Sscanf(c, "%d", &cpu); err != nil {
				return nil, 0, fmt.Errorf("child CPU %q: %w", line, err)
			}
		}
		if b, ok := strings.CutPrefix(line, "R "); ok {
			if err := json.Unmarshal([]byte(b), &theirs); err != nil {
				return nil, 0, err
			}
			return theirs, cpu, nil
		}
	}
}

// judge counts the holds of both sides (ours, theirs), the overlaps among
// them and the handoffs.
func (r *pingResult) judge(ours, theirs []ppEvent) {
	type owned struct {
		ppEvent
		side int
	}
	var all []owned
	for _, e := range ours {
		all = append(all, owned{e, 0})
	}
	for _, e := range theirs {
		all = append(all, owned{e, 1})
	}
	slices.SortFunc(all, func(a, b owned) int { return int(a.Got - b.Got) })
	r.holds = len(all)
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
}
