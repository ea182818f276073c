package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"
)

// logFormat is --log-format: how `distlock run` writes its messages.
type logFormat string

const (
	logText logFormat = "text"
	logJSON logFormat = "json"
)

func (f *logFormat) String() string { return string(*f) }

func (f *logFormat) Set(s string) error {
	switch logFormat(s) {
	case logText, logJSON:
		*f = logFormat(s)
		return nil
	}
	return errors.New("want text or json")
}

// runLog is where `distlock run` says what happens, on stderr: the runner
// and the keeper alike (the keeper gets --log-format with the rest of the
// run arguments, see startKeeper), and the shim. In text mode a message is
// a line "distlock run: " and a sentence; in JSON mode it is one object per
// line from log/slog's JSONHandler: time, level, msg (the same sentence),
// event (a stable name for scripts), key, and the event's own attributes
// (fence, cause, command, ...). Each message is a single write, so that
// lines of the two processes do not mix. Messages go through a logQueue
// (logqueue.go): writing one never waits for stderr.
type runLog struct {
	w    io.Writer // the queue to out
	out  io.Writer // stderr itself
	name string    // "run" or "elect": text lines start "distlock NAME: "
	key  string
	json *slog.Logger // nil in text mode
}

func newRunLog(format logFormat, name, key string, w io.Writer) *runLog {
	q := queueFor(w)
	l := &runLog{w: q, out: w, name: name, key: key}
	if format == logJSON {
		l.json = slog.New(slog.NewJSONHandler(q, nil))
	}
	// Said by the queue's goroutine, straight to stderr, once it takes
	// writes again.
	direct := &runLog{w: w, out: w, name: name, key: key}
	if format == logJSON {
		direct.json = slog.New(slog.NewJSONHandler(w, nil))
	}
	note := func(n int64) {
		direct.warn(evDropped, droppedText(n), slog.Int64("dropped", n))
	}
	q.note.Store(&note)
	return l
}

// Events, the "event" attribute of a JSON message.
const (
	evWaiting       = "waiting"        // -v: the lock is held by another; waiting
	evAcquired      = "acquired"       // -v: the lock is taken
	evNotObtained   = "not_obtained"   // not taken within --wait; COMMAND not run
	evInterrupted   = "interrupted"    // a signal ended the wait; COMMAND not run
	evCannotRun     = "cannot_run"     // COMMAND could not be started
	evLost          = "lost"           // the lock was lost while COMMAND ran
	evKill          = "sigkill"        // COMMAND outlived --grace after SIGTERM
	evRunnerDied    = "runner_died"    // the keeper's runner died; COMMAND killed
	evKeeperDied    = "keeper_died"    // the runner's keeper died
	evKeeperStalled = "keeper_stalled" // the keeper stopped answering; killed
	evLeftRunning   = "left_running"   // COMMAND exited, processes of its group run on
	evReleased      = "released"       // -v: the lock is released
	evReleaseFail   = "release_failed"
	evDropped       = "dropped" // stderr took no writes; messages were left out
	evUsage         = "usage"   // bad command line (exit 64)
	evError         = "error"   // Redis or system error (exit 69)
)

// say writes one message: msg in text mode, msg with event, key and attrs
// in JSON mode.
func (l *runLog) say(level slog.Level, event, msg string, attrs ...slog.Attr) {
	if l.json == nil {
		fmt.Fprintf(l.w, "distlock %s: %s\n", l.name, msg)
		return
	}
	head := []slog.Attr{slog.String("event", event)}
	if l.key != "" {
		head = append(head, slog.String("key", l.key))
	}
	l.json.LogAttrs(context.Background(), level, msg, append(head, attrs...)...)
}

func (l *runLog) info(event, msg string, attrs ...slog.Attr) {
	l.say(slog.LevelInfo, event, msg, attrs...)
}

func (l *runLog) warn(event, msg string, attrs ...slog.Attr) {
	l.say(slog.LevelWarn, event, msg, attrs...)
}

func (l *runLog) error(event, msg string, attrs ...slog.Attr) {
	l.say(slog.LevelError, event, msg, attrs...)
}

// fail reports err, which ends the run with code, and returns code.
func (l *runLog) fail(err error, code int) int {
	if l.json == nil {
		return fail(l.w, l.name, err, code)
	}
	event := evError
	if code == exitUsage {
		event = evUsage
	}
	l.error(event, err.Error())
	return code
}

// library is the logger for the distlock library (distlock.WithLogger), so
// that its own reports (a loss and its cause, renewals that got no answer,
// a quorum node turning suspect, a broken subscription) come in the same
// stream. In text mode they come only with -v, which asks for more than
// the plain messages, as logfmt after "distlock run: "; in JSON mode its
// Info messages only with -v. nil: no library logging.
func (l *runLog) library(verbose bool) *slog.Logger {
	if l.json != nil {
		level := slog.LevelWarn
		if verbose {
			level = slog.LevelInfo
		}
		return slog.New(slog.NewJSONHandler(l.w, &slog.HandlerOptions{Level: level}))
	}
	if !verbose {
		return nil
	}
	return slog.New(slog.NewTextHandler(prefixWriter{l.w, "distlock " + l.name + ": "}, &slog.HandlerOptions{
		// The plain messages carry no time either.
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
}

// prefixWriter puts prefix ("distlock run: ") before each record of a
// TextHandler, which writes a record in one call.
type prefixWriter struct {
	w      io.Writer
	prefix string
}

func (p prefixWriter) Write(b []byte) (int, error) {
	if _, err := p.w.Write(append([]byte(p.prefix), b...)); err != nil {
		return 0, err
	}
	return len(b), nil
}

// Attributes, so that the same thing has the same name in every message.
// Durations are in nanoseconds, as log/slog writes them (the library's too).
func aFence(f int64) slog.Attr           { return slog.Int64("fence", f) }
func aCommand(c string) slog.Attr        { return slog.String("command", c) }
func aGrace(d time.Duration) slog.Attr   { return slog.Duration("grace", d) }
func aCause(err error) slog.Attr         { return slog.String("cause", errString(err)) }
func aError(err error) slog.Attr         { return slog.String("error", errString(err)) }
func aWaited(d time.Duration) slog.Attr  { return slog.Duration("waited", d) }
func aWait(d time.Duration) slog.Attr    { return slog.Duration("wait", d) }
func aTTL(d time.Duration) slog.Attr     { return slog.Duration("ttl", d) }
func aSignal(s fmt.Stringer) slog.Attr   { return slog.String("signal", s.String()) }
func aState(state string) slog.Attr      { return slog.String("state", state) }
func aSilence(d time.Duration) slog.Attr { return slog.Duration("silence", d) }
func aPgid(pgid int) slog.Attr           { return slog.Int("pgid", pgid) }

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
