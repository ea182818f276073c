package distlock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed lua/inspect.lua
	inspectSource string
	//go:embed lua/force_release.lua
	forceReleaseSource string

	inspectScript      = redis.NewScript(inspectSource)
	forceReleaseScript = redis.NewScript(handoffSource + forceReleaseSource)
)

// LockInfo is a snapshot of one lock as Redis holds it, for status tools.
type LockInfo struct {
	// Key is the lock's name as given to Lock or TryLock.
	Key string
	// Owner is what Redis compares on release: the grant's token, or the
	// WithOwner id of a reentrant lock. Empty when the lock is free.
	Owner string
	// Count is the number of holds (above 1 only for reentrant locks).
	Count int64
	// Fence is the fencing token of the current grant.
	Fence int64
	// Meta is the holder's metadata (WithMetadata; by default
	// "host=<hostname> pid=<pid>").
	Meta string
	// Since is when the lock was granted, by the holder's clock; zero if
	// unknown.
	Since time.Time
	// TTL is the lease left on the server.
	TTL time.Duration
	// Queued is the number of waiters in the lock's line in Redis: every
	// waiting Lock call of a single-node Client, fair mode or not.
	Queued int64
	// Listening is the number of connections subscribed to the lock's shared
	// release channel on the Redis node that holds the lock: the waiters of
	// quorum Clients, and other tools listening for releases.
	Listening int64
}

// Held reports whether the snapshot found the lock held.
func (i LockInfo) Held() bool { return i.Owner != "" }

// Inspect reads key's lock without changing it. A free lock gives a LockInfo
// whose Held is false (waiters may still be counted).
func (c *Client) Inspect(ctx context.Context, key string) (LockInfo, error) {
	if err := c.usable(); err != nil {
		return LockInfo{}, err
	}
	if err := validateKey(key); err != nil {
		return LockInfo{}, err
	}
	names := c.names(key)
	res, err := inspectScript.Run(ctx, c.rdb, []string{names.lock, names.queue}, names.notice).Slice()
	if err != nil {
		return LockInfo{}, fmt.Errorf("distlock: inspect %q: %w", key, err)
	}
	if len(res) != 8 {
		return LockInfo{}, fmt.Errorf("distlock: inspect %q: unexpected reply %v", key, res)
	}
	info, err := parseLockInfo(key, res[:6])
	if err != nil {
		return LockInfo{}, fmt.Errorf("distlock: inspect %q: %w", key, err)
	}
	if info.Queued, err = replyInt(res[6]); err == nil {
		info.Listening, err = replyInt(res[7])
	}
	if err != nil {
		return LockInfo{}, fmt.Errorf("distlock: inspect %q: %w", key, err)
	}
	return info, nil
}

// List returns the locks held now whose names match pattern, a Redis glob
// ("*", "job:*", "backup-?"), sorted by name. It scans the keyspace (on
// every master of a Cluster), so it is meant for operators, not hot paths.
func (c *Client) List(ctx context.Context, pattern string) ([]LockInfo, error) {
	if err := c.usable(); err != nil {
		return nil, err
	}
	if pattern == "" {
		pattern = "*"
	}
	match := globEscape(c.prefix) + "{" + pattern + "}"
	var (
		mu   sync.Mutex
		keys []string
	)
	scan := func(ctx context.Context, node redis.Cmdable) error {
		found, err := c.scanLocks(ctx, node, match)
		mu.Lock()
		keys = append(keys, found...)
		mu.Unlock()
		return err
	}
	var err error
	if cc, ok := c.rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			return scan(ctx, node)
		})
	} else {
		err = scan(ctx, c.rdb)
	}
	if err != nil {
		return nil, fmt.Errorf("distlock: list %q: %w", pattern, err)
	}
	sort.Strings(keys)
	infos := make([]LockInfo, 0, len(keys))
	for i, key := range keys {
		if i > 0 && key == keys[i-1] {
			continue // SCAN may return a key twice
		}
		info, err := c.Inspect(ctx, key)
		if err != nil {
			return nil, err
		}
		if info.Held() { // released since the scan
			infos = append(infos, info)
		}
	}
	return infos, nil
}

// scanLocks returns the names of the locks whose hashes match on one node.
func (c *Client) scanLocks(ctx context.Context, node redis.Cmdable, match string) ([]string, error) {
	var (
		names  []string
		cursor uint64
	)
	for {
		keys, next, err := node.ScanType(ctx, cursor, match, 1000, "hash").Result()
		if err != nil {
			return names, err
		}
		for _, k := range keys {
			if name, ok := c.lockName(k); ok {
				names = append(names, name)
			}
		}
		if cursor = next; cursor == 0 {
			return names, nil
		}
	}
}

