package distlock

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Client takes locks on one Redis deployment: a standalone server, a
// Sentinel-managed master (redis.NewFailoverClient) or a Cluster, or, from
// NewQuorum, a majority of independent servers. It is safe for concurrent
// use; create one per process and share it.
type Client struct {
	b   backend
	obs Observer // nil when nobody observes
	// deadlines: the Redis client stops a call at its context's deadline
	// (see detached)
	deadlines bool
	// adminDeadlines: the same for the server that Inspect, List and
	// ForceRelease read, a quorum Client's first node (see adminFunc)
	adminDeadlines bool
	broken         error // set when the Client was built unusable (nil client, bad option)
	prefix         string
	id             string // names this Client's inbox channels
	// counter names the fence counter of a lock key (node or slot counter)
	counter func(lockKey string) string
	// cluster: the Client is on a Redis Cluster, where every key of a lock
	// must carry the hash tag (see checkTag)
	cluster bool
	// counted: the fence-drawing scripts of this Client's counters (see
	// counterScripts)
	counted *counterScripts

	closed atomic.Bool
	// closedCtx ends when Close is called: it wakes waiting Lock calls, and
	// ends calls that only Close can end (see single.attempt)
	closedCtx context.Context
	closeNow  context.CancelFunc
	bg        jobs // background goroutines: Close waits for them

	mu       sync.Mutex
	renewer  *renewer
	notifier *notifier
	watching atomic.Bool // watchRestarts has run
}

// New returns a Client on rdb. Close stops what the Client started; it does
// not close rdb. A nil rdb gives a Client whose methods return ErrNilClient,
// and a *redis.Ring or an option it cannot honour (WithReplicaAck on a
// Cluster client) one whose methods return ErrInvalidOption.
func New(rdb redis.UniversalClient, opts ...ClientOption) *Client {
	cfg := buildClientConfig(opts)
	c := newClient(cfg)
	clash := prefixClash(cfg.prefix)
	switch {
	case isNil(rdb):
		c.broken = ErrNilClient
	case isRing(rdb):
		c.broken = fmt.Errorf("%w: a Ring shards keys by client-side hashing, and moves them when a shard comes or goes: locks and fences would not survive that (use a Cluster, Sentinel or NewQuorum)", ErrInvalidOption)
	case clash != nil:
		c.broken = clash
	case cfg.ack.replicas > 0 && isCluster(rdb):
		c.broken = fmt.Errorf("%w: WithReplicaAck needs a standalone or Sentinel client, not a Cluster client", ErrInvalidOption)
	case isCluster(rdb) && strings.HasSuffix(cfg.prefix, slotCounterPart):
		c.broken = fmt.Errorf("%w: key prefix %q ends with %q, which a Cluster's fence counters put after the prefix: its locks would be the counters of prefix %q",
			ErrInvalidOption, cfg.prefix, slotCounterPart, strings.TrimSuffix(cfg.prefix, slotCounterPart))
	case isCluster(rdb) && !clusterPrefix(cfg.prefix):
		c.broken = fmt.Errorf("%w: key prefix %q: on a Cluster a '{' in it must open a non-empty hash tag that closes within the prefix", ErrInvalidOption, cfg.prefix)
	default:
		c.broken = cfg.ack.validate()
		if c.broken == nil {
			c.broken = cfg.ack.fits(rdb)
		}
	}
	c.deadlines = honoursDeadlines(rdb)
	c.adminDeadlines = c.deadlines
	c.counted = newCounterScripts(c.prefix, database(rdb))
	s := &single{c: c, rdb: rdb, ack: cfg.ack, pub: "PUBLISH", pubArg: publishArg, slots: make(chan struct{}, max(poolSize(rdb)/4, 1))}
	if isCluster(rdb) {
		s.pub, s.pubArg = "SPUBLISH", spublishArg
		c.counter = slotCounter(c.prefix)
		c.cluster = true
	}
	c.b = s
	return c
}

