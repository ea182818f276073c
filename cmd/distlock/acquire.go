package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/distlock/distlock"
)

// acquire takes what cfg holds for the keeper, on behalf of the runner pid,
// or says why not on stderr and returns nil and the exit code. ctx ends when
// the runner gives up waiting; the runner reports that itself.
func acquire(ctx context.Context, cfg *runConfig, conn *connection, pid int, log *runLog) (*held, int) {
	opts := cfg.lockOptions(pid)
	start := time.Now()
	var (
		h      *held
		err    error
		waited time.Duration // said with -v
	)
	switch {
	case cfg.wait == 0:
		h, err = cfg.take(ctx, conn, opts, true)
	case cfg.verbose && cfg.mode != holdLeader:
		// A first try, to say who holds the lock before waiting for it.
		if h, err = cfg.take(ctx, conn, opts, true); heldByAnother(err) {
			h, _, err = waitVerbose(ctx, cfg, conn, opts, pid, start, log)
			waited = time.Since(start)
		}
	case cfg.quorum:
		// A quorum's Lock waits through an outage of its nodes, which it
		// counts as not obtained: a first try tells an outage at the start
		// (exit 69, as on one server) from a held lock.
		if h, err = cfg.take(ctx, conn, opts, true); heldByAnother(err) {
			h, err = takeWithin(ctx, cfg, conn, opts, start)
		}
	case cfg.verbose:
		// A campaign cannot be tried: say who leads, if anyone, and wait.
		var said bool
		if h, said, err = waitVerbose(ctx, cfg, conn, opts, pid, start, log); said {
			waited = time.Since(start)
		}
	default:
		h, err = takeWithin(ctx, cfg, conn, opts, start)
	}
	switch {
	case err == nil:
		if cfg.verbose {
			log.info(evAcquired, cfg.takenText(h)+waitedText(waited), h.fenceAttr(), aWaited(waited))
		}
		return h, exitOK
	case ctx.Err() != nil:
		return nil, exitNotObtained
	case heldByAnother(err):
		// A waiter does not poll: Redis may have gone while it waited, and
		// then that, not a holder, is why nothing ran. (One node of a
		// quorum says nothing of the quorum.)
		if !cfg.quorum {
			if down := conn.ping(); down != nil {
				return nil, log.fail(fmt.Errorf("not obtained%s: %w", waitedText(cfg.wait), conn.redisError(down)), exitRedis)
			}
		}
		text, holder, _ := holderText(conn, cfg, pid)
		log.warn(evNotObtained, fmt.Sprintf("%s%s; not run", text, waitedText(cfg.wait)),
			append(holder, aWait(max(cfg.wait, 0)))...)
		return nil, exitNotObtained
	case errors.Is(err, distlock.ErrLimitMismatch):
		return nil, log.fail(limitRefusal(err), exitUsage)
	case errors.Is(err, distlock.ErrInvalidKey) || errors.Is(err, distlock.ErrInvalidOption) || errors.Is(err, distlock.ErrInvalidTTL):
		return nil, log.fail(err, exitUsage)
	}
	return nil, log.fail(conn.redisError(err), exitRedis)
}

// refusal is a usage error that the flags alone did not make: fail prints
// no pointer to the usage for it.
type refusal struct{ error }

// limitRefusal is the library's refusal of a --limit that differs from the
// semaphore's in use, said for the command line.
func limitRefusal(err error) error {
	why := strings.TrimPrefix(err.Error(), distlock.ErrInvalidOption.Error()+": ")
	return refusal{fmt.Errorf("%s; every run of a KEY gives the same --limit while any of them runs", why)}
}

// takeWithin waits for cfg's hold, up to --wait after start.
func takeWithin(ctx context.Context, cfg *runConfig, conn *connection, opts []distlock.Option, start time.Time) (*held, error) {
	if cfg.wait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, start.Add(cfg.wait))
		defer cancel()
	}
	h, err := cfg.take(ctx, conn, opts, false)
	if cfg.quorum {
		err = conn.quorumWaitEnded(err)
	}
	return h, err
}

// waitVerbose is takeWithin for -v: it says once who holds the lock (said)
// and, on a terminal, shows how long it has waited so far. An election
// nobody leads is not waited for: nothing is said then.
func waitVerbose(ctx context.Context, cfg *runConfig, conn *connection, opts []distlock.Option, pid int, start time.Time, log *runLog) (h *held, said bool, err error) {
	upTo := ""
	if cfg.wait > 0 {
		upTo = " up to " + cfg.wait.String()
	}
	text, holder, busy := holderText(conn, cfg, pid)
	if said = busy || cfg.mode != holdLeader; said {
		log.info(evWaiting, fmt.Sprintf("%s; waiting%s", text, upTo), holder...)
	}
	// The line rewritten in place is for a person at a terminal, not for
	// the one-object-per-line JSON stream.
	if log.json == nil && isTerminal(log.out) {
		stop := showProgress(log.w, log.name, cfg.quoted(), start)
		defer stop()
	}
	h, err = takeWithin(ctx, cfg, conn, opts, start)
	return h, said, err
}

// showProgress rewrites one terminal line every second with how long
// distlock has waited; stop erases it.
func showProgress(w io.Writer, name, keys string, start time.Time) (stop func()) {
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				fmt.Fprintf(w, "\r\033[Kdistlock %s: waiting for %s: %v", name, keys, time.Since(start).Round(time.Second))
			}
		}
	}()
	return func() {
		close(done)
		<-finished
		fmt.Fprint(w, "\r\033[K")
	}
}

// heldByAnother reports an attempt that found the lock held, not Redis
// unreachable.
func heldByAnother(err error) bool {
	return errors.Is(err, distlock.ErrNotObtained) && !quorumUnreachable(err)
}

// quorumUnreachable tells a quorum that failed because servers did not
// answer from one that found the lock held.
func quorumUnreachable(err error) bool {
	var qe *distlock.QuorumError
	if !errors.As(err, &qe) {
		return false
	}
	failed := 0
	for _, e := range qe.Nodes {
		if e != nil && !errors.Is(e, distlock.ErrNotObtained) {
			failed++
		}
	}
	return failed > len(qe.Nodes)-qe.Quorum
}

// errWaitEnded is a quorum wait that --wait ended while a majority of the
// servers answers.
var errWaitEnded = fmt.Errorf("%w: --wait ended", distlock.ErrNotObtained)

// quorumWaitEnded reads a quorum wait that --wait ended (err wraps the
// deadline) as held when a majority of the servers answers a ping now: the
// deadline falls inside an attempt as often as not, and the nodes that had
// not answered that attempt yet say nothing of an outage. (Read from the
// attempt, a loaded machine exited 69 with every server up.) With a
// majority silent, err stands: exit 69, as on one server.
func (c *connection) quorumWaitEnded(err error) error {
	if !errors.Is(err, distlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if c.pingMajority() != nil {
		return err
	}
	return errWaitEnded
}

func waitedText(wait time.Duration) string {
	if wait > 0 {
		return " after waiting " + wait.Round(time.Millisecond).String()
	}
	return ""
}
