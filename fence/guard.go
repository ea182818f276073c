// Package fence protects data from a lock holder that lost its lock without
// knowing it: a process paused (GC, VM stall, SIGSTOP) past its lease, whose
// loss signal came too late. Every grant of a distlock lock carries a fence,
// strictly greater than the fence of every earlier grant of that lock; a
// Guard writes to a Redis key only with a fence at least the highest one the
// key has accepted, in the same script as the write, and otherwise returns
// ErrStale. For data outside Redis, keep the fence with the data and write
// with a condition (see examples/sqlfence).
package fence

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/distlock/distlock"
	"github.com/redis/go-redis/v9"
)

// ErrStale is returned by a Guard write whose fence is below the
// highest fence the resource has already accepted: the writer's lock was
// lost, and a later holder has written since. Nothing was written.
var ErrStale = errors.New("fence: stale fence")

var (
	//go:embed lua/set.lua
	guardSetSource string
	//go:embed lua/hset.lua
	guardHSetSource string
	//go:embed lua/run.lua
	guardRunSource string

	guardSetScript  = redis.NewScript(guardSetSource)
	guardHSetScript = redis.NewScript(guardHSetSource)
)

// guardPrefix starts the name of every fence marker key.
const guardPrefix = "distlock:guard:"

// Guard writes to Redis keys on behalf of lock holders, accepting a write
// only if its fence (distlock.Lock.Fence) is at least the highest fence the
// key has seen, in the same atomic script as the write. A holder that was
// paused past its lease, and so missed its loss signal, gets ErrStale
// instead of overwriting the next holder's work. Guard each resource with
// the fences of one lock: fences rise across all grants of a lock, but two
// locks may draw them from different counters.
//
// The highest fence of a key K is kept in a marker key, Marker(K), that
// never expires, so a stale holder stays refused even after K is deleted or
// expires. So one marker stays for every key ever guarded: guarding a
// stream of new keys (one per order, say) adds a key to Redis per key, for
// good, unless the application deletes Marker(K) once it knows that no
// holder of K's lock from before can still write. The marker shares K's Redis Cluster slot, so guarded writes work
// on Cluster: with T the hash tag of K (the text between its first '{' and
// the next '}') or K itself if it has none, the marker is
// "distlock:guard:{T}:K". Every key a Script touches must be in the
// slot of its first key, as for any Redis script.
type Guard struct {
	rdb redis.Scripter
}

// NewGuard returns a guard that writes through rdb, a client (not a
// pipeline: a pipelined write would report ErrStale as a plain Redis
// error). A nil rdb gives a guard whose methods return distlock.ErrNilClient.
// Its methods return distlock.ErrNilContext for a nil ctx, and
// distlock.ErrInvalidOption for a value or argument go-redis cannot encode
// (a struct, a slice), writing nothing.
// Unlike distlock's own calls, a guarded write runs inline on rdb: it
// returns by ctx's deadline only when rdb honours deadlines
// (redis.Options.ContextTimeoutEnabled), and otherwise when rdb's own read
// timeout ends it. Returning earlier would leave the caller unsure whether
// the write landed.
func NewGuard(rdb redis.Scripter) *Guard {
	return &Guard{rdb: rdb}
}

// Set sets the string key to value, with expiry ttl (0: none), if fence is
// not stale for key.
func (g *Guard) Set(ctx context.Context, fence int64, key string, value any, ttl time.Duration) error {
	marker, err := g.check(ctx, fence, key)
	if err != nil {
		return err
	}
	if ttl < 0 || (ttl > 0 && ttl < time.Millisecond) {
		return fmt.Errorf("%w: %v is neither 0 nor at least 1ms", distlock.ErrInvalidTTL, ttl)
	}
	err = guardSetScript.Run(ctx, g.rdb, []string{marker, key}, fence, value, ttl.Milliseconds()).Err()
	return guardErr(err, "set", key, fence)
}

// HSet sets field of the hash key to value if fence is not stale for key.
// The fence is per hash, not per field: a hash is one resource.
func (g *Guard) HSet(ctx context.Context, fence int64, key, field string, value any) error {
	marker, err := g.check(ctx, fence, key)
	if err != nil {
		return err
	}
	err = guardHSetScript.Run(ctx, g.rdb, []string{marker, key}, fence, field, value).Err()
	return guardErr(err, "hset", key, fence)
}

