package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/distlock/distlock"
)

const runUsage = `usage: distlock run [FLAGS] KEY -- COMMAND [ARGS...]

Takes the lock KEY, runs COMMAND while holding it, releases the lock when
COMMAND exits and exits with COMMAND's exit status.

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
sent to distlock itself (kill, a service manager) are passed on to COMMAND.
The lock is released after COMMAND has exited.

COMMAND runs in its own process group, with distlock's stdin, stdout and
stderr, and with these variables in its environment:
  DISTLOCK_KEY     the lock's name
  DISTLOCK_FENCE   fencing token: larger than that of every earlier holder
                   of KEY; hand it to what you protect so that it can refuse
                   a late write from an earlier holder
  DISTLOCK_TOKEN   random token identifying this grant of the lock
A second distlock process (the lock keeper, in its own session) holds the
lock meanwhile, so that it is renewed while the job is suspended and
COMMAND is killed if distlock is.

Flags (anywhere before --):
  -w, --wait DURATION
                    how long to wait while another holds the lock; 0
                    gives up at once. Default: wait forever.
  -n                same as --wait 0 (like flock -n)
  --ttl DURATION    lease; bounds how long a dead holder blocks others
                    (default 10s, at least ` + minTTLText + `)
  --grace DURATION  time from SIGTERM to SIGKILL after the lock is lost
                    (default 5s)
  --fair            wait in line: a freed lock goes to the --fair process
                    that has waited longest (use it on every run of KEY)
  --quorum          take the lock on a majority of independent Redis
                    servers (Redlock), given as several --redis (at
                    least 3) or as space-separated URLs in
                    DISTLOCK_REDIS_URL; it survives the loss of a minority
  --owner ID        reentrant lock: a lock held under the same ID, by any
                    process, is taken again instead of waited for
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
  # several machines, a TLS server with an ACL user, password from the env
  export DISTLOCK_REDIS_URL='rediss://cron:s3cret@redis.internal:6380'
  distlock run --tls-ca /etc/ssl/redis-ca.pem -n cleanup -- ./cleanup
  # machine-readable messages for a log collector
  distlock run --log-format json -n cleanup -- ./cleanup 2>> /var/log/cleanup.jsonl

Exit status: COMMAND's, or 64 usage, 69 Redis error, 75 not obtained
within --wait, 79 lock lost while COMMAND ran, 126 COMMAND cannot be
started, 127 COMMAND not found, 128+N COMMAND killed by signal N.
`

// minTTL is the shortest --ttl: distlock renews every third of the TTL, and
// a lease much shorter than this is lost to a single slow round trip to
// Redis or a scheduling delay on a busy machine.
const (
	minTTL     = 500 * time.Millisecond
	minTTLText = "500ms"
)

// runConfig is a parsed `distlock run` command line.
type runConfig struct {
	conn    connFlags
	key     string
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

// parseRunArgs parses the arguments after "run". Flags may come anywhere
// before "--"; without "--", the first argument after KEY that is not a
// flag starts COMMAND ("run k sh -c 'exit 3'"). With an error it returns
// the config as far as it was read, so that the error can be reported in the
// --log-format asked for (if that came before the error).
func parseRunArgs(args []string) (*runConfig, error) {
	cfg := &runConfig{logs: logText}
	fs := newFlagSet("run")
	cfg.conn.register(fs)
	wait := durationFlag{d: -1, forever: true}
	ttl := durationFlag{d: distlock.DefaultTTL}
	grace := durationFlag{d: 5 * time.Second}
	fs.Var(&wait, "wait", "")
	fs.Var(&wait, "w", "")
	fs.Var(zeroFlag{&wait}, "n", "")
	fs.Var(&ttl, "ttl", "")
	fs.Var(&grace, "grace", "")
	fs.StringVar(&cfg.owner, "owner", "", "")
	fs.StringVar(&cfg.meta, "meta", "", "")
	fs.BoolVar(&cfg.fair, "fair", false, "")
	fs.BoolVar(&cfg.quorum, "quorum", false, "")
	fs.BoolVar(&cfg.verbose, "verbose", false, "")
	fs.BoolVar(&cfg.verbose, "v", false, "")
	fs.Var(&cfg.logs, "log-format", "")
	pos, rest, err := parseInterspersed(fs, args, func(pos []string) bool { return len(pos) == 2 })
	if err == nil {
		err = cfg.check(fs, pos, rest, wait, ttl, grace)
	}
	return cfg, err
}

// check completes cfg from what parseRunArgs parsed, or says what is wrong.
func (cfg *runConfig) check(fs *flag.FlagSet, pos, rest []string, wait, ttl, grace durationFlag) error {
	switch len(pos) {
	case 0:
		if rest != nil {
			return usagef("missing KEY before --: distlock run [FLAGS] KEY -- COMMAND [ARGS...]")
		}
		return usagef("missing KEY and COMMAND: distlock run [FLAGS] KEY -- COMMAND [ARGS...]")
	case 1:
		cfg.command = rest
	case 2:
		cfg.command = append([]string{pos[1]}, rest...)
	}
	cfg.key = pos[0]
	if len(cfg.command) == 0 {
		return usagef("missing COMMAND after KEY %q: distlock run [FLAGS] KEY -- COMMAND [ARGS...]", cfg.key)
	}
	cfg.wait, cfg.ttl, cfg.grace = wait.d, ttl.d, grace.d
	if cfg.key == "" || len(cfg.key) > distlock.MaxKeyLen {
		return usagef("KEY must be 1 to %d bytes", distlock.MaxKeyLen)
	}
	if ttl.forever || grace.forever {
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

// lockOptions are the options of the lock that cfg asks for, held on
// behalf of the distlock run process pid.
func (cfg *runConfig) lockOptions(pid int) []distlock.Option {
	opts := []distlock.Option{distlock.WithTTL(cfg.ttl), distlock.WithMetadata(cfg.metadata(pid))}
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
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	cmd := filepath.Base(cfg.command[0])
	if len(cmd) > 200 {
		cmd = cmd[:200]
	}
	meta := "host=" + host + " pid=" + strconv.Itoa(pid) + " cmd=" + strings.ReplaceAll(cmd, " ", "_")
	if cfg.meta != "" {
		meta += " " + cfg.meta
	}
	if len(meta) > 4096 {
		meta = meta[:4096]
	}
	return meta
}

// cmdRun is `distlock run`: the process the user started. It leaves the
// lock to a keeper process (keeper.go) and runs COMMAND itself (job.go),
// so that COMMAND can be part of the terminal's job while the lock lives
// outside it.
func cmdRun(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseRunArgs(args)
	if errors.Is(err, errHelp) {
		fmt.Fprint(stdout, runUsage)
		return exitOK
	}
	if err != nil {
		return newRunLog(cfg.logs, "", stderr).fail(err, exitUsage)
	}
	return front(cfg, args, newRunLog(cfg.logs, cfg.key, stderr))
}
