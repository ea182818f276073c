package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/distlock/distlock"
)

const runUsage = `usage: distlock run [FLAGS] KEY [KEY...] -- COMMAND [ARGS...]

Takes the lock KEY, runs COMMAND while holding it, releases the lock when
COMMAND exits and exits with COMMAND's exit status.

What it takes:
  distlock run KEY               the lock KEY: one run of KEY at a time
  distlock run --shared KEY      a read hold of the read-write lock KEY:
                                 any number of --shared runs at once, but
                                 none while a --write run of KEY runs
  distlock run --write KEY       the write hold of the read-write lock KEY:
                                 alone, against --shared and --write runs
  distlock run --limit N KEY     a permit of the semaphore KEY: at most N
                                 runs of KEY at once (every run of KEY
                                 must give the same N)
  distlock run KEY1 KEY2 ... --  the locks KEY1, KEY2, ...: all or none,
                                 with no deadlock between runs that ask
                                 for overlapping KEYs in any order; losing
                                 any one stops COMMAND
Each is a different lock in Redis even under the same KEY: --shared and
--write runs exclude each other, but neither excludes a plain run of KEY
or a --limit run. Several KEYs are plain locks and need the "--" (without
it the argument after KEY starts COMMAND). See also 'distlock elect'.

The lock is a lease of --ttl that distlock renews every third of the TTL
while COMMAND runs, so a machine that dies frees it within --ttl. If the
lock is lost anyway (Redis unreachable for a whole lease, or the lock
force-released), COMMAND gets SIGTERM, then SIGKILL after --grace, and
distlock exits with status 79. If distlock itself dies, by any signal
(kill -9, the OOM killer), COMMAND's process group is killed at once and
only then is the lock released. So COMMAND never goes on running unlocked,
except for the --grace you allow it after a loss.

On a terminal COMMAND runs in the foreground, as under flock(1): it reads
the terminal, and Ctrl-C and Ctrl-Z reach it; a job suspended with Ctrl-Z
keeps its lock and resumes with fg. SIGINT, SIGTERM, SIGHUP and SIGQUIT
sent to distlock itself (kill, a service manager) are passed on to COMMAND;
SIGHUP and SIGINT that distlock was started with ignored (nohup) stay
ignored, by COMMAND too.
The lock is released after COMMAND has exited, and with it every process it
left running in its process group (a script's background jobs), as those
would keep a flock(1) lock they inherit.

COMMAND runs in its own process group, with distlock's stdin, stdout and
stderr, and with these variables in its environment:
  DISTLOCK_KEY     the lock's name (several KEYs: their names, as given,
                   separated by spaces)
  DISTLOCK_FENCE   fencing token: larger than that of every earlier holder
                   of KEY (for --shared and --limit: of every earlier
                   --write holder); hand it to what you protect so that it
                   can refuse a late write from an earlier holder.
                   Several KEYs: one per KEY, in the order of DISTLOCK_KEY
  DISTLOCK_TOKEN   random token identifying this grant of the lock (several
                   KEYs: one per KEY, likewise)
A second distlock process (the lock keeper, in its own session) holds the
lock meanwhile, so that it is renewed while the job is suspended and
COMMAND is killed if distlock is.

Flags (anywhere before --):
  -w, --wait DURATION
                    how long to wait while another holds the lock; 0
                    gives up at once. Default: wait forever.
  -n                same as --wait 0 (like flock -n)
  --shared          take a read hold of the read-write lock KEY (above)
  --write           take the write hold of the read-write lock KEY
  --limit N         take one of N permits of the semaphore KEY
  --ttl DURATION    lease; bounds how long a dead holder blocks others
                    (default 10s, at least ` + minTTLText + `)
  --grace DURATION  time from SIGTERM to SIGKILL after the lock is lost
                    (default 5s)
  --fair            wait in line: a freed lock goes to the --fair process
                    that has waited longest (use it on every run of KEY)
  --quorum          take the lock on a majority of independent Redis
                    servers (Redlock), given as several --redis (at
                    least 3) or as space-separated URLs in
                    DISTLOCK_REDIS_URL; it survives the loss of a minority.
                    Plain locks only (one KEY or several): not with
                    --shared, --write or --limit (status 64)
  --owner ID        reentrant lock: a lock held under the same ID, by any
                    process, is taken again instead of waited for (plain
                    locks only)
  --meta TEXT       added to the holder metadata that status shows
                    (default metadata: host=HOST pid=PID cmd=COMMAND)
  -v, --verbose     report on stderr who holds KEY while waiting (on a
                    terminal also for how long), and when the lock is
                    taken and released; with it the library also reports
                    renewals that got no answer and the cause of a loss
  --log-format text|json
                    json: every message distlock itself writes on stderr
                    (the ones above, waiting, loss, stop and warnings) is
                    one JSON object per line: time, level, msg, event,
                    key, and the event's fields (fence, cause, command,
                    grace, ...; durations in nanoseconds). Default text.
DURATION is a Go duration (500ms, 30s, 5m, 1h30m) or plain seconds (2.5).

` + connHelp + `
Examples:
  # crontab on every machine: the report runs once per night, on one of them
  0 2 * * * distlock run -n nightly-report -- /usr/local/bin/report
  # wait up to 10 minutes for a deploy slot, keep the lock alive meanwhile
  distlock run deploy:prod --wait 10m -- ./deploy.sh v1.4.2
  # an interactive session under the lock (Ctrl-Z and fg work)
  distlock run db-console -- psql mydb
  # pass the fence to the resource
  distlock run db-migrate -- sh -c 'migrate --fence "$DISTLOCK_FENCE"'
  # backups read the catalog together; a migration changes it alone
  distlock run --shared catalog -- ./backup.sh
  distlock run --write catalog -- ./migrate.sh
  # at most 4 exports at once across all machines
  distlock run --limit 4 exports -- ./export.sh
  # a transfer that needs both accounts
  distlock run account:9 account:3 -- ./transfer.sh 9 3
  # several machines, a TLS server with an ACL user, password from the env
  export DISTLOCK_REDIS_URL='rediss://cron:s3cret@redis.internal:6380'
  distlock run --tls-ca /etc/ssl/redis-ca.pem -n cleanup -- ./cleanup
  # machine-readable messages for a log collector
  distlock run --log-format json -n cleanup -- ./cleanup 2>> /var/log/cleanup.jsonl

Exit status: COMMAND's, or 64 usage (also --limit N while KEY is in use
with another N, and --quorum with --shared, --write, --limit or --fair), 69 Redis
error, 75 not obtained within --wait, 79 lock lost while COMMAND ran, 126
COMMAND cannot be started, 127 COMMAND not found, 128+N COMMAND killed by
signal N.
`