// lockName returns the lock name of a lock hash's Redis key. A name that
// itself ends like a companion key ("x}:queue{y") is ambiguous with it and is
// left out; lock names do not normally contain braces.
func (c *Client) lockName(redisKey string) (string, bool) {
	rest, ok := strings.CutPrefix(redisKey, c.prefix+"{")
	if !ok || !strings.HasSuffix(rest, "}") {
		return "", false
	}
	name := rest[:len(rest)-1]
	for _, suffix := range []string{"}:fence", "}:queue", "}:timeouts", "}:wargs", "}:released"} {
		if strings.Contains(name, suffix) {
			return "", false
		}
	}
	return name, validateKey(name) == nil
}

// ForceRelease deletes key's lock whoever holds it and wakes its waiters; it
// returns what it removed, or ErrNotHeld when the lock was free. It is an
// administrative escape hatch for a lock whose holder is known dead: a live
// holder only learns at its next renewal (Lost fires then), and may act
// without the lock until it does, so protect resources with fences.
func (c *Client) ForceRelease(ctx context.Context, key string) (LockInfo, error) {
	return c.forceRelease(ctx, key, 0)
}

// ForceReleaseGrant is ForceRelease limited to the grant with the given
// fence, as shown by Inspect: if the lock was released and taken again in
// between, it changes nothing and returns ErrNotHeld with the current holder.
func (c *Client) ForceReleaseGrant(ctx context.Context, key string, fence int64) (LockInfo, error) {
	if fence <= 0 {
		return LockInfo{}, fmt.Errorf("%w: fence must be positive, got %d", ErrInvalidOption, fence)
	}
	return c.forceRelease(ctx, key, fence)
}

func (c *Client) forceRelease(ctx context.Context, key string, fence int64) (LockInfo, error) {
	if err := c.usable(); err != nil {
		return LockInfo{}, err
	}
	if err := validateKey(key); err != nil {
		return LockInfo{}, err
	}
	names := c.names(key)
	res, err := forceReleaseScript.Run(ctx, c.rdb, names.all(), names.notice, fence, lineEntryTTL.Milliseconds()).Slice()
	if err != nil {
		return LockInfo{}, fmt.Errorf("distlock: force release %q: %w", key, err)
	}
	if len(res) == 0 {
		return LockInfo{Key: key}, fmt.Errorf("%w: %q is free", ErrNotHeld, key)
	}
	if len(res) != 8 {
		return LockInfo{}, fmt.Errorf("distlock: force release %q: unexpected reply %v", key, res)
	}
	info, err := parseLockInfo(key, res[:6])
	if err != nil {
		return LockInfo{}, fmt.Errorf("distlock: force release %q: %w", key, err)
	}
	if removed, _ := res[6].(int64); removed != 1 {
		return info, fmt.Errorf("%w: %q is now held with fence %d, not %d", ErrNotHeld, key, info.Fence, fence)
	}
	return info, nil
}

// parseLockInfo reads {owner, count, fence, meta, since, pttl} as the
// inspect and force_release scripts return them.
func parseLockInfo(key string, res []any) (LockInfo, error) {
	info := LockInfo{Key: key}
	var errs []error
	num := func(v any) int64 {
		n, err := replyInt(v)
		if err != nil {
			errs = append(errs, err)
		}
		return n
	}
	info.Owner, _ = res[0].(string)
	if info.Held() {
		info.Count = num(res[1])
		info.Fence = num(res[2])
		info.Meta, _ = res[3].(string)
		if ms := num(res[4]); ms > 0 {
			info.Since = time.UnixMilli(ms)
		}
		if ms := num(res[5]); ms > 0 {
			info.TTL = time.Duration(ms) * time.Millisecond
		}
	}
	return info, errors.Join(errs...)
}

// replyInt reads a script's integer or numeric-string reply; nil is 0.
func replyInt(v any) (int64, error) {
	switch v := v.(type) {
	case nil:
		return 0, nil
	case int64:
		return v, nil
	case string:
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("bad number %q", v)
		}
		return n, nil
	}
	return 0, fmt.Errorf("unexpected value %v (%T)", v, v)
}

// globEscape quotes the characters that are special in a Redis glob.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
