package main

import (
	"errors"
	"fmt"
	"io"
)

const electUsage = `usage: distlock elect [FLAGS] NAME -- COMMAND [ARGS...]

Campaigns in the election NAME and runs COMMAND while it leads: every
candidate that runs 'distlock elect NAME' waits in line, exactly one of
them leads and runs its COMMAND, and when that COMMAND exits (or the
leader's machine dies, within --ttl) the next candidate leads and starts
its own. Exits with COMMAND's exit status.

The leadership is held as 'distlock run' holds a lock, by a lock keeper
process: it is renewed every third of --ttl; if it is lost anyway (Redis
unreachable for a whole lease), COMMAND gets SIGTERM, before the lease can
run out in Redis and so before another candidate can lead, then SIGKILL
after --grace (keep it short: another leader may start meanwhile), and
distlock exits with status 79; if distlock is killed, COMMAND's process group is killed at once and
only then is the leadership given up. On a terminal, signals and job control
work as for 'distlock run'. 'distlock leader NAME' shows who leads.

COMMAND runs in its own process group, with these variables in its
environment:
  DISTLOCK_KEY     the election's NAME
  DISTLOCK_FENCE   the term: larger than that of every earlier leader of
                   NAME; hand it to what the leader writes, so that a
                   deposed leader cannot overwrite its successor
  DISTLOCK_TOKEN   random token identifying this leadership

Flags (anywhere before --):
  --value V         what the leader is known by to 'distlock leader' and
                    'status' (default HOST:PID of this distlock process),
                    e.g. its address
  -w, --wait DURATION
                    how long to campaign before giving up (status 75);
                    default: as long as it takes. There is no --wait 0:
                    a campaign cannot be tried once.
  --ttl DURATION    lease; bounds how long a dead leader blocks the next
                    (default 10s, at least ` + minTTLText + `)
  --grace DURATION  time from SIGTERM to SIGKILL after the leadership is
                    lost (default 5s)
  --fair            a free leadership goes to the candidate that has
                    waited longest, not to a newcomer (use it on every
                    candidate)
  -v, --verbose     report who leads while waiting, and when leading
                    begins and ends
  --log-format text|json
                    as for 'distlock run'
Not with --quorum: an election needs a single Redis deployment (status
64); Sentinel and Cluster work.

` + connHelp + `
Examples:
  # one scheduler among many machines; another takes over if it dies
  distlock elect scheduler --value "$(hostname):8080" -- ./scheduler
  # who leads
  distlock leader scheduler

Exit status: COMMAND's, or 64 usage, 69 Redis error, 75 not leading
within --wait, 79 leadership lost while COMMAND ran, 126 COMMAND cannot be
started, 127 COMMAND not found, 128+N COMMAND killed by signal N.
`

// cmdElect is `distlock elect`: `distlock run` with a campaign for the
// leadership of NAME instead of a lock (mode.go, hold.go); the runner, the
// keeper and the shim are the same.
func cmdElect(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseRunArgs(electName, args)
	if errors.Is(err, errHelp) {
		fmt.Fprint(stdout, electUsage)
		return exitOK
	}
	if err != nil {
		return newRunLog(cfg.logs, electName, "", stderr).fail(err, exitUsage)
	}
	return front(cfg, args, newRunLog(cfg.logs, electName, cfg.key, stderr))
}
