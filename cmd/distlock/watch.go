package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/distlock/distlock"
)

// refreshTimeout bounds one refresh of --watch: a Redis that stopped
// answering must not freeze the view without saying so.
const refreshTimeout = 10 * time.Second

// watchStatus is `distlock status --watch`: it refreshes the view every
// cfg.interval until a signal or a closed stdout ends it (exit 0).
func watchStatus(cfg *statusConfig, conn *connection, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), catchable(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)...)
	defer stop()
	// Whatever ends the watch ends it now, not after a refresh under way.
	defer conn.abandon()
	// A closed stdout (`| head`) gives EPIPE, which ends the watch quietly,
	// instead of killing distlock with SIGPIPE.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	// While Redis is down nothing is written off a terminal, so a write
	// would not tell that the reader is gone: watched for, as by leader.
	gone, stopWatching := readerGone(stdout)
	defer stopWatching()

	v := newWatchView(cfg, stdout)
	// A stdout that takes no writes (a terminal stopped with Ctrl-S, a
	// reader that does not read) must not keep a signal from ending it.
	v.w = interruptible{ctx, stdout}
	tick := time.NewTicker(cfg.interval)
	defer tick.Stop()
	down := false // the last refresh failed on Redis
	for first := true; ; first = false {
		r, ok := refresh(ctx, cfg, conn)
		if !ok {
			return exitOK // a signal
		}
		infos, free, err := r.infos, r.free, r.err
		now := time.Now()
		var werr error // writing to stdout
		switch {
		case err != nil && first:
			// Most likely a wrong URL or a server that is down: say so at
			// once rather than show an empty view.
			return conn.failCall(stderr, "status", err)
		case err != nil:
			werr = v.problem(now, conn.redisError(err), !down, stderr)
			down = true
		default:
			if down && v.mode != viewScreen {
				fmt.Fprintln(stderr, "distlock status: Redis answers again")
			}
			down = false
			werr = v.show(now, infos, free)
		}
		if ctx.Err() != nil {
			return exitOK // a signal, maybe during a write stdout did not take
		}
		if errors.Is(werr, syscall.EPIPE) {
			return exitOK // the reader is gone: nothing left to do
		}
		if werr != nil {
			return fail(stderr, "status", fmt.Errorf("writing to stdout: %w", werr), exitNone)
		}
		select {
		case <-ctx.Done():
			return exitOK
		case <-gone:
			return exitOK // the reader is gone: nothing left to do
		case <-tick.C:
		}
	}
}

// interruptible writes to w apart, so that the end of ctx (a signal) ends a
// write that w does not take; the write is then left behind, as distlock
// exits.
type interruptible struct {
	ctx context.Context
	w   io.Writer
}

func (iw interruptible) Write(p []byte) (int, error) {
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, err := iw.w.Write(p)
		done <- result{n, err}
	}()
	select {
	case r := <-done:
		return r.n, r.err
	case <-iw.ctx.Done():
		return 0, iw.ctx.Err()
	}
}

// refreshed is the outcome of one refresh of --watch.
type refreshed struct {
	infos []distlock.LockInfo
	free  *distlock.LockInfo
	err   error
}

// refresh queries the locks once, within refreshTimeout; ok is false if a
// signal (ctx) came first. The query runs apart, because a signal does not
// cut short a call on a Redis that takes it and never answers (the client
// honours deadlines, not cancels: url.go): Ctrl-C would otherwise wait for
// the timeout. Such a call is left behind; conn.abandon ends it.
func refresh(ctx context.Context, cfg *statusConfig, conn *connection) (r refreshed, ok bool) {
	qctx, cancel := context.WithTimeout(ctx, refreshTimeout)
	defer cancel()
	done := make(chan refreshed, 1)
	go func() {
		var r refreshed
		r.infos, r.free, r.err = query(qctx, cfg, conn)
		done <- r
	}()
	select {
	case r = <-done:
		return r, ctx.Err() == nil
	case <-ctx.Done():
		return refreshed{}, false
	}
}

// viewMode is how --watch shows each refresh.
type viewMode int

const (
	viewBlocks viewMode = iota // a table per refresh, for pipes and files
	viewScreen                 // one table redrawn in place on a terminal
	viewJSON                   // one JSON object per line
)

// watchView shows the refreshes of --watch on w.
type watchView struct {
	cfg  *statusConfig
	w    io.Writer
	fd   int // w's descriptor, to ask a terminal its size; -1 if none
	mode viewMode
}

func newWatchView(cfg *statusConfig, w io.Writer) *watchView {
	v := &watchView{cfg: cfg, w: w, fd: -1}
	switch {
	case cfg.json:
		v.mode = viewJSON
	case isTerminal(w) && cursorAddressing():
		v.mode = viewScreen
		v.fd = int(w.(*os.File).Fd())
	}
	return v
}

// cursorAddressing tells whether the terminal understands the ANSI
// sequences the screen view uses. TERM=dumb (Emacs shells, some CI logs)
// does not: there, tables are printed one after another.
func cursorAddressing() bool {
	term := os.Getenv("TERM")
	return term != "" && term != "dumb"
}

// show writes one refresh.
func (v *watchView) show(now time.Time, infos []distlock.LockInfo, free *distlock.LockInfo) error {
	if v.mode == viewJSON {
		b, err := json.Marshal(struct {
			Time  string     `json:"time"`
			Locks []lockJSON `json:"locks"`
		}{now.UTC().Format(jsonTime), locksJSON(infos)})
		if err != nil {
			return err
		}
		_, err = v.w.Write(append(b, '\n'))
		return err
	}
	var table bytes.Buffer
	writeStatusTable(&table, infos, v.cfg.pattern, free)
	return v.draw(now, table.String())
}

// problem shows a failed refresh: in the frame on a terminal, else once on
// stderr when Redis stops answering (the view itself keeps its last state).
func (v *watchView) problem(now time.Time, err error, started bool, stderr io.Writer) error {
	if v.mode == viewScreen {
		return v.draw(now, fmt.Sprintf("%v\nretrying every %v\n", err, v.cfg.interval))
	}
	if started {
		fmt.Fprintf(stderr, "distlock status: %v\nretrying every %v\n", err, v.cfg.interval)
	}
	return nil
}

// draw writes body (lines ending in "\n") under a header with the time.
func (v *watchView) draw(now time.Time, body string) error {
	stamp := now.Format("2006-01-02 15:04:05")
	if v.mode == viewBlocks {
		_, err := io.WriteString(v.w, stamp+"\n"+body+"\n")
		return err
	}
	header := stamp + "  every " + v.cfg.interval.String() + "  (Ctrl-C quits)"
	lines := append([]string{header, ""}, strings.Split(strings.TrimSuffix(body, "\n"), "\n")...)
	cols, rows := windowSize(v.fd)
	_, err := v.w.Write(frame(lines, cols, rows))
	return err
}
