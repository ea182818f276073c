package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
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
distlock exits with status 79: COMMAND never goes on running unlocked.

COMMAND runs in its own process group with distlock's stdin, stdout and
stderr, and with these variables in its environment:
  DISTLOCK_KEY     the lock's name
  DISTLOCK_FENCE   fencing token: larger than that of every earlier holder
                   of KEY; hand it to what you protect so that it can refuse
                   a late write from an earlier holder
  DISTLOCK_TOKEN   random token identifying this grant of the lock
SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to distlock are passed on to
COMMAND's process group; the lock is released after COMMAND has exited.

Flags:
  --wait DURATION   how long to wait while another holds the lock; 0 gives
                    up at once (like flock -n). Default: wait forever.
  --ttl DURATION    lease; bounds how long a dead holder blocks others
                    (default 10s)
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
  -v, --verbose     report on stderr when the lock is taken and released
DURATION is a Go duration (500ms, 30s, 5m, 1h30m) or plain seconds (2.5).

` + connHelp + `
Examples:
  # crontab on every machine: the report runs once per night, on one of them
  0 2 * * * distlock run --wait 0 nightly-report -- /usr/local/bin/report
  # wait up to 10 minutes for a deploy slot, keep the lock alive meanwhile
  distlock run --wait 10m deploy:prod -- ./deploy.sh v1.4.2
  # pass the fence to the resource
  distlock run db-migrate -- sh -c 'migrate --fence "$DISTLOCK_FENCE"'
  # several machines, a TLS server with an ACL user, password from the env
  export DISTLOCK_REDIS_URL='rediss://cron:s3cret@redis.internal:6380'
  distlock run --tls-ca /etc/ssl/redis-ca.pem --wait 0 cleanup -- ./cleanup