func newClient(cfg clientConfig) *Client {
	closed, closeNow := context.WithCancel(context.Background())
	return &Client{
		obs:       cfg.observer(),
		prefix:    cfg.prefix,
		id:        newToken()[:11],
		counter:   nodeCounter(cfg.prefix),
		closeNow:  closeNow,
		closedCtx: closed,
	}
}

// database is the number of the database that rdb selects (0 on a
// Cluster, or for a client it cannot tell).
func database(rdb redis.UniversalClient) int {
	if r, ok := rdb.(*redis.Client); ok && r != nil {
		return r.Options().DB
	}
	return 0
}

// honoursDeadlines reports whether calls on rdb end at their context's
// deadline: go-redis' ContextTimeoutEnabled.
func honoursDeadlines(rdb redis.UniversalClient) bool {
	switch r := rdb.(type) {
	case *redis.Client:
		return r != nil && r.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return r != nil && r.Options().ContextTimeoutEnabled
	}
	return false
}

// poolSize is how many calls rdb runs at once: its connection pool size
// (go-redis' default, 10 per CPU, when it does not say).
func poolSize(rdb redis.UniversalClient) int {
	n := 0
	switch r := rdb.(type) {
	case *redis.Client:
		if r != nil {
			n = r.Options().PoolSize
		}
	case *redis.ClusterClient:
		if r != nil {
			n = r.Options().PoolSize
		}
	}
	if n <= 0 {
		n = 10 * runtime.GOMAXPROCS(0)
	}
	return n
}

func isCluster(rdb redis.UniversalClient) bool {
	_, ok := rdb.(*redis.ClusterClient)
	return ok
}

func isRing(rdb redis.UniversalClient) bool {
	_, ok := rdb.(*redis.Ring)
	return ok
}

func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}

// Close stops the Client's renewal and wake-up machinery. Locks still held
// stop being renewed and their Lost channels close; waiting Lock calls
// return ErrClosed. It waits, for at most a few seconds, for releases,
// renewals and clean-ups still under way in the background. It does not
// close the Redis client.
func (c *Client) Close() error {
	if c == nil || c.b == nil || c.closed.Swap(true) {
		return nil
	}
	c.closeNow()
	c.mu.Lock()
	r, n := c.renewer, c.notifier
	c.renewer, c.notifier = nil, nil
	c.mu.Unlock()
	if r != nil {
		r.stop()
	}
	if n != nil {
		n.stop()
	}
	// One bound for all the waiting below: Redis may hang every part of it.
	deadline := time.Now().Add(2 * cleanupTimeout)
	c.bg.wait(time.Until(deadline))
	if n != nil {
		n.wait(min(time.Until(deadline), listenersGrace))
	}
	return nil
}

// TryLock makes one attempt to take key. It returns ErrNotObtained at once
// if another owner holds it.
//
// On failure the error matches ErrNotObtained (held by another owner, or
// ctx had ended before the call, when it also matches ctx.Err()),
// ErrNoAnswer (ctx ended before Redis answered; it also matches ctx.Err()),
// ErrInvalidKey,
// ErrInvalidTTL, ErrInvalidOption or ErrNilContext (bad input), ErrClosed
// or ErrNilClient, ErrNotReplicated (WithReplicaAck), or wraps the Redis
// client's error.
func (c *Client) TryLock(ctx context.Context, key string, opts ...Option) (*Lock, error) {
	if ctx == nil {
		return nil, ErrNilContext
	}
	r, err := c.request(mutexKind, key, opts, false)
	if err != nil {
		return nil, c.refused(ctx, key, err)
	}
	return c.acquire(ctx, r)
}

