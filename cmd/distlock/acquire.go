package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/distlock/distlock"
)

// acquire takes the lock for the keeper, held on behalf of the runner pid,
// or says why not on stderr and returns nil and the exit code. ctx ends when
// the runner gives up waiting; the runner reports that itself.
func acquire(ctx context.Context, cfg *runConfig, conn *connection, pid int, log *runLog) (*distlock.Lock, int) {
	opts := cfg.lockOptions(pid)
	start := time.Now()
	var (
		lock   *distlock.Lock
		err    error
		waited time.Duration // said with -v
	)
	switch {
	case cfg.wait == 0:
		lock, err = conn.locks.TryLock(ctx, cfg.key, opts...)
	case cfg.verbose:
		// A first try, to say who holds the lock before waiting for it.
		if lock, err = conn.locks.TryLock(ctx, cfg.key, opts...); errors.Is(err, distlock.ErrNotObtained) {
			lock, err = waitVerbose(ctx, cfg, conn, opts, start, log)
			waited = time.Since(start)
		}
	default:
		lock, err = lockWithin(ctx, cfg, conn, opts, start)
	}
	switch {
	case err == nil:
		if cfg.verbose {
			log.info(evAcquired, fmt.Sprintf("took %q (fence %d)%s", cfg.key, lock.Fence(), waitedText(waited)),
				aFence(lock.Fence()), aWaited(waited))
		}
		return lock, exitOK
	case ctx.Err() != nil:
		return nil, exitNotObtained
	case errors.Is(err, distlock.ErrNotObtained) && !quorumUnreachable(err):
		text, holder := holderText(conn, cfg.key)
		log.warn(evNotObtained, fmt.Sprintf("%q %s%s; not run", cfg.key, text, waitedText(cfg.wait)),
			append(holder, aWait(max(cfg.wait, 0)))...)
		return nil, exitNotObtained
	case errors.Is(err, distlock.ErrInvalidKey) || errors.Is(err, distlock.ErrInvalidOption) || errors.Is(err, distlock.ErrInvalidTTL):
		return nil, log.fail(err, exitUsage)
	}
	return nil, log.fail(conn.redisError(err), exitRedis)
}

// lockWithin waits for the lock, up to --wait after start.
func lockWithin(ctx context.Context, cfg *runConfig, conn *connection, opts []distlock.Option, start time.Time) (*distlock.Lock, error) {
	if cfg.wait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, start.Add(cfg.wait))
		defer cancel()
	}
	return conn.locks.Lock(ctx, cfg.key, opts...)
}

// waitVerbose is lockWithin for -v: it says once who holds the lock and,
// on a terminal, shows how long it has waited so far.
func waitVerbose(ctx context.Context, cfg *runConfig, conn *connection, opts []distlock.Option, start time.Time, log *runLog) (*distlock.Lock, error) {
	upTo := ""
	if cfg.wait > 0 {
		upTo = " up to " + cfg.wait.String()
	}
	text, holder := holderText(conn, cfg.key)
	log.info(evWaiting, fmt.Sprintf("%q %s; waiting%s", cfg.key, text, upTo), holder...)
	// The line rewritten in place is for a person at a terminal, not for
	// the one-object-per-line JSON stream.
	if log.json == nil && isTerminal(log.w) {
		stop := showProgress(log.w, cfg.key, start)
		defer stop()
	}
	return lockWithin(ctx, cfg, conn, opts, start)
}

// showProgress rewrites one terminal line every second with how long
// distlock has waited; stop erases it.
func showProgress(w io.Writer, key string, start time.Time) (stop func()) {
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
				fmt.Fprintf(w, "\r\033[Kdistlock run: waiting for %q: %v", key, time.Since(start).Round(time.Second))
			}
		}
	}()
	return func() {
		close(done)
		<-finished
		fmt.Fprint(w, "\r\033[K")
	}
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

func waitedText(wait time.Duration) string {
	if wait > 0 {
		return " after waiting " + wait.Round(time.Millisecond).String()
	}
	return ""
}

// holderText describes who holds key, for the "not obtained" message, as
// text and as JSON attributes.
func holderText(conn *connection, key string) (string, []slog.Attr) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	info, err := conn.locks.Inspect(ctx, key)
	if err != nil || !info.Held() {
		return "is held by another owner", nil
	}
	attrs := []slog.Attr{slog.Int64("holder_fence", info.Fence), slog.String("holder", info.Meta)}
	s := fmt.Sprintf("is held (fence %d", info.Fence)
	if info.Meta != "" {
		s += ", " + info.Meta
	}
	if !info.Since.IsZero() {
		s += ", for " + time.Since(info.Since).Round(time.Second).String()
	}
	return s + ")", attrs
}
