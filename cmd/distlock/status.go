package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/distlock/distlock"
)

const statusUsage = `usage: distlock status [FLAGS] [KEY or PATTERN]

Shows the locks held now, and every other kind of hold: read and write
holds of read-write locks, permits of semaphores, leaders of elections.
With no argument all of them, with KEY those of that name, with a PATTERN
(a Redis glob: *, ?, [abc]) those whose names match. It scans the keyspace
(every master of a Cluster), for a KEY too.

One line per hold: a read-write lock with 3 readers has 3 lines.
Columns: KEY; KIND, what is held: lock ('distlock run KEY'), read and
write (--shared, --write), permit/N (--limit N: a permit of a semaphore
of N), leader ('distlock elect'); FENCE, the fencing token of the holder
(a leader's term); TTL, the lease left
(renewed by a live holder); AGE, time since the lock was taken by the
holder's clock; HOLDS, more than 1 for a reentrant (--owner) lock taken
again; WAITERS, the processes waiting for it: those in its line in Redis
(every single-node waiter, --fair or not) plus those subscribed to its shared
release channel (quorum waiters; such a process stays subscribed after its
wait, while it holds the lock and after, so it may be counted then too);
for read and write holds and permits,
the waiters of the whole read-write lock or semaphore, on each of its lines;
HOLDER, the holder's metadata (host, pid, command; a leader's value).

Flags:
  --json             print JSON for scripts (schema below) instead of the
                     table
  --watch            keep showing the locks, refreshed every --interval,
                     until Ctrl-C (or SIGTERM, SIGHUP) or stdout closes;
                     exit status 0. On a terminal the table is redrawn in
                     place; elsewhere (a pipe, a file, TERM=dumb) a table
                     is printed per refresh, under its time and followed by
                     a blank line; with --json, one snapshot object per
                     line per refresh (below). A Redis error after the
                     first refresh is shown and retried, not fatal.
  --interval DURATION
                     time between refreshes of --watch (default 1s, at
                     least ` + minIntervalText + `)

` + connHelp + `
JSON schema (stable: fields are only ever added):
  {"locks": [{
     "key":       string,   lock name
     "kind":      string,   "lock", "read", "write", "permit" or "leader"
     "limit":     number,   a permit's semaphore: its number of permits;
                            0 for other kinds
     "owner":     string,   grant token, or the --owner ID
     "holds":     number,   hold count
     "fence":     number,   fencing token of the grant
     "ttl_ms":    number,   lease left in milliseconds
     "since":     string,   RFC 3339 time the lock was taken (holder's
                            clock), or null when unknown
     "meta":      string,   holder metadata, as stored
     "host":      string,   host=... from meta, or ""
     "pid":       number,   pid=... from meta, or 0
     "queued":    number,   waiters in the lock's line in Redis: every
                            single-node waiter, --fair or not
     "listening": number    connections on the shared release channel (quorum waiters)
  }]}
  Locks are sorted by key (the holds of one name together); a free KEY
  gives {"locks": []}.
  With --watch, each refresh is one line, the same object with the time
  of the refresh (RFC 3339, UTC) added:
  {"time": "2025-06-03T09:41:07.512Z", "locks": [...]}

Examples:
  distlock status                      # every held lock
  distlock status nightly-report       # one lock
  distlock status 'deploy:*' --json | jq -r '.locks[] | "\(.key) \(.host)"'
  distlock status --watch 'deploy:*'   # a live view; Ctrl-C to quit
  distlock status --watch --json --interval 5s >> locks.jsonl

Exit status: 0 if a lock was shown, 1 if none matched or stdout cannot
be written, 64 usage, 69 Redis error. With --watch: 0 when stopped by a signal or a closed
stdout, 1 if stdout cannot be written otherwise, 64 usage, 69 if the first
refresh fails.
`

// statusConfig is a parsed `distlock status` command line.
type statusConfig struct {
	conn     connFlags
	pattern  string // "" for all
	json     bool
	watch    bool
	interval time.Duration // between refreshes of --watch
}

