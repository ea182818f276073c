// Command distlock runs commands under distributed locks on Redis, and
// inspects and manages those locks.
//
// Install with
//
//	go install github.com/distlock/distlock/cmd/distlock@latest
//
// and run `distlock --help`; docs/cli.md is the manual. The command is for
// Unix-like systems: it runs the locked command in its own process group,
// and holds the lock in a second process (see link.go).
package main

import (
	"errors"
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
  any      run, elect: the command's own exit status, when it ran and exited
  0        status, release, leader: success
  1        status: no lock matched; release: nothing was released;
           leader: nobody leads; status, leader: stdout could not be
           written (a closed pipe kills them with SIGPIPE instead)
  64       bad usage: unknown flag, missing argument, bad URL or duration,
           a --prefix that distlock refuses; run --limit N while KEY is
           in use with another N; --quorum with --shared, --write,
           --limit, --fair or elect, or with a redis-cluster:// server
           and a --prefix without a hash tag; release --force without a
           terminal and without --yes
  69       Redis unreachable or failing (also after a TLS or ACL error)
  75       run, elect: the lock or leadership was not obtained within --wait
  79       run, elect: the lock or leadership was lost while the command
           ran; it was stopped
  126      run, elect: the command was found but could not be started
  127      run, elect: the command was not found
  128+N    run, elect: the command was killed by signal N
`

const mainUsage = `usage: distlock COMMAND [FLAGS] [ARGS]

distlock runs commands under distributed locks on Redis, and shows and
manages those locks. A lock is a lease that distlock renews while the
command runs; if the lock is lost anyway, the command is stopped, so two
machines never run it at once.

Commands:
  run KEY -- COMMAND [ARGS...]   run COMMAND while holding the lock KEY
                                 (--shared, --write: a read-write lock;
                                 --limit N: N at once; several KEYs)
  elect NAME -- COMMAND [ARGS...]
                                 run COMMAND while leading the election NAME
  leader NAME                    show who leads NAME (--watch: each change)
  status [KEY or PATTERN]        show held locks, read and write holds,
                                 permits and leaders (--json for scripts,
                                 --watch for a live view)
  release --force KEY            delete a lock whoever holds it
  demo                           oversell an inventory with and without a lock
  help [COMMAND]                 show help for distlock or a command
  --version                      print distlock's version

Every command takes --redis URL (default: $DISTLOCK_REDIS_URL, else
redis://localhost:6379). Run 'distlock COMMAND --help' for its flags and
examples, and 'distlock help urls' for the Redis URL forms (TLS, ACL users,
Sentinel, Cluster).

Examples:
  # a cron job that runs on exactly one of many machines each time
  distlock run -n nightly-report -- /usr/local/bin/report --daily
  # at most 4 exports at once
  distlock run --limit 4 exports -- ./export.sh
  # one scheduler among many machines; another takes over if it dies
  distlock elect scheduler -- ./scheduler
  # who holds which lock, now and live
  distlock status
  distlock status --watch
  # free a lock whose holder is known to be dead
  distlock release --force nightly-report

` + exitCodes

func main() {
	code := run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	// run and elect queue their messages (logqueue.go): written out
	// before exit, unless stderr takes no writes for that long.
	flushLogs(exitFlush)
	os.Exit(code)
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, mainUsage)
		return exitUsage
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case runName:
		return cmdRun(rest, stdout, stderr)
	case electName:
		return cmdElect(rest, stdout, stderr)
	case "leader":
		return cmdLeader(rest, stdout, stderr)
	case "status":
		return cmdStatus(rest, stdout, stderr)
	case "release":
		return cmdRelease(rest, stdin, stdout, stderr)
	case "demo":
		return runDemo(rest, stdout, stderr)
	case "demo-worker":
		return runDemoWorker(rest)
	case keeperCmd:
		return runKeeper(rest)
	case execCmd:
		return runExec(rest)
	case "help":
		return cmdHelp(rest, stdout, stderr)
	case "-h", "-help", "--help":
		fmt.Fprint(stdout, mainUsage)
		return exitOK
	case "--version", "-version", "version":
		fmt.Fprintln(stdout, version())
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
	case runName:
		fmt.Fprint(stdout, runUsage)
	case electName:
		fmt.Fprint(stdout, electUsage)
	case "leader":
		fmt.Fprint(stdout, leaderUsage)
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
		fmt.Fprintf(stderr, "distlock help: no help for %q (try run, elect, leader, status, release, demo, urls, exit-codes)\n", args[0])
		return exitUsage
	}
	return exitOK
}

// fail prints err for command name and returns its exit code. A usage
// error ends with where to find the usage, unless it is a refusal: the
// command line was right, the state of Redis refused it.
func fail(stderr io.Writer, name string, err error, code int) int {
	msg := err.Error()
	fmt.Fprintf(stderr, "distlock %s: %s\n", name, msg)
	var r refusal
	if code == exitUsage && !errors.As(err, &r) && !strings.Contains(msg, "--help") {
		fmt.Fprintf(stderr, "Run 'distlock %s --help' for usage.\n", name)
	}
	return code
}
