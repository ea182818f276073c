// Command distlock runs commands under distributed locks on Redis, and
// inspects and manages those locks.
//
// Install with
//
//	go install github.com/distlock/distlock/cmd/distlock@latest
//
// and run `distlock --help`. The command is for Unix-like systems: it runs
// the locked command in its own process group.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// Exit codes. The child's own exit code passes through `run`, so distlock's
// codes sit where commands rarely exit: the sysexits(3) range and, for a
// command that cannot be started, the shell's 126 and 127.
const (
	exitOK          = 0
	exitNone        = 1   // status: no lock matched; release: nothing released
	exitUsage       = 64  // bad usage (EX_USAGE)
	exitRedis       = 69  // Redis unreachable or failing (EX_UNAVAILABLE)
	exitNotObtained = 75  // lock not obtained within --wait (EX_TEMPFAIL)
	exitLost        = 79  // lock lost while the command ran
	exitCannotRun   = 126 // command found but could not be started
	exitNotFound    = 127 // command not found
)

const exitCodes = `Exit status:
  0-63     run: the command's own exit status; other commands: 0 on success
  1        status: no lock matched; release: nothing was released
  64       bad usage: unknown flag, missing argument, bad URL or duration
  69       Redis unreachable or failing (also after a TLS or ACL error)
  75       run: the lock was not obtained within --wait (held by another)
  79       run: the lock was lost while the command ran; it was stopped
  126      run: the command was found but could not be started
  127      run: the command was not found
  128+N    run: the command was killed by signal N
`

const mainUsage = `usage: distlock COMMAND [FLAGS] [ARGS]

distlock runs commands under distributed locks on Redis, and shows and
manages those locks. A lock is a lease that distlock renews while the
command runs; if the lock is lost anyway, the command is stopped, so two
machines never run it at once.

Commands:
  run KEY -- COMMAND [ARGS...]   run COMMAND while holding the lock KEY
  status [KEY or PATTERN]        show held locks (--json for scripts)
  release --force KEY            delete a lock whoever holds it
  demo                           oversell an inventory with and without a lock
  help [COMMAND]                 show help for distlock or a command

Every command takes --redis URL (default: $DISTLOCK_REDIS_URL, else
redis://localhost:6379). Run 'distlock COMMAND --help' for its flags and
examples, and 'distlock help urls' for the Redis URL forms (TLS, ACL users,
Sentinel, Cluster).

Examples:
  # a cron job that runs on exactly one of many machines each time
  distlock run --wait 0 nightly-report -- /usr/local/bin/report --daily
  # who holds which lock
  distlock status
  # free a lock whose holder is known to be dead
  distlock release --force nightly-report

` + exitCodes

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, mainUsage)
		return exitUsage
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "run":
		return cmdRun(rest, stdout, stderr)
	case "status":
		return cmdStatus(rest, stdout, stderr)
	case "release":
		return cmdRelease(rest, stdin, stdout, stderr)
	case "demo":
		return runDemo(rest, stdout, stderr)
	case "demo-worker":
		return runDemoWorker(rest)
	case "help":
		return cmdHelp(rest, stdout, stderr)
	case "-h", "-help", "--help":
		fmt.Fprint(stdout, mainUsage)
		return exitOK
	}
	fmt.Fprintf(stderr, "distlock: unknown command %q\nRun 'distlock --help' for the list of commands.\n", cmd)
	return exitUsage
}

func cmdHelp(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stdout, mainUsage)
		return exitOK
	}
	switch args[0] {
	case "run":
		fmt.Fprint(stdout, runUsage)
	case "status":
		fmt.Fprint(stdout, statusUsage)
	case "release":
		fmt.Fprint(stdout, releaseUsage)
	case "demo":
		fmt.Fprint(stdout, demoUsage)
	case "urls", "url":
		fmt.Fprint(stdout, urlForms)
	case "exit", "exit-codes":
		fmt.Fprint(stdout, exitCodes)
	default:
		fmt.Fprintf(stderr, "distlock help: no help for %q (try run, status, release, demo, urls, exit-codes)\n", args[0])
		return exitUsage
	}
	return exitOK
}

// errHelp is returned by the parse functions when --help was asked for.
var errHelp = flag.ErrHelp

// usageError is bad usage: its message says what was wrong.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{fmt.Sprintf(format, args...)}
}

// parseInterspersed parses fs over args, allowing flags after positional
// arguments ("status job --json"), up to "--" or until stop says the
// positional arguments so far are complete; it returns the positional
// arguments and what follows them unparsed.
func parseInterspersed(fs *flag.FlagSet, args []string, stop func(pos []string) bool) (pos, rest []string, err error) {
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, nil, errHelp
			}
			return nil, nil, &usageError{err.Error()}
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil, nil
		}
		if args[0] == "--" {
			return pos, args[1:], nil
		}
		pos = append(pos, args[0])
		args = args[1:]
		if stop != nil && stop(pos) {
			return pos, args, nil
		}
	}
}

// newFlagSet returns a flag set that reports errors to the caller instead
// of printing them.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// fail prints err for command name and returns its exit code.
func fail(stderr io.Writer, name string, err error, code int) int {
	msg := err.Error()
	fmt.Fprintf(stderr, "distlock %s: %s\n", name, msg)
	if code == exitUsage && !strings.Contains(msg, "--help") {
		fmt.Fprintf(stderr, "Run 'distlock %s --help' for usage.\n", name)
	}
	return code
}