// Lock takes key, waiting while another owner holds it until the lock is
// handed over or ctx ends. A waiter lines up in Redis next to the lock; a
// release hands the lock straight to the first waiter still in line, which
// learns of it over its Client's one pub/sub subscription: no polling, no
// herd. Waiters also wake when the holder's lease runs out, so the lock of a
// crashed holder is taken at its expiry. Without WithFair a Lock call may
// take a free lock ahead of the line; with WithFair it never does. A quorum
// Client waits in a line per process instead.
//
// On failure the error is as for TryLock; when ctx ends while the lock is
// held by another it matches both ErrNotObtained and ctx.Err(), and when ctx
// ends before Redis answered at all, ErrNoAnswer and ctx.Err(). Lock returns within ctx's deadline
// whatever Redis does; a grant that Redis makes after the caller gave up is
// released at once in the background.
func (c *Client) Lock(ctx context.Context, key string, opts ...Option) (*Lock, error) {
	if ctx == nil {
		return nil, ErrNilContext
	}
	r, err := c.request(mutexKind, key, opts, true)
	if err != nil {
		return nil, c.refused(ctx, key, err)
	}
	return c.acquire(ctx, r)
}

// acquire runs r on the backend, observed.
func (c *Client) acquire(ctx context.Context, r *request) (*Lock, error) {
	if c.obs == nil {
		return c.b.lock(ctx, r)
	}
	start := time.Now()
	ctx = c.obs.Start(ctx, EventAcquire, r.key)
	l, err := c.b.lock(ctx, r)
	e := Event{Kind: EventAcquire, Key: r.key, Err: err, Duration: time.Since(start)}
	if !r.queuedAt.IsZero() {
		e.Wait = time.Since(r.queuedAt)
	}
	if l != nil {
		e.Fence, e.How, e.Link = l.fence, r.how, r.link
	}
	c.obs.Observe(ctx, e)
	if l != nil {
		l.announce()
	}
	return l, err
}

// refused reports an acquire of key that request refused (bad input, a
// closed Client) as the failed acquire it is, and returns err: a Client
// closed by mistake must show on the dashboards.
func (c *Client) refused(ctx context.Context, key string, err error) error {
	if c != nil && c.obs != nil {
		ctx = c.obs.Start(ctx, EventAcquire, key)
		c.obs.Observe(ctx, Event{Kind: EventAcquire, Key: key, Err: err})
	}
	return err
}

// queued records that r lined up to wait.
func (c *Client) queued(ctx context.Context, r *request) {
	if r.queuedAt.IsZero() {
		r.queuedAt = time.Now()
		c.observe(ctx, Event{Kind: EventQueued, Key: r.key})
	}
}

// request validates one call that asks for a hold of kind k on key.
func (c *Client) request(k *kind, key string, opts []Option, wait bool) (*request, error) {
	if err := c.usable(); err != nil {
		return nil, err
	}
	if err := validateKey(key); err != nil {
		return nil, err
	}
	// The options write into the request itself: a config of its own would
	// escape through the option functions and cost an allocation per call.
	r := &request{kind: k, key: key, wait: wait, tail: defaultTail, acquireArg: k.acquireArg}
	if err := r.cfg.build(opts); err != nil {
		return nil, err
	}
	if err := c.b.serves(k, &r.cfg); err != nil {
		return nil, err
	}
	cfg := &r.cfg
	if cfg.ownerSet && !k.reentrant {
		return nil, fmt.Errorf("%w: WithOwner (reentrancy) is for locks, not for the %s %q", ErrInvalidOption, k.primitive, key)
	}
	r.names, r.token = c.names(k, key), newToken()
	if err := c.checkTag(key, r.names.lock); err != nil {
		return nil, err
	}
	if cfg.owner != "" || cfg.meta != processMetadata {
		r.tail = strconv.Itoa(len(cfg.owner)) + ":" + cfg.owner + cfg.meta
	}
	return r, nil
}

func (c *Client) usable() error {
	switch {
	case c == nil || c.b == nil: // nil, or zero (not made by New)
		return ErrNilClient
	case c.broken != nil:
		return c.broken
	case c.closed.Load():
		return ErrClosed
	}
	return nil
}

