package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/distlock/distlock"
)

const releaseUsage = `usage: distlock release --force [FLAGS] KEY

Deletes the lock KEY whoever holds it and wakes its waiters, then prints
what it removed. It is for a lock whose holder is known to be dead or stuck:
a live 'distlock run' holder notices at its next renewal (within a third of
its TTL) and stops its command with SIGTERM, but until then two holders
may run at once. Waiting out the TTL is always safer.

It shows the lock and asks for confirmation on the terminal; it removes
only the grant you saw (if the lock changed hands meanwhile, nothing is
removed). Without a terminal it refuses unless --yes is given.

It talks to one server. A --quorum lock is held on each of its servers:
release it on a majority of them, one --redis at a time; released on
fewer, the lock stays held and its holder runs on.

Flags:
  --force   required: says that you mean to override the holder
  --yes, -y do not ask; remove whichever grant holds KEY now
  --json    print the removed lock as JSON (the 'status --json' lock
            object) instead of text

` + connHelp + `
Examples:
  distlock release --force nightly-report
  distlock release --force --yes nightly-report    # from a script

Exit status: 0 released, 1 nothing released (KEY free, changed hands or
not confirmed), 64 usage or no confirmation possible, 69 Redis error.
`

type releaseConfig struct {
	conn  connFlags
	key   string
	force bool
	yes   bool
	json  bool
}

func parseReleaseArgs(args []string) (*releaseConfig, error) {
	cfg := &releaseConfig{}
	fs := newFlagSet("release")
	cfg.conn.register(fs)
	fs.BoolVar(&cfg.force, "force", false, "")
	fs.BoolVar(&cfg.yes, "yes", false, "")
	fs.BoolVar(&cfg.yes, "y", false, "")
	fs.BoolVar(&cfg.json, "json", false, "")
	pos, rest, err := parseInterspersed(fs, args, nil)
	if err != nil {
		return nil, err
	}
	if cfg.key, err = onlyName("KEY", append(pos, rest...)); err != nil {
		return nil, err
	}
	if !cfg.force {
		return nil, usagef("release needs --force: a lock is released by its holder; --force deletes it whoever holds it")
	}
	return cfg, nil
}

func cmdRelease(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	cfg, err := parseReleaseArgs(args)
	if errors.Is(err, errHelp) {
		fmt.Fprint(stdout, releaseUsage)
		return exitOK
	}
	if err != nil {
		return fail(stderr, "release", err, exitUsage)
	}
	if !cfg.yes && !isTerminal(stdin) {
		return fail(stderr, "release", usagef("not asking for confirmation: stdin is not a terminal; pass --yes to release %q without asking", cfg.key), exitUsage)
	}
	conn, err := cfg.conn.open()
	if err != nil {
		return fail(stderr, "release", err, exitUsage)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var removed distlock.LockInfo
	if cfg.yes {
		removed, err = conn.locks.ForceRelease(ctx, cfg.key, 0)
	} else {
		var seen distlock.LockInfo
		seen, err = conn.locks.Inspect(ctx, cfg.key)
		if err == nil && seen.Held() {
			fmt.Fprintf(stderr, "%s\nForce-release %q? Its holder may still be running. [y/N] ", describe(seen), cfg.key)
			if !confirmed(stdin) {
				fmt.Fprintln(stderr, "distlock release: not confirmed; nothing released")
				return exitNone
			}
			cancel()
			ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			removed, err = conn.locks.ForceRelease(ctx, cfg.key, seen.Fence)
		} else if err == nil {
			err = fmt.Errorf("%w: %q is free", distlock.ErrNotHeld, cfg.key)
		}
	}
	switch {
	case errors.Is(err, distlock.ErrNotHeld):
		if kind := otherHold(conn, cfg.key); kind != "" {
			fmt.Fprintf(stderr, "distlock release: nothing released: %q is held as a %s, not a plain lock; release --force frees plain locks only\n", cfg.key, kind)
			return exitNone
		}
		fmt.Fprintf(stderr, "distlock release: nothing released: %v\n", strings.TrimPrefix(err.Error(), "distlock: "))
		return exitNone
	case errors.Is(err, distlock.ErrInvalidKey):
		// A name no lock can have here (on a Cluster, one whose key would
		// have no hash tag): free, as status says, not a Redis error.
		fmt.Fprintf(stderr, "distlock release: nothing released: %v\n", strings.TrimPrefix(err.Error(), "distlock: "))
		return exitNone
	case err != nil:
		return conn.failCall(stderr, "release", err)
	}
	removed.Kind = "lock" // ForceRelease frees plain locks only
	if cfg.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(toJSON(removed))
	} else {
		fmt.Fprintf(stdout, "released %s\n", describe(removed))
	}
	return exitOK
}

// otherHold names the kind of a hold on key that is not a plain lock (a
// read or write hold, a permit, a leadership), "" if none or unknown: a
// force-release finds no plain lock there, but the key is not free.
func otherHold(conn *connection, key string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	infos, _ := conn.locks.List(ctx, globQuote(key))
	for _, in := range infos {
		if in.Key == key && in.Kind != "lock" {
			return in.Kind
		}
	}
	return ""
}

// describe is one line about a lock for release.
func describe(in distlock.LockInfo) string {
	s := fmt.Sprintf("%s: fence %d, holds %d, %s lease left", printable(in.Key), in.Fence, in.Count, shortDuration(in.TTL))
	if !in.Since.IsZero() {
		s += ", taken " + shortDuration(time.Since(in.Since)) + " ago"
	}
	if in.Meta != "" {
		s += ", holder " + printable(in.Meta)
	}
	return s
}

func confirmed(stdin io.Reader) bool {
	line, _ := bufio.NewReader(stdin).ReadString('\n')
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return true
	}
	return false
}

// isTerminal reports whether f is a terminal: a character device other than
// /dev/null, which is what cron and service managers give as stdin.
func isTerminal(f any) bool {
	file, ok := f.(*os.File)
	if !ok {
		return false
	}
	st, err := file.Stat()
	if err != nil || st.Mode()&os.ModeCharDevice == 0 {
		return false
	}
	null, err := os.Stat(os.DevNull)
	return err != nil || !os.SameFile(st, null)
}