// minInterval is the shortest --interval: each refresh is a Redis round
// trip (a keyspace scan for a pattern), and a faster redraw shows nothing
// a person could read.
const (
	minInterval     = 100 * time.Millisecond
	minIntervalText = "100ms"
)

func parseStatusArgs(args []string) (*statusConfig, error) {
	cfg := &statusConfig{}
	fs := newFlagSet("status")
	cfg.conn.register(fs)
	fs.BoolVar(&cfg.json, "json", false, "")
	fs.BoolVar(&cfg.watch, "watch", false, "")
	interval := durationFlag{d: time.Second}
	fs.Var(&interval, "interval", "")
	pos, rest, err := parseInterspersed(fs, args, nil)
	if err != nil {
		return nil, err
	}
	cfg.interval = interval.d
	if isSet(fs, "interval") && !cfg.watch {
		return nil, usagef("--interval is for --watch")
	}
	if cfg.interval < minInterval {
		return nil, usagef("--interval %v: must be at least %s", cfg.interval, minIntervalText)
	}
	pos = append(pos, rest...)
	if len(pos) > 1 {
		return nil, usagef("one KEY or PATTERN at most, got %d: %q", len(pos), pos)
	}
	if len(pos) == 1 {
		if pos[0] == "" || len(pos[0]) > distlock.MaxKeyLen {
			return nil, usagef("KEY or PATTERN must be 1 to %d bytes", distlock.MaxKeyLen)
		}
		cfg.pattern = pos[0]
	}
	return cfg, nil
}

func isPattern(s string) bool { return s == "" || strings.ContainsAny(s, "*?[") }