// Run runs s with keys and args if fence is not stale for keys[0], and
// returns its reply. The fence check, the body and the marker update are one
// script call; the marker advances only if the body returns without error.
func (g *Guard) Run(ctx context.Context, s *Script, fence int64, keys []string, args ...any) *redis.Cmd {
	if ctx == nil {
		return failedCmd(context.Background(), distlock.ErrNilContext)
	}
	if s == nil || s.script == nil || len(keys) == 0 {
		return failedCmd(ctx, fmt.Errorf("%w: a guarded script needs a script and at least one key", distlock.ErrInvalidOption))
	}
	marker, err := g.check(ctx, fence, keys[0])
	if err != nil {
		return failedCmd(ctx, err)
	}
	cmd := s.script.Run(ctx, g.rdb, append([]string{marker}, keys...), append([]any{fence}, args...)...)
	if err := staleFence(cmd.Err(), "script on", keys[0], fence); err != nil {
		cmd.SetErr(err)
	} else if err := badArg(cmd.Err(), "script on", keys[0]); err != nil {
		cmd.SetErr(err)
	}
	return cmd
}

// Script is a Lua script body for Guard.Run. Create it once, as
// with redis.NewScript: it is sent by its SHA1 after the first call.
type Script struct {
	script *redis.Script
}

// NewScript wraps body, Lua code that sees its own KEYS and ARGV (as
// passed to Run) and may return a value, into a script that runs it only
// after the fence check. The body must not be a Redis function or carry a
// shebang line.
func NewScript(body string) *Script {
	src := "local function guarded_body(KEYS, ARGV)\n" + body + "\nend\n" + guardRunSource
	return &Script{script: redis.NewScript(src)}
}

// Marker returns the key where a Guard keeps the highest fence
// accepted for key (see Guard). It returns distlock.ErrInvalidKey for an empty
// key, and for a key with a '}' but no hash tag, whose slot no marker name
// can be made to share.
func Marker(key string) (string, error) {
	if key == "" {
		return "", fmt.Errorf("%w: empty key", distlock.ErrInvalidKey)
	}
	tag := hashTag(key)
	if tag == key && strings.Contains(key, "}") {
		return "", fmt.Errorf("%w: %q has a '}' but no hash tag; give it one, e.g. {%s}", distlock.ErrInvalidKey, key, strings.ReplaceAll(key, "}", ""))
	}
	return guardPrefix + "{" + tag + "}:" + key, nil
}

// hashTag returns what Redis Cluster hashes for key: the text between the
// first '{' and the next '}' if that is not empty, else the whole key.
func hashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// check validates a guarded write before anything is sent. A nil ctx is
// refused here: go-redis would panic on it.
func (g *Guard) check(ctx context.Context, fence int64, key string) (string, error) {
	if ctx == nil {
		return "", distlock.ErrNilContext
	}
	if g == nil || isNil(g.rdb) {
		return "", distlock.ErrNilClient
	}
	if fence <= 0 {
		return "", fmt.Errorf("%w: fence %d is not positive (fences start at 1)", distlock.ErrInvalidOption, fence)
	}
	return Marker(key)
}

func isNil(rdb redis.Scripter) bool {
	if rdb == nil {
		return true
	}
	v := reflect.ValueOf(rdb)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// guardErr returns ErrStale for the scripts' stale-fence reply and wraps
// any other error.
func guardErr(err error, op, key string, fence int64) error {
	if err == nil {
		return nil
	}
	if serr := staleFence(err, op, key, fence); serr != nil {
		return serr
	}
	if aerr := badArg(err, op, key); aerr != nil {
		return aerr
	}
	return fmt.Errorf("distlock: guarded %s %q: %w", op, key, err)
}

// staleFence turns the "STALEFENCE <highest>" error reply of the guard
// scripts into ErrStale; for any other err it returns nil.
func staleFence(err error, op, key string, fence int64) error {
	var rerr redis.Error
	if err == nil || !errors.As(err, &rerr) {
		return nil
	}
	high, ok := strings.CutPrefix(rerr.Error(), "STALEFENCE ")
	if !ok {
		return nil
	}
	return fmt.Errorf("%w: %s %q with fence %d, below %s", ErrStale, op, key, fence, high)
}

// badArg turns go-redis's refusal of a value or argument it cannot encode
// (a struct, a slice; nothing was sent) into distlock.ErrInvalidOption; for
// any other err it returns nil. go-redis gives that error no type to match.
func badArg(err error, op, key string) error {
	if err == nil || !strings.HasPrefix(err.Error(), "redis: can't marshal ") {
		return nil
	}
	return fmt.Errorf("%w: guarded %s %q: %v", distlock.ErrInvalidOption, op, key, err)
}

func failedCmd(ctx context.Context, err error) *redis.Cmd {
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(err)
	return cmd
}
