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
	rdb   redis.UniversalClient
	nodes []redis.UniversalClient // set by NewQuorum: the independent nodes
	// suspect[i]: node i failed and is not waited for (see quorum.go)
	suspect []atomic.Bool
	prefix  string
	nilRDB  bool
	// publish is how scripts announce releases: SPUBLISH (sharded pub/sub)
	// on a Cluster, so that a notice stays on the lock's shard; PUBLISH
	// elsewhere.
	publish string
	id      string // names this Client's inbox channels
	ack     replicaAck
	closed  atomic.Bool

	closing chan struct{} // closed by Close: wakes waiting Lock calls

	mu       sync.Mutex
	renewer  *renewer
	notifier *notifier
}

// New returns a Client on rdb. Close stops what the Client started; it does
// not close rdb. A nil rdb gives a Client whose methods return ErrNilClient.
func New(rdb redis.UniversalClient, opts ...ClientOption) *Client {
	c := &Client{rdb: rdb, prefix: DefaultPrefix, nilRDB: isNil(rdb), closing: make(chan struct{}), publish: "PUBLISH", id: newToken()[:11]}
	if _, ok := rdb.(*redis.ClusterClient); ok {
		c.publish = "SPUBLISH"
	}
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
	close(c.closing)
	c.mu.Lock()
	r, n := c.renewer, c.notifier
	c.renewer = nil
	c.mu.Unlock()
	if r != nil {
		r.stop()
	}
	if n != nil {
		n.close()
	}
	return nil
}

// notify returns the Client's notifier, creating it on first use.
func (c *Client) notify() *notifier {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.notifier == nil {
		nodes := c.nodes
		if len(nodes) == 0 {
			nodes = []redis.UniversalClient{c.rdb}
		}
		c.notifier = newNotifier(nodes)
	}
	return c.notifier
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
// ErrNotObtained and ctx.Err().
//
// A waiter joins a line kept in Redis next to the lock, and a release hands
// the lock straight to the first waiter still in line, which learns of it
// over the Client's one pub/sub subscription: no polling, no herd, and a
// releaser that asks again queues behind the others. Waiters never sleep past
// the holder's remaining lease, so the lock of a crashed holder is taken as
// soon as it expires. Without WithFair the first attempt may take a free lock
// ahead of the line (the line is only ever non-empty while the lock is free
// right after a holder's lease ran out); with WithFair it never does.
func (c *Client) Lock(ctx context.Context, key string, opts ...Option) (*Lock, error) {
	cfg, err := c.prepare(key, opts)
	if err != nil {
		return nil, err
	}
	token := newToken()
	if c.isQuorum() {
		return c.lockLine(ctx, key, cfg, token)
	}
	if !cfg.fair {
		l, _, err := c.attempt(ctx, key, cfg, token)
		if !errors.Is(err, ErrNotObtained) || ctx.Err() != nil {
			return l, err
		}
	}
	return c.lockQueued(ctx, key, cfg, token)
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
	cfg, err := buildLockConfig(opts)
	if err == nil && c.isQuorum() && (cfg.fair || c.ack.replicas > 0) {
		err = fmt.Errorf("%w: fair mode and replica acknowledgement need a single-node Client", ErrInvalidOption)
	}
	return cfg, err
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
	if c.isQuorum() {
		return c.acquireQuorum(ctx, key, cfg, token)
	}
	names := c.names(key)
	owner, reentrant := cfg.ownerArgs(token)
	return c.acquire(ctx, key, names, cfg, token, acquireScript, []string{names.lock, names.fence},
		owner, cfg.ttl.Milliseconds(), reentrant, cfg.meta, time.Now().UnixMilli())
}

// attemptFair runs the fair acquire script once: it takes the lock if no one
// is ahead in line, and otherwise joins the line or keeps its place.
func (c *Client) attemptFair(ctx context.Context, key string, cfg lockConfig, token string) (*Lock, time.Duration, error) {
	names := c.names(key)
	owner, reentrant := cfg.ownerArgs(token)
	return c.acquire(ctx, key, names, cfg, token, acquireFairScript, names.all(),
		token, owner, cfg.ttl.Milliseconds(), reentrant, cfg.meta, lineEntryTTL.Milliseconds(), names.notice, names.inboxNotice)
}

// acquire runs one acquire script, whose reply is {1, fence, count} when
// held and {0, holder's pttl} when not.
func (c *Client) acquire(ctx context.Context, key string, names keyNames, cfg lockConfig, token string, script *redis.Script, keys []string, args ...any) (*Lock, time.Duration, error) {
	if err := ctx.Err(); err != nil {
		return nil, -1, notObtained(key, err)
	}
	start := time.Now()
	cmd, acked := c.ack.runAcked(ctx, c.rdb, script, keys, args...)
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
	owner, _ := cfg.ownerArgs(token)
	l := newLock(c, key, names, token, owner, res[1], cfg).granted(start)
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
	lock, fence, channel, queue, timeouts, wargs string
	// notice is the scripts' argument for the shared channel:
	// "PUBLISH <channel>", or "SPUBLISH <channel>" on a Cluster.
	notice string
	// inbox is this Client's own channel for the lock: handoffs to its
	// waiters are published there, so other processes are not woken.
	inbox, inboxNotice string
}

// all returns the keys that scripts freeing a lock need (see handoff.lua).
func (k keyNames) all() []string {
	return []string{k.lock, k.fence, k.queue, k.timeouts, k.wargs}
}

func (c *Client) names(key string) keyNames {
	base := c.prefix + "{" + key + "}"
	k := keyNames{
		lock:     base,               // hash: owner, count, fence, meta, since
		fence:    base + ":fence",    // counter, never expires
		channel:  base + ":released", // pub/sub: release and handoff notices
		queue:    base + ":queue",    // list: waiters in arrival order
		timeouts: base + ":timeouts", // zset: waiter -> deadline (ms)
		wargs:    base + ":wargs",    // hash: waiter -> ttl, owner, inbox, meta
		notice:   c.publish + " " + base + ":released",
		inbox:    base + ":to:" + c.id,
	}
	k.inboxNotice = c.publish + " " + k.inbox
	return k
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
