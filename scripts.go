package distlock

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Each lock operation is one script call: go-redis sends it with EVALSHA
// and falls back to EVAL on NOSCRIPT, so the fast path is one round trip.
// The scripts that read a lock start with lib.lua, which defines its
// layout; those of an exclusive lock add holds.lua, those of shared holds
// shared.lua, since Redis defines every function of a script on every
// call. Each file opens with its KEYS/ARGV contract. Acquire, release and
// extend put their common case in a head before lib.lua: Redis runs the
// whole script on every call, and defining lib.lua's functions was about a
// sixth of an uncontended acquire's time in Redis (19.5 µs with them, 16.1
// without, INFO commandstats) and of a release's (14.1 and 11.8). For the
// same reason the calls of an uncontended Lock and Release pass only what
// their common case needs: every argument costs Redis and the client time.
var (
	//go:embed lua/lib.lua
	libSource string
	//go:embed lua/holds.lua
	holdsSource string
	//go:embed lua/try_head.lua
	tryHeadSource string
	//go:embed lua/try.lua
	trySource string
	//go:embed lua/acquire.lua
	acquireSource string
	//go:embed lua/release_head.lua
	releaseHeadSource string
	//go:embed lua/release.lua
	releaseSource string
	//go:embed lua/extend_head.lua
	extendHeadSource string
	//go:embed lua/extend.lua
	extendSource string
	//go:embed lua/pttl.lua
	pttlSource string
	//go:embed lua/inspect.lua
	inspectSource string
	//go:embed lua/force_release.lua
	forceReleaseSource string
	//go:embed lua/raise_fence.lua
	raiseFenceSource string

	tryScript          = redis.NewScript(tryHeadSource + libSource + holdsSource + trySource)
	acquireScript      = redis.NewScript(libSource + holdsSource + acquireSource)
	releaseScript      = redis.NewScript(releaseHeadSource + libSource + holdsSource + releaseSource)
	extendScript       = redis.NewScript(extendHeadSource + libSource + holdsSource + extendSource)
	pttlScript         = redis.NewScript(libSource + holdsSource + pttlSource)
	forceReleaseScript = redis.NewScript(libSource + holdsSource + forceReleaseSource)
	inspectScript      = redis.NewScript(inspectSource)
	raiseFenceScript   = redis.NewScript(raiseFenceSource)
)

// handoffLease is the first lease of a lock handed to a waiter (see
// handoff in lua/holds.lua); the grantee's renewal raises it to its TTL.
const handoffLease = 2 * time.Second

// runRelease runs release.lua: it drops token's hold of the lock names
// (first dropping entry from the line, if not ""), hands a freed lock to the
// next waiter, and with announce publishes "r" on the lock's shared channel
// when the lock is freed without a handoff.
func runRelease(ctx context.Context, rdb redis.Scripter, h hold, pub any, entry string, announce bool) *redis.Cmd {
	return runReleaseLinked(ctx, rdb, h, pub, entry, announce, "")
}

// runReleaseLinked is runRelease passing link (see Observer.Link) to a
// waiter the lock is handed to. The kind's own argument (a semaphore's
// limit) follows the four that every release takes; entry, announce and
// link come last, and only when set.
func runReleaseLinked(ctx context.Context, rdb redis.Scripter, h hold, pub any, entry string, announce bool, link string) *redis.Cmd {
	args := make([]any, 4, 8)
	args[0], args[1], args[2], args[3] = h.token, pub, nowMillis(), handoffLeaseArg
	if h.releaseArg != nil {
		args = append(args, h.releaseArg)
	}
	if entry != "" || announce || link != "" {
		args = append(args, entry, boolArg(announce), link)
	}
	return h.kind.release.Run(ctx, rdb, h.names.keys, args...)
}

// hold names one hold (or one that may have been made) for the scripts.
type hold struct {
	kind       *kind
	names      keyNames
	token      string
	releaseArg any
}

func (r *request) hold() hold { return hold{r.kind, r.names, r.token, r.releaseArg} }
func (l *Lock) hold() hold    { return hold{l.kind, l.names, l.token, l.releaseArg} }

// Script arguments that are the same on every call, boxed once: each
// conversion to an interface would otherwise allocate on the lock path.
var (
	argFalse, argTrue any = "0", "1"
	handoffLeaseArg   any = handoffLease.Milliseconds()
	defaultTTLArg     any = DefaultTTL.Milliseconds()
	lineTTLArg        any = lineTTL.Milliseconds()
	publishArg        any = "PUBLISH"
	spublishArg       any = "SPUBLISH"
)

func boolArg(b bool) any {
	if b {
		return argTrue
	}
	return argFalse
}

// msArg is d in milliseconds as a script argument.
func msArg(d time.Duration) any {
	if d == DefaultTTL {
		return defaultTTLArg
	}
	return d.Milliseconds()
}

// Acquire modes: modeTry is try.lua (a kind's own acquire script for the
// shared kinds), the others ARGV[6] of acquire.lua.
const (
	modeTry  = "t" // take it if free
	modeJoin = "j" // take it if free, else join the line
	modeFair = "f" // take it if free and nobody is ahead in line, else join
)

// int64s reads a script's reply, an array of integers or one integer n (as
// [n]), into buf.
func int64s(cmd *redis.Cmd, buf []int64) ([]int64, error) {
	v, err := cmd.Result()
	if err != nil {
		return nil, err
	}
	switch v := v.(type) {
	case int64:
		return append(buf[:0], v), nil
	case []any:
		out := buf[:0]
		for _, x := range v {
			n, ok := x.(int64)
			if !ok {
				return nil, fmt.Errorf("unexpected reply %v", v)
			}
			out = append(out, n)
		}
		return out, nil
	}
	return nil, fmt.Errorf("unexpected reply %v", v)
}

// tryReply reads try.lua's reply as acquire.lua's: a lone fence n is
// [1, n, 1].
func tryReply(cmd *redis.Cmd, buf []int64) ([]int64, error) {
	res, err := int64s(cmd, buf)
	if err == nil && len(res) == 1 {
		res = append(res[:0], 1, res[0], 1)
	}
	return res, err
}

// tryGrant is ARGV[1] of try.lua: "<since> <token> 0 <tail>".
func tryGrant(token, tail string) string {
	var since [20]byte
	var b strings.Builder
	b.Grow(len(since) + len(token) + len(tail) + 4)
	b.Write(strconv.AppendInt(since[:0], nowMillis(), 10))
	b.WriteByte(' ')
	b.WriteString(token)
	b.WriteString(" 0 ")
	b.WriteString(tail)
	return b.String()
}