// checkTag refuses, on a Cluster, a lock whose Redis key lock has no hash
// tag: a name beginning with '}' ("<prefix>{}x}": an empty tag makes Redis
// hash the whole key), or a prefix with an empty tag of its own. Its line
// and other keys would then hash to other slots than its grant, and every
// script over them would fail with CROSSSLOT: a TryLock of a free lock
// (grant and counter only) would succeed and its Release fail, leaving
// the lock held until its lease ran out.
func (c *Client) checkTag(key, lock string) error {
	if c.cluster && hashTag(lock) == lock {
		return fmt.Errorf("%w: %q: on a Cluster its key %q would have no hash tag to keep its keys in one slot", ErrInvalidKey, key, lock)
	}
	return nil
}

// names are the keys of the lock of kind k named key.
func (c *Client) names(k *kind, key string) keyNames {
	names := newKeyNames(c.prefix+k.prefix+"{"+key+"}"+lineSuffix, c.counter)
	names.counted = c.counted
	if k.shared {
		names.keys = append(names.keys, names.lock+":h", names.lock+":d")
	}
	return names
}

// ensureNotifier returns the Client's notifier, starting it on first use; nil after
// Close.
func (c *Client) ensureNotifier() *notifier {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.notifier == nil && !c.closed.Load() {
		c.notifier = newNotifier(c, c.b.subscriptions())
	}
	return c.notifier
}

// request is one call that asks for a hold.
type request struct {
	kind *kind
	// acquireArg and releaseArg are the kind's own arguments of its acquire
	// and release scripts (see kind)
	acquireArg, releaseArg any
	key                    string
	names                  keyNames
	cfg                    lockConfig
	token                  string
	tail                   string // "<len(owner)>:<owner><meta>", see lua/lib.lua
	entry                  string // the call's line entry (see lua/lib.lua), once it waits
	// tryCmd holds the call of a try attempt (see script.command), so that
	// it costs no allocation of its own; attempts of a call run one after
	// another
	tryCmd [8]any
	wait   bool
	// sent is when the last attempt that left this call in line was sent: a
	// handoff to it happened later, so its lease runs at least until
	// sent + ttl.
	sent time.Time

	// for observers
	how      How
	queuedAt time.Time
	link     string
}

// defaultTail is the tail of a lock without owner or WithMetadata.
var defaultTail = "0:" + processMetadata

// lineEntry sets r.entry, the call's entry in the line of a Client with id,
// for a call that gives up at ctx's deadline (see lua/lib.lua). A
// semaphore's waiter carries its limit after its mode ("s3"): a handoff
// made while no limit is recorded records it.
func (r *request) lineEntry(ctx context.Context, clientID string) string {
	if r.entry == "" {
		deadline := "0"
		if d, ok := ctx.Deadline(); ok {
			deadline = strconv.FormatInt(d.UnixMilli(), 10)
		}
		limit := ""
		if r.kind == permitKind {
			limit, _ = r.acquireArg.(string) // the Semaphore's limit (see Semaphore.acquire)
		}
		r.entry = r.token + " " + clientID + " " + strconv.FormatInt(r.cfg.ttl.Milliseconds(), 10) + " " +
			r.kind.mode + limit + " " + deadline + " " + r.tail
	}
	return r.entry
}

// newToken returns 128 random bits; crypto/rand makes reuse practically
// impossible, so a token identifies one Lock call.
func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go ≥ 1.24)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func notObtained(key string, cause error) error {
	return fmt.Errorf("%w: %q: %w", ErrNotObtained, key, cause)
}

func noAnswer(key string, cause error) error {
	return fmt.Errorf("%w: %q: %w", ErrNoAnswer, key, cause)
}

// nowMillis is the caller's clock as the scripts record it; a variable so
// that tests can tell whose clock a grant carries.
var nowMillis = func() int64 { return time.Now().UnixMilli() }
