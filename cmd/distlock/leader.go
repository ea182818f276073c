package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/distlock/distlock"
)

const leaderUsage = `usage: distlock leader [FLAGS] NAME

Prints who leads the election NAME (see 'distlock elect'): the leader's
value, its term (DISTLOCK_FENCE of the leader's COMMAND) and how long it
has led, by the clock of the machine that granted the leadership:

  web-1:8080 (term 7, for 3m12s)

or 'nobody leads "NAME"' and exit status 1.

Flags:
  --json     print JSON (schema below) instead of the text
  --watch    print the leader now and then a line at every change, of
             leader or of its value, with the time in front, until
             Ctrl-C (or SIGTERM, SIGHUP) or stdout closes; exit status 0.
             Changes are announced by Redis, not polled; a leader that
             dies is noticed when its lease runs out. With --json, one
             object per line, with "time" added.

` + connHelp + `
JSON schema (stable: fields are only ever added):
  {"name":    string,  the election's NAME
   "elected": bool,    whether anybody leads
   "value":   string,  the leader's value ("" when nobody leads)
   "term":    number,  the leader's term (0 when nobody leads)
   "since":   string,  RFC 3339 time the leadership began, or null
   "ttl_ms":  number}  lease left in milliseconds
  With --watch: {"time": "2025-06-03T09:41:07.512Z", "name": ...}

Examples:
  distlock leader scheduler
  distlock leader scheduler --json | jq -r .value
  distlock leader --watch scheduler

Exit status: 0 somebody leads, 1 nobody leads or stdout cannot be
written, 64 usage, 69 Redis error.
With --watch: 0 when stopped by a signal or a closed stdout, 1 if stdout
cannot be written otherwise, 64 usage, 69 if Redis fails at the start.
`

// leaderConfig is a parsed `distlock leader` command line.
type leaderConfig struct {
	conn  connFlags
	name  string
	json  bool
	watch bool
}

func parseLeaderArgs(args []string) (*leaderConfig, error) {
	cfg := &leaderConfig{}
	fs := newFlagSet("leader")
	cfg.conn.register(fs)
	fs.BoolVar(&cfg.json, "json", false, "")
	fs.BoolVar(&cfg.watch, "watch", false, "")
	pos, rest, err := parseInterspersed(fs, args, nil)
	if err != nil {
		return nil, err
	}
	if cfg.name, err = onlyName("NAME", append(pos, rest...)); err != nil {
		return nil, err
	}
	return cfg, nil
}

func cmdLeader(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseLeaderArgs(args)
	if errors.Is(err, errHelp) {
		fmt.Fprint(stdout, leaderUsage)
		return exitOK
	}
	if err != nil {
		return fail(stderr, "leader", err, exitUsage)
	}
	conn, err := cfg.conn.open()
	if err != nil {
		return fail(stderr, "leader", err, exitUsage)
	}
	defer conn.Close()
	e, err := conn.locks.NewElection(cfg.name)
	if err != nil {
		return fail(stderr, "leader", err, exitUsage)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	l, err := e.Leader(ctx)
	cancel()
	if err != nil && !errors.Is(err, distlock.ErrNoLeader) {
		// Also with --watch: Observe would retry a wrong URL silently.
		return fail(stderr, "leader", conn.redisError(err), exitRedis)
	}
	if cfg.watch {
		return watchLeader(cfg, conn, e, stdout, stderr)
	}
	var werr error
	if cfg.json {
		b, _ := json.MarshalIndent(toLeaderJSON(cfg.name, l), "", "  ")
		_, werr = fmt.Fprintf(stdout, "%s\n", b)
	} else {
		_, werr = fmt.Fprintln(stdout, leaderText(cfg.name, l, true))
	}
	if werr != nil {
		return fail(stderr, "leader", fmt.Errorf("writing to stdout: %w", werr), exitNone)
	}
	if !l.Elected() {
		return exitNone
	}
	return exitOK
}

// watchLeader prints every change of e's leader until a signal or a closed
// stdout ends it (exit 0).
func watchLeader(cfg *leaderConfig, conn *connection, e *distlock.Election, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), catchable(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)...)
	defer stop()
	// Whatever ends the watch ends it now, not after a lookup under way.
	defer conn.abandon()
	// A closed stdout (`| head`) gives EPIPE, which ends the watch quietly.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	// Writes come only with a change of leader, which may be days away:
	// the reader's going is watched for, not left to the next write.
	gone, stopWatching := readerGone(stdout)
	defer stopWatching()
	changes := e.Observe(ctx)
	for {
		var l distlock.Leader
		select {
		case <-gone:
			return exitOK // the reader is gone: nothing left to do
		case <-ctx.Done():
			// Not left to Observe, whose channel closes only once a lookup
			// under way returns: on a Redis that takes it and never
			// answers, a cancel does not end it (url.go); abandon does.
			return exitOK
		case c, ok := <-changes:
			if !ok {
				return exitOK // Observe ends only with ctx: a signal
			}
			l = c
		}
		now := time.Now()
		var line []byte
		if cfg.json {
			j := toLeaderJSON(cfg.name, l)
			j.Time = now.UTC().Format(jsonTime)
			line, _ = json.Marshal(j)
		} else {
			line = []byte(now.Format("2006-01-02 15:04:05") + "  " + leaderText(cfg.name, l, false))
		}
		// Apart: a stdout that takes no writes must not keep a signal
		// from ending the watch.
		_, err := interruptible{ctx, stdout}.Write(append(line, '\n'))
		if ctx.Err() != nil {
			return exitOK
		}
		if errors.Is(err, syscall.EPIPE) {
			return exitOK // the reader is gone: nothing left to do
		}
		if err != nil {
			return fail(stderr, "leader", fmt.Errorf("writing to stdout: %w", err), exitNone)
		}
	}
}

// leaderText is one line about l: `web-1:8080 (term 7, for 3m12s)`, or
// `nobody leads "NAME"`; age adds the "for".
func leaderText(name string, l distlock.Leader, age bool) string {
	if !l.Elected() {
		return fmt.Sprintf("nobody leads %q", printable(name))
	}
	s := fmt.Sprintf("%s (term %d", printable(l.Value), l.Fence)
	if age && !l.Since.IsZero() {
		s += ", for " + shortDuration(time.Since(l.Since))
	}
	return s + ")"
}

// leaderJSON is `leader --json`; see leaderUsage for the schema.
type leaderJSON struct {
	Time      string  `json:"time,omitempty"` // --watch only
	Name      string  `json:"name"`
	Elected   bool    `json:"elected"`
	Value     string  `json:"value"`
	Term      int64   `json:"term"`
	Since     *string `json:"since"`
	TTLMillis int64   `json:"ttl_ms"`
}

func toLeaderJSON(name string, l distlock.Leader) leaderJSON {
	j := leaderJSON{Name: name, Elected: l.Elected(), Value: l.Value, Term: l.Fence, TTLMillis: l.TTL.Milliseconds()}
	if !l.Since.IsZero() {
		s := l.Since.UTC().Format(jsonTime)
		j.Since = &s
	}
	return j
}

// onlyName returns the one positional argument of a command that takes a
// lock's name, which the usage calls what (KEY or NAME).
func onlyName(what string, pos []string) (string, error) {
	if len(pos) != 1 {
		return "", usagef("want exactly one %s, got %d arguments", what, len(pos))
	}
	if pos[0] == "" || len(pos[0]) > distlock.MaxKeyLen {
		return "", usagef("%s must be 1 to %d bytes", what, distlock.MaxKeyLen)
	}
	return pos[0], nil
}