func cmdStatus(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseStatusArgs(args)
	if errors.Is(err, errHelp) {
		fmt.Fprint(stdout, statusUsage)
		return exitOK
	}
	if err != nil {
		return fail(stderr, "status", err, exitUsage)
	}
	conn, err := cfg.conn.open()
	if err != nil {
		return fail(stderr, "status", err, exitUsage)
	}
	defer conn.Close()
	if cfg.watch {
		return watchStatus(cfg, conn, stdout, stderr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	infos, free, err := query(ctx, cfg, conn)
	if err != nil {
		return conn.failCall(stderr, "status", err)
	}
	// Written at once, so that a stdout that takes nothing is an error:
	// nothing was shown (exit 1, as with --watch), and Redis did not fail.
	var out bytes.Buffer
	if cfg.json {
		if err := writeStatusJSON(&out, infos); err != nil {
			return fail(stderr, "status", err, exitRedis)
		}
	} else {
		writeStatusTable(&out, infos, cfg.pattern, free)
	}
	if _, err := stdout.Write(out.Bytes()); err != nil {
		return fail(stderr, "status", fmt.Errorf("writing to stdout: %w", err), exitNone)
	}
	if len(infos) == 0 {
		return exitNone
	}
	return exitOK
}

// query reads the holds cfg asks for; free is the KEY asked for when it is
// free, to say so. A KEY's holds of every kind are found by List, as a
// pattern's are: Inspect reads plain locks only.
func query(ctx context.Context, cfg *statusConfig, conn *connection) (infos []distlock.LockInfo, free *distlock.LockInfo, err error) {
	if isPattern(cfg.pattern) {
		infos, err = conn.locks.List(ctx, cfg.pattern)
		return infos, nil, err
	}
	all, err := conn.locks.List(ctx, globQuote(cfg.pattern))
	if err != nil {
		return nil, nil, err
	}
	for _, in := range all {
		if in.Key == cfg.pattern {
			infos = append(infos, in)
		}
	}
	if len(infos) > 0 {
		return infos, nil, nil
	}
	// Free: a plain lock's waiters are still worth saying.
	info, err := conn.locks.Inspect(ctx, cfg.pattern)
	if errors.Is(err, distlock.ErrInvalidKey) {
		// A name no lock can have here (on a Cluster, one whose key would
		// have no hash tag): free, not a Redis error.
		return nil, &distlock.LockInfo{Key: cfg.pattern}, nil
	}
	if err != nil {
		return nil, nil, err
	}
	return nil, &info, nil
}

// lockJSON is one lock in `status --json`; see statusUsage for the schema.
type lockJSON struct {
	Key       string  `json:"key"`
	Kind      string  `json:"kind"`
	Limit     int     `json:"limit"`
	Owner     string  `json:"owner"`
	Holds     int64   `json:"holds"`
	Fence     int64   `json:"fence"`
	TTLMillis int64   `json:"ttl_ms"`
	Since     *string `json:"since"`
	Meta      string  `json:"meta"`
	Host      string  `json:"host"`
	PID       int64   `json:"pid"`
	Queued    int64   `json:"queued"`
	Listening int64   `json:"listening"`
}

func toJSON(in distlock.LockInfo) lockJSON {
	j := lockJSON{
		Key: in.Key, Kind: in.Kind, Limit: in.Limit, Owner: in.Owner, Holds: in.Count, Fence: in.Fence,
		TTLMillis: in.TTL.Milliseconds(), Meta: in.Meta,
		Queued: in.Queued, Listening: in.Listening,
	}
	if !in.Since.IsZero() {
		s := in.Since.UTC().Format(jsonTime)
		j.Since = &s
	}
	fields := metaFields(in.Meta)
	j.Host = fields["host"]
	j.PID, _ = strconv.ParseInt(fields["pid"], 10, 64)
	return j
}

// jsonTime is how times appear in JSON: RFC 3339 in UTC, in milliseconds.
const jsonTime = "2006-01-02T15:04:05.000Z07:00"

func locksJSON(infos []distlock.LockInfo) []lockJSON {
	locks := make([]lockJSON, 0, len(infos))
	for _, in := range infos {
		locks = append(locks, toJSON(in))
	}
	return locks
}

func writeStatusJSON(w io.Writer, infos []distlock.LockInfo) error {
	out := struct {
		Locks []lockJSON `json:"locks"`
	}{Locks: locksJSON(infos)}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// metaFields reads "k=v k=v" metadata; other words are ignored.
func metaFields(meta string) map[string]string {
	m := map[string]string{}
	for _, f := range strings.Fields(meta) {
		if k, v, ok := strings.Cut(f, "="); ok {
			if _, dup := m[k]; !dup {
				m[k] = v
			}
		}
	}
	return m
}

func writeStatusTable(w io.Writer, infos []distlock.LockInfo, pattern string, free *distlock.LockInfo) {
	if len(infos) == 0 {
		switch {
		case free != nil:
			fmt.Fprintf(w, "%s is free", printable(free.Key))
			if n := free.Queued + free.Listening; n > 0 {
				fmt.Fprintf(w, " (%d waiting)", n)
			}
			fmt.Fprintln(w)
		case pattern == "" || pattern == "*":
			fmt.Fprintln(w, "no locks held")
		default:
			fmt.Fprintf(w, "no locks held matching %q\n", pattern)
		}
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tKIND\tFENCE\tTTL\tAGE\tHOLDS\tWAITERS\tHOLDER")
	for _, in := range infos {
		age := "-"
		if !in.Since.IsZero() {
			age = shortDuration(time.Since(in.Since))
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%d\t%d\t%s\n", printable(in.Key), kindText(in), in.Fence,
			shortDuration(in.TTL), age, in.Count, in.Queued+in.Listening, printable(in.Meta))
	}
	tw.Flush()
}

// kindText is the KIND column: the kind of hold, and a permit's limit.
func kindText(in distlock.LockInfo) string {
	switch {
	case in.Kind == "":
		return "lock"
	case in.Kind == "permit":
		return "permit/" + strconv.Itoa(in.Limit)
	}
	return in.Kind
}

// shortDuration rounds for a table: 950ms, 9.4s, 3m12s, 5h3m.
func shortDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	default:
		return strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
	}
}

// printable keeps control characters in names and metadata out of the
// terminal, C1 ones too (U+0080–U+009F: many terminals act on CSI and OSC
// encoded in UTF-8).
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return '?'
		}
		return r
	}, s)
}
