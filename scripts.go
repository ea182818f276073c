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

// Each lock operation is one script call: EVALSHA, falling back to EVAL on
// NOSCRIPT, so the fast path is one round trip.
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
	//go:embed lua/lift_fence.lua
	liftFenceSource string

	tryScript          = newDrawingScript(tryHeadSource + libSource + holdsSource + trySource)
	acquireScript      = newDrawingScript(libSource + holdsSource + acquireSource)
	releaseScript      = newReleaseScripts(releaseHeadSource + libSource + holdsSource + releaseSource)
	extendScript       = newScript(extendHeadSource + libSource + holdsSource + extendSource)
	pttlScript         = newScript(libSource + holdsSource + pttlSource)
	forceReleaseScript = newDrawingScript(libSource + holdsSource + forceReleaseSource)
	inspectScript      = newScript(inspectSource)
	raiseFenceScript   = newScript(raiseFenceSource)
	liftFenceScript    = newScript(liftFenceSource)
)

// script is a Lua script with its SHA1 and source boxed once. Every call is
// built as the EVALSHA command itself (see command), so that the lock path
// can build it in one slice with its arguments: go-redis' Script.Run copies
// the keys and arguments into a slice of its own and boxes the SHA and
// every key again, on every call.
type script struct {
	*redis.Script
	sha, src any
	// draws: the script draws fences from the counter KEYS[2], which must
	// be lifted before the script is loaded again (see call).
	draws bool
}

func newScript(src string) *script {
	s := redis.NewScript(src)
	return &script{Script: s, sha: s.Hash(), src: src}
}

func newDrawingScript(src string) *script {
	s := newScript(src)
	s.draws = true
	return s
}

// releaseScripts is a release script in two variants, one per publish
// command, each with the command and handoffLease baked in as the locals
// pub and claim of a first line (see lua/release.lua): both are the same on
// every call of a Client, and each argument costs every Release, in Redis
// (parsed, made an object, then a Lua string) and in the client. Measured
// with bench/callgrind.sh in three interleaved A/Bs, dropping the two
// arguments (with release_head.lua's string-free compare) saved 2,400–3,400
// of about 78,000 redis-server instructions per pair.
type releaseScripts struct{ plain, sharded *script }

func newReleaseScripts(src string) releaseScripts {
	prelude := func(pub string) string {
		return fmt.Sprintf("local pub, claim = '%s', %d\n", pub, handoffLease.Milliseconds())
	}
	// A release draws the fence of the waiter it hands the lock to.
	return releaseScripts{newDrawingScript(prelude("PUBLISH") + src), newDrawingScript(prelude("SPUBLISH") + src)}
}

// variant is the script that publishes with pub (publishArg or spublishArg).
func (r releaseScripts) variant(pub any) *script {
	if pub == spublishArg {
		return r.sharded
	}
	return r.plain
}

// numKeysArgs are the key counts of script calls, boxed once; as strings,
// because go-redis reads the count to route a call on a Cluster.
var numKeysArgs = [...]any{"0", "1", "2", "3", "4", "5"}

// command appends to buf the start of a call of s with keys: EVALSHA, the
// SHA, the key count and the keys. The caller appends the arguments and
// runs it with call.
func (s *script) command(buf []any, keys []string) []any {
	buf = append(buf, "evalsha", s.sha, numKeysArgs[len(keys)])
	for _, k := range keys {
		buf = append(buf, k)
	}
	return buf
}

// evalsha is a call of s with keys and args, built by command.
func (s *script) evalsha(keys []string, args ...any) []any {
	return append(s.command(make([]any, 0, 3+len(keys)+len(args)), keys), args...)
}

// run runs s with keys and args on c (see call).
func (s *script) run(ctx context.Context, c doer, keys []string, args ...any) *redis.Cmd {
	return s.call(ctx, c, s.evalsha(keys, args...))
}

// doer sends one command: a client, or a pipeline that queues it.
type doer interface {
	Do(ctx context.Context, args ...any) *redis.Cmd
}

// call runs cmd, a call of s built by command, on c, and once more as EVAL
// when Redis does not have s (after a restart or a SCRIPT FLUSH), as
// Script.Run does; a script that draws fences lifts its counter first
// (reload).
func (s *script) call(ctx context.Context, c doer, cmd []any) *redis.Cmd {
	res := c.Do(ctx, cmd...)
	if isNoScript(res.Err()) {
		if err := s.reload(ctx, c, cmd); err != nil {
			res = redis.NewCmd(ctx)
			res.SetErr(err)
			return res
		}
		res = c.Do(ctx, s.asEval(cmd)...)
	}
	return res
}

