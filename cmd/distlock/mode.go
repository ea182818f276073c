package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unicode"

	"github.com/distlock/distlock"
)

// Commands that hold something while COMMAND runs: they share the runner,
// the keeper and the shim.
const (
	runName   = "run"
	electName = "elect"
)

// holdMode is what `distlock run` or `distlock elect` holds while COMMAND
// runs. Each is a different primitive of the library, with its own keys in
// Redis: a plain lock KEY and the read-write lock KEY are two locks that
// do not exclude each other.
type holdMode int

const (
	holdLock   holdMode = iota // a plain lock (several KEYs: all of them)
	holdRead                   // --shared: a read hold of the read-write lock KEY
	holdWrite                  // --write: the write hold of the read-write lock KEY
	holdPermit                 // --limit N: a permit of the semaphore KEY
	holdLeader                 // elect: the leadership of the election NAME
)

// checkMode sets cfg.mode from the flags and refuses what does not go
// together.
func (cfg *runConfig) checkMode(fs *flag.FlagSet, f *runFlags) error {
	if cfg.name == electName {
		cfg.mode = holdLeader
		if len(cfg.keys) > 1 {
			return usagef("elect takes one NAME, got %d before --: %q", len(cfg.keys), cfg.keys)
		}
		if f.wait.d == 0 {
			// The library's Campaign has no try-once form.
			return usagef("-n, --wait 0: a campaign cannot give up at once; give a duration, or leave --wait out to wait for the leadership as long as it takes")
		}
		if isSet(fs, "value") && (cfg.value == "" || len(cfg.value) > maxValueLen) {
			return usagef("--value must be 1 to %d bytes", maxValueLen)
		}
		return nil
	}
	switch {
	case f.shared && f.write:
		return usagef("--shared and --write exclude each other: --shared takes a read hold of the read-write lock KEY, --write its write hold")
	case isSet(fs, "limit") && (f.shared || f.write):
		return usagef("--limit (a semaphore) does not go with --shared or --write (a read-write lock)")
	case isSet(fs, "limit") && f.limit < 1:
		return usagef("--limit %d: at least 1 run at once", f.limit)
	case f.shared:
		cfg.mode = holdRead
	case f.write:
		cfg.mode = holdWrite
	case isSet(fs, "limit"):
		cfg.mode, cfg.limit = holdPermit, f.limit
	}
	if cfg.mode != holdLock && len(cfg.keys) > 1 {
		return usagef("%s takes one KEY; several KEYs are plain locks, taken all or none", cfg.modeFlag())
	}
	if cfg.mode != holdLock && isSet(fs, "owner") {
		return usagef("--owner (a reentrant lock) is for plain locks, not with %s", cfg.modeFlag())
	}
	if len(cfg.keys) > 1 {
		seen := map[string]bool{}
		for _, k := range cfg.keys {
			if strings.IndexFunc(k, unicode.IsSpace) >= 0 {
				return usagef("KEY %q: with several KEYs, no KEY may contain white space (DISTLOCK_KEY lists them separated by spaces)", k)
			}
			if seen[k] {
				return usagef("KEY %q given twice", k)
			}
			seen[k] = true
		}
	}
	return nil
}

// maxValueLen is the longest elect --value: the library's metadata limit.
const maxValueLen = 4096

// modeFlag is the flag that chose cfg.mode.
func (cfg *runConfig) modeFlag() string {
	switch cfg.mode {
	case holdRead:
		return "--shared"
	case holdWrite:
		return "--write"
	case holdPermit:
		return "--limit"
	}
	return ""
}

// quoted is the KEYs, quoted, for messages: "k", or "a", "b".
func (cfg *runConfig) quoted() string {
	q := make([]string, len(cfg.keys))
	for i, k := range cfg.keys {
		q[i] = strconv.Quote(k)
	}
	return strings.Join(q, ", ")
}

// subject names what is held, for messages: lock "k", read hold of "k", ...
func (cfg *runConfig) subject() string {
	switch cfg.mode {
	case holdRead:
		return "read hold of " + cfg.quoted()
	case holdWrite:
		return "write hold of " + cfg.quoted()
	case holdPermit:
		return "permit of " + cfg.quoted()
	case holdLeader:
		return "leadership of " + cfg.quoted()
	}
	if len(cfg.keys) > 1 {
		return "locks " + cfg.quoted()
	}
	return "lock " + cfg.quoted()
}

// label names what is held where a plain lock is named by its key alone
// ("took "k"", "released "k"", as before there were other modes).
func (cfg *runConfig) label() string {
	if cfg.mode == holdLock {
		return cfg.quoted()
	}
	return cfg.subject()
}

// lockOptions are the options of what cfg asks for, held on behalf of the
// runner, process pid.
func (cfg *runConfig) lockOptions(pid int) []distlock.Option {
	opts := []distlock.Option{distlock.WithTTL(cfg.ttl)}
	if cfg.mode != holdLeader { // a leadership's metadata is its value
		opts = append(opts, distlock.WithMetadata(cfg.metadata(pid)))
	}
	if cfg.owner != "" {
		opts = append(opts, distlock.WithOwner(cfg.owner))
	}
	if cfg.fair {
		opts = append(opts, distlock.WithFair())
	}
	return opts
}

// metadata is what status shows about this holder; pid is that of the
// distlock run process the user started (not the keeper's).
func (cfg *runConfig) metadata(pid int) string {
	cmd := filepath.Base(cfg.command[0])
	if len(cmd) > 200 {
		cmd = cmd[:200]
	}
	meta := "host=" + hostname() + " pid=" + strconv.Itoa(pid) + " cmd=" + strings.ReplaceAll(cmd, " ", "_")
	if cfg.meta != "" {
		meta += " " + cfg.meta
	}
	if len(meta) > 4096 {
		meta = meta[:4096]
	}
	return meta
}

// leaderValue is what elect campaigns with: --value, or HOST:PID of the
// runner, which tells an operator where the leader runs.
func (cfg *runConfig) leaderValue(pid int) string {
	if cfg.value != "" {
		return cfg.value
	}
	return hostname() + ":" + strconv.Itoa(pid)
}

func hostname() string {
	host, err := os.Hostname()
	if err != nil {
		return "unknown"
	}
	return host
}

// fenceText is the fences of h for messages: "fence 5", "fences 5 7",
// "term 5".
func (cfg *runConfig) fenceText(h *held) string {
	switch {
	case cfg.mode == holdLeader:
		return "term " + h.fenceList(" ")
	case len(h.fences) > 1:
		return "fences " + h.fenceList(" ")
	}
	return "fence " + h.fenceList(" ")
}

// takenText is the -v message once cfg's hold is taken.
func (cfg *runConfig) takenText(h *held) string {
	switch cfg.mode {
	case holdLeader:
		return fmt.Sprintf("leading %s (%s)", cfg.quoted(), cfg.fenceText(h))
	case holdPermit:
		return fmt.Sprintf("took a %s (limit %d, %s)", cfg.subject(), cfg.limit, cfg.fenceText(h))
	}
	return fmt.Sprintf("took %s (%s)", cfg.label(), cfg.fenceText(h))
}