// minTTL is the shortest --ttl: distlock renews every third of the TTL, and
// a lease much shorter than this is lost to a single slow round trip to
// Redis or a scheduling delay on a busy machine.
const (
	minTTL     = 500 * time.Millisecond
	minTTLText = "500ms"
)

// runConfig is a parsed `distlock run` or `distlock elect` command line.
type runConfig struct {
	name    string // "run" or "elect": the command, for messages
	conn    connFlags
	keys    []string // the KEYs as given, or elect's NAME
	key     string   // keys, space-separated: DISTLOCK_KEY, and "key" in JSON messages
	mode    holdMode
	limit   int    // --limit N
	value   string // elect --value; "" for HOST:PID
	command []string
	wait    time.Duration // < 0: forever
	ttl     time.Duration
	grace   time.Duration
	owner   string
	meta    string
	fair    bool
	quorum  bool
	verbose bool
	logs    logFormat
}

// runFlags are the flags that check turns into runConfig fields.
type runFlags struct {
	wait, ttl, grace durationFlag
	shared, write    bool
	limit            int
}

// flagSet registers the flags of cfg.name on a new flag set.
func (cfg *runConfig) flagSet() (*flag.FlagSet, *runFlags) {
	f := &runFlags{
		wait:  durationFlag{d: -1, forever: true},
		ttl:   durationFlag{d: distlock.DefaultTTL},
		grace: durationFlag{d: 5 * time.Second},
	}
	fs := newFlagSet(cfg.name)
	cfg.conn.register(fs)
	fs.Var(&f.wait, "wait", "")
	fs.Var(&f.wait, "w", "")
	fs.Var(zeroFlag{&f.wait}, "n", "") // refused by elect, with the reason
	fs.Var(&f.ttl, "ttl", "")
	fs.Var(&f.grace, "grace", "")
	fs.BoolVar(&cfg.fair, "fair", false, "")
	fs.BoolVar(&cfg.quorum, "quorum", false, "")
	fs.BoolVar(&cfg.verbose, "verbose", false, "")
	fs.BoolVar(&cfg.verbose, "v", false, "")
	fs.Var(&cfg.logs, "log-format", "")
	if cfg.name == electName {
		fs.StringVar(&cfg.value, "value", "", "")
		return fs, f
	}
	// A leadership has no owner, metadata other than its value, or modes.
	fs.StringVar(&cfg.owner, "owner", "", "")
	fs.StringVar(&cfg.meta, "meta", "", "")
	fs.BoolVar(&f.shared, "shared", false, "")
	fs.BoolVar(&f.write, "write", false, "")
	fs.IntVar(&f.limit, "limit", 0, "")
	return fs, f
}