// reload prepares Redis, which does not have s, for cmd (a call of s built
// by command) to run as EVAL: the fence counter of a script that draws
// fences is lifted to the server's clock (lua/lift_fence.lua). Redis loses
// its scripts only when it restarts (or fails over, or is told to), and a
// restart from a snapshot may have rolled the counter back below fences
// already given: without the lift the next grant could repeat one, and a
// resource would take a stale holder's write for the new holder's. Every
// Client that finds the script gone lifts the counter before it loads the
// script, so every later draw, by any Client, follows a lift. It costs a
// round trip once per script after each restart, nothing on the fast path.
// On a Cluster only the counter of the slot of cmd's key is lifted.
func (s *script) reload(ctx context.Context, c doer, cmd []any) error {
	if !s.draws || len(cmd) < 5 {
		return nil
	}
	err := c.Do(ctx, "eval", liftFenceScript.src, numKeysArgs[1], cmd[4]).Err()
	if err != nil {
		return fmt.Errorf("lift the fence counter before loading a script: %w", err)
	}
	return nil
}

// counterScripts are a Client's own variants of the scripts that draw
// fences, for a fence counter other than the default one (another key
// prefix, another database): each variant starts with a comment line that
// names the counter, so that it has a SHA of its own. Redis forgets every
// script on a restart, and the first call of a script after it lifts the
// counter of that call (reload); with one SHA for every counter, the first
// application to call would lift its own counter and load the script for
// all, and the others would draw from counters that a snapshot brought back
// behind fences already given. With a variant per counter, each counter is
// lifted by the first call that draws from it. (On a Cluster the counters
// are one per slot, too many for a variant each: see docs/deployments.md.)
type counterScripts struct{ own map[*script]*script }

// drawingScripts are the scripts that draw fences.
func drawingScripts() []*script {
	return []*script{tryScript, acquireScript, releaseScript.plain, releaseScript.sharded, forceReleaseScript,
		rwAcquireScript, semAcquireScript, sharedReleaseScript.plain, sharedReleaseScript.sharded}
}

// newCounterScripts returns the variants for the counters of key prefix in
// database db, or nil for those of DefaultPrefix in database 0, which the
// scripts as they are serve.
func newCounterScripts(prefix string, db int) *counterScripts {
	if prefix == DefaultPrefix && db == 0 {
		return nil
	}
	cs := &counterScripts{own: map[*script]*script{}}
	line := fmt.Sprintf("-- fence counters of key prefix %q, database %d\n", prefix, db)
	for _, s := range drawingScripts() {
		cs.own[s] = newDrawingScript(line + s.src.(string))
	}
	return cs
}

// of returns the variant of s that draws from the counter of cs.
func (cs *counterScripts) of(s *script) *script {
	if cs == nil || !s.draws {
		return s
	}
	return cs.own[s]
}

// asEval turns cmd, a call of s built by command, into the same call as
// EVAL with s's source.
func (s *script) asEval(cmd []any) []any {
	cmd[0], cmd[1] = "eval", s.src
	return cmd
}

// handoffLease is the first lease of a lock handed to a waiter (see
// handoff in lua/holds.lua); the grantee's renewal raises it to its TTL.
const handoffLease = 2 * time.Second

// runRelease runs release.lua: it drops token's hold of the lock names
// (first dropping entry from the line, if not ""), hands a freed lock to the
// next waiter, and with announce publishes "r" on the lock's shared channel
// when the lock is freed without a handoff.
func runRelease(ctx context.Context, rdb doer, h hold, pub any, entry string, announce bool) *redis.Cmd {
	return runReleaseLinked(ctx, rdb, h, pub, entry, announce, "")
}

// runReleaseLinked is runRelease passing link (see Observer.Link) to a
// waiter the lock is handed to. The kind's own argument (a semaphore's
// limit) follows the two that every release takes; entry, announce and
// link come last, and only when set.
func runReleaseLinked(ctx context.Context, rdb doer, h hold, pub any, entry string, announce bool, link string) *redis.Cmd {
	s := h.names.counted.of(h.kind.release.variant(pub))
	cmd := s.command(make([]any, 0, 3+len(h.names.keys)+6), h.names.keys)
	cmd = append(cmd, h.token, nowMillis())
	if h.releaseArg != nil {
		cmd = append(cmd, h.releaseArg)
	}
	if entry != "" || announce || link != "" {
		cmd = append(cmd, entry, boolArg(announce), link)
	}
	return s.call(ctx, rdb, cmd)
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
	// modeFairTry is a TryLock's modeTry under WithFair: a free lock goes to
	// the head of its line, if any, and the caller never lines up.
	modeFairTry = "n"
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
