package distlock

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Client takes locks on one Redis deployment: a standalone server, a
// Sentinel-managed master (redis.NewFailoverClient) or a Cluster. It is safe
// for concurrent use; create one per process and share it.
type Client struct {
	rdb    redis.UniversalClient
	prefix string
	nilRDB bool
	ack    replicaAck
	closed atomic.Bool

	mu      sync.Mutex
	renewer *renewer
}

// New returns a Client on rdb. Close stops what the Client started; it does
// not close rdb. A nil rdb gives a Client whose methods return ErrNilClient.
func New(rdb redis.UniversalClient, opts ...ClientOption) *Client {
	c := &Client{rdb: rdb, prefix: DefaultPrefix, nilRDB: isNil(rdb)}
	for _, o := range opts {
		if o != nil {
			o(c)
		}
	}
	return c
}

func isNil(rdb redis.UniversalClient) bool {
	if rdb == nil {
		return true
	}
	v := reflect.ValueOf(rdb)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// Close stops the Client's renewal and wake-up machinery. Locks still held
// stop being renewed and their Lost channels close. It does not close rdb.
func (c *Client) Close() error {
	if c == nil || c.closed.Swap(true) {
		return nil
	}
	c.mu.Lock()
	r := c.renewer
	c.renewer = nil
	c.mu.Unlock()
	if r != nil {
		r.stop()
	}
	return nil
}

// TryLock makes one attempt to take key. It returns ErrNotObtained at once if
// another owner holds it.
func (c *Client) TryLock(ctx context.Context, key string, opts ...Option) (*Lock, error) {
	cfg, err := c.prepare(key, opts)
	if err != nil {
		return nil, err
	}
	l, _, err := c.attempt(ctx, key, cfg, newToken())
	return l, err
}

// Lock takes key, waiting while another owner holds it until the lock is
// free, the retry strategy gives up or ctx ends; then the error wraps
// ErrNotObtained and ctx.Err(). A wait never outlasts the holder's remaining
// lease, so the lock of a crashed holder is taken as soon as it expires.
func (c *Client) Lock(ctx context.Context, key string, opts ...Option) (*Lock, error) {
	cfg, err := c.prepare(key, opts)
	if err != nil {
		return nil, err
	}
	token := newToken()
	names := c.names(key)
	for n := 1; ; n++ {
		l, holderTTL, err := c.attempt(ctx, key, cfg, token)
		if !errors.Is(err, ErrNotObtained) {
			return l, err
		}
		wait := cfg.retry.Backoff(n)
		if wait < 0 {
			return nil, fmt.Errorf("%w: %q still held after %d attempts", ErrNotObtained, key, n)
		}
		if holderTTL >= 0 && wait > holderTTL {
			wait = holderTTL
		}
		if err := sleepCtx(ctx, wait); err != nil {
			return nil, notObtained(key, err)
		}
		_ = names // the event-driven waiter keys on names (see wait.go)
	}
}

func (c *Client) prepare(key string, opts []Option) (lockConfig, error) {
	if err := c.usable(); err != nil {
		return lockConfig{}, err
	}
	if err := validateKey(key); err != nil {
		return lockConfig{}, err
	}
	if err := c.ack.validate(c.rdb); err != nil {
		return lockConfig{}, err
	}
	return buildLockConfig(opts)
}

func (c *Client) usable() error {
	switch {
	case c == nil || c.nilRDB:
		return ErrNilClient
	case c.closed.Load():
		return ErrClosed
	}
	return nil
}

// attempt runs the acquire script once. When another owner holds the lock it
// returns ErrNotObtained and that holder's remaining lease (-1 if unknown).
func (c *Client) attempt(ctx context.Context, key string, cfg lockConfig, token string) (*Lock, time.Duration, error) {
	if err := ctx.Err(); err != nil {
		return nil, -1, notObtained(key, err)
	}
	names := c.names(key)
	owner, reentrant := token, "0"
	if cfg.ownerSet {
		owner, reentrant = cfg.owner, "1"
	}
	start := time.Now()
	cmd, acked := c.ack.runAcked(ctx, c.rdb, acquireScript, []string{names.lock, names.fence},
		owner, cfg.ttl.Milliseconds(), reentrant, cfg.meta, time.Now().UnixMilli())
	res, err := cmd.Int64Slice()
	if err != nil {
		if ctx.Err() != nil {
			return nil, -1, notObtained(key, ctx.Err())
		}
		return nil, -1, fmt.Errorf("distlock: acquire %q: %w", key, err)
	}
	if len(res) < 2 {
		return nil, -1, fmt.Errorf("distlock: acquire %q: unexpected reply %v", key, res)
	}
	if res[0] == 0 {
		return nil, time.Duration(res[1]) * time.Millisecond, fmt.Errorf("%w: %q is held by another owner", ErrNotObtained, key)
	}
	l := newLock(c, key, names, token, owner, res[1], cfg, start)
	if !acked {
		// The grant may not survive a failover: undo it rather than hand out
		// a lock that a promoted replica would give to someone else too.
		_ = l.Release(context.WithoutCancel(ctx))
		return nil, -1, fmt.Errorf("distlock: acquire %q: %w", key, ErrNotReplicated)
	}
	return l, -1, nil
}

func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

func notObtained(key string, cause error) error {
	return fmt.Errorf("%w: %q: %w", ErrNotObtained, key, cause)
}

// keyNames are the Redis keys of one lock. The hash tag on the lock name puts
// all of them in one Cluster slot, so one script can touch them all.
type keyNames struct {
	lock, fence, channel, queue, timeouts string
}

func (c *Client) names(key string) keyNames {
	base := c.prefix + "{" + key + "}"
	return keyNames{
		lock:     base,               // hash: owner, count, fence, meta, since
		fence:    base + ":fence",    // counter, never expires
		channel:  base + ":released", // pub/sub: release and handoff notices
		queue:    base + ":queue",    // list: fair-mode waiters in arrival order
		timeouts: base + ":timeouts", // zset: fair-mode waiter -> deadline (ms)
	}
}

// newToken returns 128 random bits; crypto/rand makes reuse practically
// impossible, so a token identifies one Lock call.
func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go ≥ 1.24)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