// parseRunArgs parses the arguments after "run", or after "elect" if name
// says so. Flags may come anywhere before "--". The KEYs are the arguments
// before "--" that are not flags; but without a "--" that ends the flags,
// the first argument after KEY that is not a flag starts COMMAND
// ("run k sh -c 'exit 3'"). With an error it returns the config as far as
// it was read, so that the error can be reported in the --log-format asked
// for (if that came before the error).
func parseRunArgs(name string, args []string) (*runConfig, error) {
	cfg := &runConfig{name: name, logs: logText}
	fs, f := cfg.flagSet()
	started := false // the argument after KEY started COMMAND
	pos, rest, err := parseInterspersed(fs, args, func(pos, left []string) bool {
		started = len(pos) == 2 && !flagsEndAhead(name, left)
		return started
	})
	if err == nil {
		err = cfg.check(fs, f, pos, rest, started)
	}
	return cfg, err
}

// flagsEndAhead tells whether left, the arguments after a second positional
// argument, are flags and KEYs up to a "--", which then ends distlock's
// flags: "run a b --wait 0 -- cmd" takes a and b. Otherwise the second
// positional argument starts COMMAND, as it always has ("run k sh -c x --
// y" runs sh: -c is no flag of distlock's).
func flagsEndAhead(name string, left []string) bool {
	fs, _ := (&runConfig{name: name}).flagSet()
	_, rest, err := parseInterspersed(fs, left, nil)
	return err == nil && rest != nil
}

// synopsis is the command line of cfg.name, for usage errors.
func (cfg *runConfig) synopsis() string {
	if cfg.name == electName {
		return "distlock elect [FLAGS] NAME -- COMMAND [ARGS...]"
	}
	return "distlock run [FLAGS] KEY [KEY...] -- COMMAND [ARGS...]"
}

// check completes cfg from what parseRunArgs parsed, or says what is wrong.
func (cfg *runConfig) check(fs *flag.FlagSet, f *runFlags, pos, rest []string, started bool) error {
	what := "KEY"
	if cfg.name == electName {
		what = "NAME"
	}
	switch {
	case len(pos) == 0 && rest != nil:
		return usagef("missing %s before --: %s", what, cfg.synopsis())
	case len(pos) == 0:
		return usagef("missing %s and COMMAND: %s", what, cfg.synopsis())
	case started:
		cfg.keys, cfg.command = pos[:1], append([]string{pos[1]}, rest...)
	default:
		cfg.keys, cfg.command = pos, rest
	}
	cfg.key = strings.Join(cfg.keys, " ")
	if len(cfg.command) == 0 {
		return usagef("missing COMMAND after %s %q: %s", what, cfg.key, cfg.synopsis())
	}
	cfg.wait, cfg.ttl, cfg.grace = f.wait.d, f.ttl.d, f.grace.d
	for _, k := range cfg.keys {
		if k == "" || len(k) > distlock.MaxKeyLen {
			return usagef("%s must be 1 to %d bytes", what, distlock.MaxKeyLen)
		}
	}
	if err := cfg.checkMode(fs, f); err != nil {
		return err
	}
	if ttl, grace := f.ttl, f.grace; ttl.forever || grace.forever {
		return usagef("--ttl and --grace need a duration")
	}
	if cfg.ttl < minTTL || cfg.ttl > distlock.MaxTTL {
		return usagef("--ttl %v: must be at least %s (the lease is renewed every third of it, and a shorter one is lost to one slow round trip) and at most %v",
			cfg.ttl, minTTLText, distlock.MaxTTL)
	}
	if isSet(fs, "owner") && cfg.owner == "" {
		return usagef("--owner needs a non-empty ID")
	}
	return nil
}

func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// cmdRun is `distlock run`: the process the user started. It leaves the
// lock to a keeper process (keeper.go) and runs COMMAND itself (job.go),
// so that COMMAND can be part of the terminal's job while the lock lives
// outside it.
func cmdRun(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseRunArgs(runName, args)
	if errors.Is(err, errHelp) {
		fmt.Fprint(stdout, runUsage)
		return exitOK
	}
	if err != nil {
		return newRunLog(cfg.logs, runName, "", stderr).fail(err, exitUsage)
	}
	return front(cfg, args, newRunLog(cfg.logs, runName, cfg.key, stderr))
}