Exit status: COMMAND's, or 64 usage, 69 Redis error, 75 not obtained
within --wait, 79 lock lost while COMMAND ran, 126 COMMAND cannot be
started, 127 COMMAND not found, 128+N COMMAND killed by signal N.
`

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
}

// parseRunArgs parses the arguments after "run".
func parseRunArgs(args []string) (*runConfig, error) {
	cfg := &runConfig{}
	fs := newFlagSet("run")
	cfg.conn.register(fs)
	wait := durationFlag{d: -1, forever: true}
	ttl := durationFlag{d: distlock.DefaultTTL}
	grace := durationFlag{d: 5 * time.Second}
	fs.Var(&wait, "wait", "")
	fs.Var(&ttl, "ttl", "")
	fs.Var(&grace, "grace", "")
	fs.StringVar(&cfg.owner, "owner", "", "")
	fs.StringVar(&cfg.meta, "meta", "", "")
	fs.BoolVar(&cfg.fair, "fair", false, "")
	fs.BoolVar(&cfg.quorum, "quorum", false, "")
	fs.BoolVar(&cfg.verbose, "verbose", false, "")
	fs.BoolVar(&cfg.verbose, "v", false, "")
	pos, rest, err := parseInterspersed(fs, args, func(pos []string) bool { return len(pos) == 1 })
	if err != nil {
		return nil, err
	}
	if len(pos) == 0 {
		return nil, usagef("missing KEY and COMMAND: distlock run [FLAGS] KEY -- COMMAND [ARGS...]")
	}
	cfg.key = pos[0]
	if len(rest) > 0 && rest[0] == "--" {
		rest = rest[1:]
	}
	if len(rest) == 0 {
		return nil, usagef("missing COMMAND after KEY %q: distlock run [FLAGS] KEY -- COMMAND [ARGS...]", cfg.key)
	}
	cfg.command = rest
	cfg.wait, cfg.ttl, cfg.grace = wait.d, ttl.d, grace.d
	if cfg.key == "" || len(cfg.key) > distlock.MaxKeyLen {
		return nil, usagef("KEY must be 1 to %d bytes", distlock.MaxKeyLen)
	}
	if cfg.ttl < time.Millisecond || cfg.ttl > distlock.MaxTTL {
		return nil, usagef("--ttl %v: must be between 1ms and %v", cfg.ttl, distlock.MaxTTL)
	}
	if ttl.forever || grace.forever {
		return nil, usagef("--ttl and --grace need a duration")
	}
	if isSet(fs, "owner") && cfg.owner == "" {
		return nil, usagef("--owner needs a non-empty ID")
	}
	return cfg, nil
}

func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// extraLockOptions are the lock options of flags that map one to one.
func extraLockOptions(cfg *runConfig) []distlock.Option {
	var opts []distlock.Option
	if cfg.fair {
		opts = append(opts, distlock.WithFair())
	}
	return opts
}

// metadata is what status shows about this holder.
func (cfg *runConfig) metadata() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	cmd := filepath.Base(cfg.command[0])
	if len(cmd) > 200 {
		cmd = cmd[:200]
	}
	meta := "host=" + host + " pid=" + strconv.Itoa(os.Getpid()) + " cmd=" + strings.ReplaceAll(cmd, " ", "_")
	if cfg.meta != "" {
		meta += " " + cfg.meta
	}
	if len(meta) > 4096 {
		meta = meta[:4096]
	}
	return meta
}

func cmdRun(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseRunArgs(args)
	if errors.Is(err, errHelp) {
		fmt.Fprint(stdout, runUsage)
		return exitOK
	}
	if err != nil {
		return fail(stderr, "run", err, exitUsage)
	}
	open := cfg.conn.open
	if cfg.quorum {
		open = cfg.conn.openQuorum
	}
	conn, err := open()
	if err != nil {
		return fail(stderr, "run", err, exitUsage)
	}
	defer conn.Close()

	// Signals are caught from here on: while waiting they end the wait,
	// while COMMAND runs they are passed on to it.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer signal.Stop(sigs)

	lock, code := acquire(cfg, conn, sigs, stderr)
	if lock == nil {
		return code
	}
	if cfg.verbose {
		fmt.Fprintf(stderr, "distlock run: took %q (fence %d)\n", cfg.key, lock.Fence())
	}
	return supervise(cfg, conn, lock, sigs, stderr)
}

// acquire takes the lock, or returns nil and the exit code.
func acquire(cfg *runConfig, conn *connection, sigs <-chan os.Signal, stderr io.Writer) (*distlock.Lock, int) {
	opts := []distlock.Option{distlock.WithTTL(cfg.ttl), distlock.WithMetadata(cfg.metadata())}
	if cfg.owner != "" {
		opts = append(opts, distlock.WithOwner(cfg.owner))
	}
	opts = append(opts, extraLockOptions(cfg)...)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var caught os.Signal
	stopWatch := make(chan struct{})
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		select {
		case caught = <-sigs:
			cancel()
		case <-stopWatch:
		}
	}()
	var (
		lock *distlock.Lock
		err  error
	)
	switch {
	case cfg.wait == 0:
		lock, err = conn.locks.TryLock(ctx, cfg.key, opts...)
	case cfg.wait > 0:
		wctx, wcancel := context.WithTimeout(ctx, cfg.wait)
		lock, err = conn.locks.Lock(wctx, cfg.key, opts...)
		wcancel()
	default:
		lock, err = conn.locks.Lock(ctx, cfg.key, opts...)
	}
	close(stopWatch)
	<-watchDone
	if err == nil {
		return lock, exitOK
	}
	if caught != nil {
		fmt.Fprintf(stderr, "distlock run: %v while waiting for %q; not run\n", caught, cfg.key)
		return nil, 128 + int(caught.(syscall.Signal))
	}
	if errors.Is(err, distlock.ErrNotObtained) && !quorumUnreachable(err) {
		fmt.Fprintf(stderr, "distlock run: %q %s%s; not run\n", cfg.key, holderText(conn, cfg.key), waitedText(cfg.wait))
		return nil, exitNotObtained
	}
	if errors.Is(err, distlock.ErrInvalidKey) || errors.Is(err, distlock.ErrInvalidOption) || errors.Is(err, distlock.ErrInvalidTTL) {
		return nil, fail(stderr, "run", err, exitUsage)
	}
	return nil, fail(stderr, "run", conn.redisError(err), exitRedis)
}

// quorumUnreachable tells a quorum that failed because servers did not
// answer from one that found the lock held.
func quorumUnreachable(err error) bool {
	var qe *distlock.QuorumError
	if !errors.As(err, &qe) {
		return false
	}
	failed := 0
	for _, e := range qe.Nodes {
		if e != nil && !errors.Is(e, distlock.ErrNotObtained) {
			failed++
		}
	}
	return failed > len(qe.Nodes)-qe.Quorum
}

func waitedText(wait time.Duration) string {
	if wait > 0 {
		return " after waiting " + wait.String()
	}
	return ""
}

// holderText describes who holds key, for the "not obtained" message.
func holderText(conn *connection, key string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	info, err := conn.locks.Inspect(ctx, key)
	if err != nil || !info.Held() {
		return "is held by another owner"
	}
	s := fmt.Sprintf("is held (fence %d", info.Fence)
	if info.Meta != "" {
		s += ", " + info.Meta
	}
	if !info.Since.IsZero() {
		s += ", for " + time.Since(info.Since).Round(time.Second).String()
	}
	return s + ")"
}

// supervise runs COMMAND under lock and returns distlock's exit code.
func supervise(cfg *runConfig, conn *connection, lock *distlock.Lock, sigs <-chan os.Signal, stderr io.Writer) int {
	cmd := exec.Command(cfg.command[0], cfg.command[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(),
		"DISTLOCK_KEY="+cfg.key,
		"DISTLOCK_FENCE="+strconv.FormatInt(lock.Fence(), 10),
		"DISTLOCK_TOKEN="+lock.Token(),
	)
	// Its own process group, so that signals and a loss reach everything
	// COMMAND started (a shell script's children too).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		release(cfg, lock, stderr)
		code := exitCannotRun
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			code = exitNotFound
		}
		fmt.Fprintf(stderr, "distlock run: cannot run %s: %v\n", cfg.command[0], err)
		return code
	}
	pgid := cmd.Process.Pid
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()

	var (
		lostErr error
		killAt  <-chan time.Time
		lost    = lock.Lost()
	)
	for {
		select {
		case sig := <-sigs:
			_ = syscall.Kill(-pgid, sig.(syscall.Signal))
		case <-lost:
			lost = nil
			lostErr = lock.Err()
			fmt.Fprintf(stderr, "distlock run: lock %q lost (%v); stopping %s: SIGTERM now, SIGKILL in %v\n",
				cfg.key, lostErr, cfg.command[0], cfg.grace)
			_ = syscall.Kill(-pgid, syscall.SIGTERM)
			t := time.NewTimer(cfg.grace)
			defer t.Stop()
			killAt = t.C
		case <-killAt:
			killAt = nil
			fmt.Fprintf(stderr, "distlock run: %s still running %v after SIGTERM; sending SIGKILL\n", cfg.command[0], cfg.grace)
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		case <-exited:
			if lostErr != nil {
				// Nothing may go on working without the lock.
				_ = syscall.Kill(-pgid, syscall.SIGKILL)
				return exitLost
			}
			if err := release(cfg, lock, stderr); errors.Is(err, distlock.ErrNotHeld) {
				fmt.Fprintf(stderr, "distlock run: lock %q was lost before %s finished (%v)\n", cfg.key, cfg.command[0], lock.Err())
				return exitLost
			}
			return childCode(cmd.ProcessState)
		}
	}
}

// release gives the lock back; a Redis error only costs the lease running
// out, so it is reported and otherwise ignored.
func release(cfg *runConfig, lock *distlock.Lock, stderr io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := lock.Release(ctx)
	switch {
	case err == nil:
		if cfg.verbose {
			fmt.Fprintf(stderr, "distlock run: released %q\n", cfg.key)
		}
	case !errors.Is(err, distlock.ErrNotHeld):
		fmt.Fprintf(stderr, "distlock run: warning: release %q: %v (it expires within %v)\n", cfg.key, err, cfg.ttl)
	}
	return err
}

// childCode is the shell's exit status for a finished process.
func childCode(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
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
