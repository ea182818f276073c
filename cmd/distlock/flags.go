package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// errHelp is returned by the parse functions when --help was asked for.
var errHelp = flag.ErrHelp

// usageError is bad usage: its message says what was wrong.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{fmt.Sprintf(format, args...)}
}

// newFlagSet returns a flag set that reports errors to the caller instead
// of printing them.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// parseInterspersed parses fs over args, allowing flags after positional
// arguments ("status job --json"), up to "--" or until stop says the
// positional arguments so far are complete (given them and the arguments
// left after them); it returns the positional arguments and what follows
// them unparsed. rest is nil unless "--" ended the flags (then it is what
// followed "--", possibly empty).
func parseInterspersed(fs *flag.FlagSet, args []string, stop func(pos, left []string) bool) (pos, rest []string, err error) {
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, nil, errHelp
			}
			return nil, nil, flagError(err)
		}
		left := fs.Args()
		if endedByDashDash(fs, args, len(args)-len(left)) {
			return pos, append([]string{}, left...), nil
		}
		if len(left) == 0 {
			return pos, nil, nil
		}
		pos = append(pos, left[0])
		args = left[1:]
		if stop != nil && stop(pos, args) {
			return pos, args, nil
		}
	}
}

// endedByDashDash tells whether the last of the n arguments that fs.Parse
// consumed was the "--" that ends the flags (the flag package drops it
// silently) rather than the value of a flag ("--meta --").
func endedByDashDash(fs *flag.FlagSet, args []string, n int) bool {
	if n == 0 || args[n-1] != "--" {
		return false
	}
	if n == 1 {
		return true
	}
	prev := args[n-2]
	if !strings.HasPrefix(prev, "-") || strings.Contains(prev, "=") {
		return true
	}
	f := fs.Lookup(strings.TrimLeft(prev, "-"))
	if f == nil {
		return true
	}
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// flagError rewrites the flag package's messages, which spell flags "-wait",
// in the "--wait" spelling of the help and the docs (one-letter flags keep
// one dash: "-w").
func flagError(err error) error {
	msg := err.Error()
	spell := func(name string) string {
		name = strings.TrimLeft(name, "-")
		if len(name) == 1 {
			return "-" + name
		}
		return "--" + name
	}
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: "); ok {
		return usagef("unknown flag %s", spell(name))
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: "); ok {
		return usagef("%s needs a value", spell(name))
	}
	// invalid value "soon" for flag -wait: bad duration ...
	// invalid boolean value "x" for -json: parse error
	for _, marker := range []string{" for flag -", " for -"} {
		if i := strings.Index(msg, marker); i >= 0 && strings.HasPrefix(msg, "invalid ") {
			name, reason, _ := strings.Cut(msg[i+len(marker):], ": ")
			return usagef("%s for %s: %s", msg[:i], spell(name), reason)
		}
	}
	return &usageError{msg}
}

// durationFlag is a Go duration or plain (fractional) seconds.
type durationFlag struct {
	d       time.Duration
	forever bool // unset and meaning "no limit"
}

func (f *durationFlag) String() string {
	if f.forever {
		return "forever"
	}
	return f.d.String()
}

func (f *durationFlag) Set(s string) error {
	d, err := parseDuration(s)
	if err != nil {
		return err
	}
	f.d, f.forever = d, false
	return nil
}

// zeroFlag is a boolean flag that sets a durationFlag to 0: -n for
// --wait 0, as in flock(1).
type zeroFlag struct{ target *durationFlag }

func (f zeroFlag) String() string   { return "false" }
func (f zeroFlag) IsBoolFlag() bool { return true }

func (f zeroFlag) Set(s string) error {
	on, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	if on {
		f.target.d, f.target.forever = 0, false
	}
	return nil
}

func parseDuration(s string) (time.Duration, error) {
	if secs, err := strconv.ParseFloat(s, 64); err == nil {
		if secs < 0 || secs > float64(100*365*24*time.Hour/time.Second) || secs != secs {
			return 0, fmt.Errorf("duration %q out of range", s)
		}
		return time.Duration(secs * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("bad duration %q: want e.g. 500ms, 30s, 5m or plain seconds", s)
	}
	if d < 0 {
		return 0, fmt.Errorf("negative duration %q", s)
	}
	return d, nil
}
