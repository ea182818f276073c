#!/usr/bin/env bash
# callgrind.sh counts the user-space instructions of one uncontended
# Lock+Release pair, in the client and in redis-server, for the baseline,
# the floor and distlock default: the pairs of the uncontended scenario, run
# by a child of the bench binary (-child pairs) under valgrind's callgrind.
# redis-server's count repeats to about 4% from run to run, however loaded
# the machine, where the bench's CPU ratios swing by a tenth; the client's
# only to about 15% (the Go scheduler's idle spinning depends on timing), so
# run it several times and compare ranges. System calls are not counted
# (they are the same for every row; see strace -c).
#
#   cd bench && ./callgrind.sh                 # 2-3 minutes
#   ./callgrind.sh floor/fenced distlock/default
#
# Needs valgrind (Debian: apt-get install -y valgrind) and redis-server.
set -euo pipefail
cd "$(dirname "$0")"
rows=("$@")
[ ${#rows[@]} -gt 0 ] || rows=(baseline/1ms floor/fenced distlock/default)
for tool in valgrind callgrind_control callgrind_annotate redis-server redis-cli; do
	command -v "$tool" >/dev/null || { echo "callgrind.sh: $tool is missing (apt-get install -y valgrind redis-server)" >&2; exit 1; }
done

work=$(mktemp -d)
port=$((20000 + RANDOM % 20000))
cleanup() {
	redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
	redis-cli -p $((port + 1)) shutdown nosave >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT
go build -o "$work/bench" .
pairs=5000 # pairsPerCount in child.go

# total FILE: the instructions of a callgrind dump.
# (awk reads to the end: an early exit would fail the pipe under pipefail)
total() { callgrind_annotate "$1" 2>/dev/null | awk '/PROGRAM TOTALS/ && !n { gsub(",", "", $1); print $1; n = 1 }'; }

# await WHAT: reads the child coprocess's next line. A child that is gone
# (an unknown row, or a Go process faulting under valgrind) fails the
# script with its stderr: a read at end of file would end it silently.
await() {
	local line
	if ! read -r line <&"${CHILD[0]}"; then
		echo "callgrind.sh: $row: the child exited before it $1; run again if it faulted under valgrind" >&2
		cat "$work/child.log" >&2 || true
		exit 1
	fi
}

# count PID: lets the child coprocess run its pairs, and resets and dumps
# callgrind's counters of PID (the child's or redis-server's) around them.
count() {
	local pid=$1
	await "warmed up"
	callgrind_control -z "$pid" >/dev/null 2>&1
	echo go >&"${CHILD[1]}"
	await "ran its pairs"
	callgrind_control -d "$pid" >/dev/null 2>&1
	echo end >&"${CHILD[1]}"
}

# ready PORT: waits until a redis-server answers on PORT.
ready() {
	for _ in $(seq 200); do
		redis-cli -p "$1" ping >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	echo "callgrind.sh: redis-server on port $1 did not start" >&2
	exit 1
}

redis-server --port "$port" --save '' --appendonly no --daemonize yes >/dev/null
ready "$port"
printf '%-18s %14s %14s\n' row client server
for row in "${rows[@]}"; do
	lib=${row%/*} cfg=${row#*/}
	# Client under callgrind; GODEBUG keeps the runtime's preemption signals
	# away from valgrind.
	coproc CHILD { GODEBUG=asyncpreemptoff=1 exec valgrind --tool=callgrind --callgrind-out-file="$work/client.%p" \
		"$work/bench" -child pairs -lib "$lib" -cfg "$cfg" -addr "127.0.0.1:$port" -key bench:u 2>"$work/child.log"; }
	cpid=$CHILD_PID
	count "$cpid"
	wait "$cpid" || true # a Go process may fault at exit under valgrind: the dump is taken
	client=$(total "$(ls "$work"/client."$cpid".* | sort | tail -1)")

	# redis-server under callgrind, the client native.
	(exec valgrind --tool=callgrind --callgrind-out-file="$work/server.%p" redis-server --port $((port + 1)) --save '' --appendonly no \
		>/dev/null 2>"$work/server.log") &
	spid=$!
	ready $((port + 1))
	coproc CHILD { exec "$work/bench" -child pairs -lib "$lib" -cfg "$cfg" -addr "127.0.0.1:$((port + 1))" -key bench:u 2>"$work/child.log"; }
	ccpid=$CHILD_PID
	count "$spid"
	wait "$ccpid" || true
	redis-cli -p $((port + 1)) shutdown nosave >/dev/null 2>&1 || true
	wait "$spid" || true
	server=$(total "$(ls "$work"/server."$spid".* | sort | tail -1)")

	printf '%-18s %14d %14d\n' "$row" $((client / pairs)) $((server / pairs))
	rm -f "$work"/client.* "$work"/server.*
done
echo "user-space instructions per uncontended Lock+Release, $pairs pairs"
