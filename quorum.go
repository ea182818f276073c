package distlock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed lua/raise_fence.lua
	raiseFenceSource string
	raiseFenceScript = redis.NewScript(raiseFenceSource)
)

// NewQuorum returns a Client whose locks are granted by a majority of
// independent Redis nodes, as in the Redlock algorithm of the Redis docs. It
// has the same methods and Lock behaviour as a single-node Client.
//
// An acquire runs on all nodes in parallel, each call bounded by a per-node
// timeout (TTL/20, within [20ms, 500ms]); it returns as soon as the
// answers decide the outcome, releasing grants that arrive later. It succeeds only if a majority
// granted it and the lease left, TTL − elapsed − drift (drift = TTL/100 +
// 2ms), is positive; otherwise it is undone on every node. Extend and
// renewal need a majority too, and Lost fires when a majority can no longer
// be confirmed. The fence is the highest fence counter in the granting
// majority; when the majority's counters differ it lifts them all to that
// value (a second round trip), so any later majority, which overlaps this
// one, mints a larger fence.
//
// Nodes must not come back empty too soon: a node restarted without
// persistence must stay down for at least the longest TTL in use (the
// "delayed restart" rule), or it may grant a lock a majority still holds,
// and its fence counter must survive (use AOF) for fences to keep rising.
// Fair mode and WithReplicaAck are not available on a quorum Client.
// Inspect, List and ForceRelease look at the first node.
func NewQuorum(nodes []redis.UniversalClient, opts ...ClientOption) *Client {
	var first redis.UniversalClient
	if len(nodes) > 0 {
		first = nodes[0]
	}
	c := New(first, opts...)
	c.nodes = slices.Clone(nodes)
	c.suspect = make([]atomic.Bool, len(nodes))
	for _, n := range nodes {
		c.nilRDB = c.nilRDB || isNil(n)
	}
	return c
}

// QuorumError reports a quorum operation that did not reach a majority. It
// matches ErrNotObtained with errors.Is, and unwraps to the node errors.
type QuorumError struct {
	Key    string
	Quorum int     // nodes needed
	Nodes  []error // per node: nil where the node agreed
}

func (e *QuorumError) Error() string {
	var b strings.Builder
	agreed := 0
	for _, err := range e.Nodes {
		if err == nil {
			agreed++
		}
	}
	fmt.Fprintf(&b, "distlock: %q: %d of %d nodes agreed, %d needed", e.Key, agreed, len(e.Nodes), e.Quorum)
	for i, err := range e.Nodes {
		if err != nil {
			fmt.Fprintf(&b, "; node %d: %v", i, err)
		}
	}
	return b.String()
}

// Is makes errors.Is(err, ErrNotObtained) true.
func (e *QuorumError) Is(target error) bool { return target == ErrNotObtained }

// Unwrap returns the node errors.
func (e *QuorumError) Unwrap() []error {
	var errs []error
	for _, err := range e.Nodes {
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

var (
	errHeldOnNode = fmt.Errorf("%w: held by another owner", ErrNotObtained)
	errPending    = errors.New("no answer yet")
	errSuspect    = errors.New("failed recently")
)

// A node that failed at the network level (error, or no answer in time) is
// suspect until one of its answers comes back: quorum decisions still send
// it every call but do not wait for it, so a dead node does not stretch
// every attempt to the timeout (which would leave long windows for split
// votes), and a revived node counts again from its first answer.
func (c *Client) isSuspect(i int) bool {
	return c.suspect[i].Load()
}

// noteNode records whether node i just answered. Redis error replies come
// from a live node and count as answers.
func (c *Client) noteNode(i int, err error) {
	var reply redis.Error
	c.suspect[i].Store(err != nil && !errors.As(err, &reply))
}

// decided returns an enough func for onNodes: the outcome is known once yes
// nodes said yes, or so many said anything else that a majority is out of
// reach.
func (c *Client) decided(yes func(nodeResult) bool) func([]nodeResult) bool {
	return func(res []nodeResult) bool {
		ok, no := 0, 0
		for _, r := range res {
			switch {
			case r.err == errPending:
			case yes(r):
				ok++
			default:
				no++
			}
		}
		return ok >= c.quorum() || no > len(c.nodes)-c.quorum()
	}
}

func (c *Client) isQuorum() bool { return len(c.nodes) > 1 }

func (c *Client) quorum() int { return len(c.nodes)/2 + 1 }

// nodeTimeout bounds one node's part of a quorum operation: small against
// the TTL, so that a dead node does not eat the lease.
func nodeTimeout(ttl time.Duration) time.Duration {
	return clamp(ttl/20, 20*time.Millisecond, 500*time.Millisecond)
}

type nodeResult struct {
	val any
	err error
}

// onNodes runs f on every node at once and waits at most timeout (or until
// ctx ends) for the answers; a node that has not answered by then counts as
// failed. If enough is non-nil, it stops waiting as soon as enough says the
// answers so far decide the outcome; answers after the decision go to late,
// if set. Each call runs in its own goroutine because a go-redis client
// without ContextTimeoutEnabled would not stop at the deadline.
func (c *Client) onNodes(ctx context.Context, timeout time.Duration, f nodeFunc, enough func([]nodeResult) bool, late func(int, nodeResult)) []nodeResult {
	// Node calls are bounded by timeout only, and the last one to finish
	// cancels: neither an early decision nor the caller's context ending
	// after it may cut off a call whose answer (a grant) late still has to
	// see. The caller's context still ends the wait.
	parent := ctx
	ctx, cancel := boundedContext(context.WithoutCancel(parent), timeout)
	var (
		mu       sync.Mutex
		decided  bool
		res      = make([]nodeResult, len(c.nodes))
		answered = make(chan struct{}, len(c.nodes))
		running  atomic.Int32
	)
	for i := range res {
		res[i].err = errPending
	}
	for i := range res {
		if c.isSuspect(i) {
			res[i].err = errSuspect // decided without it, unless it answers first
		}
	}
	running.Store(int32(len(c.nodes)))
	for i, rdb := range c.nodes {
		go func() {
			defer func() {
				if running.Add(-1) == 0 {
					cancel() // the last call is done: nothing left to bound
				}
			}()
			v, err := f(ctx, i, rdb)
			c.noteNode(i, err)
			mu.Lock()
			if decided {
				mu.Unlock()
				if late != nil {
					late(i, nodeResult{v, err})
				}
				return
			}
			res[i] = nodeResult{v, err}
			mu.Unlock()
			answered <- struct{}{}
		}()
	}
	decide := func() []nodeResult {
		mu.Lock()
		defer mu.Unlock()
		decided = true
		out := slices.Clone(res)
		for i := range out {
			if out[i].err == errPending || out[i].err == errSuspect {
				c.noteNode(i, context.DeadlineExceeded)
				out[i].err = fmt.Errorf("no answer within %v: %w", timeout, context.DeadlineExceeded)
			}
		}
		return out
	}
	for range c.nodes {
		select {
		case <-answered:
			if enough != nil {
				mu.Lock()
				done := enough(res)
				mu.Unlock()
				if done {
					return decide()
				}
			}
		case <-ctx.Done():
			return decide()
		case <-parent.Done():
			return decide()
		}
	}
	return decide()
}

type nodeFunc func(context.Context, int, redis.UniversalClient) (any, error)

// acquireQuorum is attempt for a quorum Client.
func (c *Client) acquireQuorum(ctx context.Context, key string, cfg lockConfig, token string) (*Lock, time.Duration, error) {
	if err := ctx.Err(); err != nil {
		return nil, -1, notObtained(key, err)
	}
	names := c.names(key)
	owner, reentrant := cfg.ownerArgs(token)
	start := time.Now()
	granted := func(r nodeResult) bool {
		v, _ := r.val.([]int64)
		return r.err == nil && len(v) == 3 && v[0] == 1
	}
	// A node that grants after the outcome was decided joins the lock, or is
	// released at once if the acquire failed.
	stragglers := &lateGrants{pending: map[int]string{}}
	releaseOn := func(i int, fence string) {
		lateCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), nodeTimeout(cfg.ttl))
		defer cancel()
		_ = releaseScript.Run(lateCtx, c.nodes[i], names.all(), owner, fence, names.notice, lineEntryTTL.Milliseconds()).Err()
	}
	late := func(i int, r nodeResult) {
		if granted(r) {
			if f := strconv.FormatInt(r.val.([]int64)[1], 10); !stragglers.adopt(i, f) {
				releaseOn(i, f)
			}
		}
	}
	res := c.onNodes(ctx, nodeTimeout(cfg.ttl), func(ctx context.Context, _ int, rdb redis.UniversalClient) (any, error) {
		return acquireScript.Run(ctx, rdb, []string{names.lock, names.fence},
			owner, cfg.ttl.Milliseconds(), reentrant, cfg.meta, start.UnixMilli()).Int64Slice()
	}, c.decided(granted), late)
	fences := make([]string, len(res))
	errs := make([]error, len(res))
	grants, top, holderTTL := 0, int64(0), time.Duration(-1)
	for i, r := range res {
		v, _ := r.val.([]int64)
		switch {
		case r.err != nil:
			errs[i] = r.err
		case len(v) < 2:
			errs[i] = fmt.Errorf("unexpected reply %v", v)
		case v[0] == 1:
			grants++
			fences[i] = strconv.FormatInt(v[1], 10)
			top = max(top, v[1])
		default:
			errs[i] = errHeldOnNode
			if ttl := time.Duration(v[1]) * time.Millisecond; holderTTL < 0 || ttl < holderTTL {
				holderTTL = ttl
			}
		}
	}
	if grants >= c.quorum() && cfg.ttl-time.Since(start)-drift(cfg.ttl) > 0 {
		if err := c.raiseFences(ctx, names, fences, top, cfg.ttl, errs); err == nil {
			l := newQuorumLock(c, key, names, token, owner, top, fences, cfg, start)
			stragglers.settle(l)
			return l, -1, nil
		}
	}
	for i, f := range stragglers.settle(nil) {
		fences[i] = f
	}
	c.releaseNodes(context.WithoutCancel(ctx), names, owner, fences, cfg.ttl)
	return nil, holderTTL, &QuorumError{Key: key, Quorum: c.quorum(), Nodes: errs}
}

// raiseFences lifts the granting nodes' counters to top when they differ,
// and fails unless a majority holds top afterwards.
func (c *Client) raiseFences(ctx context.Context, names keyNames, fences []string, top int64, ttl time.Duration, errs []error) error {
	topS := strconv.FormatInt(top, 10)
	behind := false
	for _, f := range fences {
		behind = behind || (f != "" && f != topS)
	}
	if !behind {
		return nil
	}
	res := c.onNodes(ctx, nodeTimeout(ttl), func(ctx context.Context, i int, rdb redis.UniversalClient) (any, error) {
		if fences[i] == "" {
			return nil, errHeldOnNode
		}
		return raiseFenceScript.Run(ctx, rdb, []string{names.fence}, top).Int64()
	}, nil, nil)
	ok := 0
	for i, r := range res {
		if r.err == nil {
			ok++
		} else if errs[i] == nil {
			errs[i] = fmt.Errorf("raise fence: %w", r.err)
		}
	}
	if ok < c.quorum() {
		return errors.New("fence not raised on a majority")
	}
	return nil
}

// releaseNodes runs the release script on every node that granted (fences[i]
// set), and reports how many still held the grant.
func (c *Client) releaseNodes(ctx context.Context, names keyNames, owner string, fences []string, ttl time.Duration) (held, failed int) {
	res := c.onNodes(ctx, nodeTimeout(ttl), func(ctx context.Context, i int, rdb redis.UniversalClient) (any, error) {
		if fences[i] == "" {
			return []any{int64(-1)}, nil
		}
		return releaseScript.Run(ctx, rdb, names.all(), owner, fences[i], names.notice, lineEntryTTL.Milliseconds()).Slice()
	}, nil, nil)
	for _, r := range res {
		v, _ := r.val.([]any)
		switch {
		case r.err != nil:
			failed++
		case len(v) > 0 && v[0].(int64) >= 0:
			held++
		}
	}
	return held, failed
}

func (l *Lock) releaseQuorum(ctx context.Context) error {
	held, failed := l.client.releaseNodes(ctx, l.names, l.owner, l.fences(), l.lease())
	if held == 0 && failed > 0 {
		return fmt.Errorf("distlock: release %q: %d nodes unreachable", l.key, failed)
	}
	if held == 0 {
		l.end(lost, ErrExpired)
		return ErrNotHeld
	}
	l.client.tellWaiters(l.names, []any{int64(0)})
	l.end(released, ErrReleased)
	return nil
}

// extendNodes runs the extend script on the granting nodes and counts the
// replies: renewed (1), not held (0 or -1) and failed.
func (c *Client) extendNodes(ctx context.Context, names keyNames, owner string, fences []string, ttl time.Duration) (renewed, notHeld int) {
	res := c.onNodes(ctx, nodeTimeout(ttl), func(ctx context.Context, i int, rdb redis.UniversalClient) (any, error) {
		if fences[i] == "" {
			return int64(0), nil
		}
		return extendScript.Run(ctx, rdb, []string{names.lock}, owner, fences[i], ttl.Milliseconds()).Int64()
	}, c.decided(func(r nodeResult) bool { v, _ := r.val.(int64); return r.err == nil && v == 1 }), nil)
	for _, r := range res {
		switch v, _ := r.val.(int64); {
		case r.err != nil:
		case v == 1:
			renewed++
		default:
			notHeld++
		}
	}
	return renewed, notHeld
}

// quorumOutcome turns node counts into the renewal reply: 1 when a majority
// renewed, 0 when a majority can no longer be reached because too many nodes
// said "not held", and an error when it is still undecided (nodes down).
func (c *Client) quorumOutcome(renewed, notHeld int, start time.Time, ttl time.Duration) (int64, error) {
	switch {
	case renewed >= c.quorum() && ttl-time.Since(start)-drift(ttl) > 0:
		return 1, nil
	case notHeld > len(c.nodes)-c.quorum():
		return 0, nil
	}
	return 0, fmt.Errorf("renewed on %d of %d nodes, %d needed", renewed, len(c.nodes), c.quorum())
}

func (l *Lock) extendQuorum(ctx context.Context, ttl time.Duration) (int64, error) {
	start := time.Now()
	renewed, notHeld := l.client.extendNodes(ctx, l.names, l.owner, l.fences(), ttl)
	return l.client.quorumOutcome(renewed, notHeld, start, ttl)
}

// pttlQuorum is the lease a majority still has: the quorum-th longest.
func (l *Lock) pttlQuorum(ctx context.Context) (int64, error) {
	c := l.client
	fences := l.fences()
	res := c.onNodes(ctx, nodeTimeout(l.lease()), func(ctx context.Context, i int, rdb redis.UniversalClient) (any, error) {
		if fences[i] == "" {
			return int64(-3), nil
		}
		return pttlScript.Run(ctx, rdb, []string{l.names.lock}, l.owner, fences[i]).Int64()
	}, nil, nil)
	var ttls []int64
	for _, r := range res {
		if v, ok := r.val.(int64); r.err == nil && ok && v >= 0 {
			ttls = append(ttls, v)
		}
	}
	if len(ttls) < c.quorum() {
		return -3, nil
	}
	slices.Sort(ttls)
	return ttls[len(ttls)-c.quorum()], nil
}

func newQuorumLock(c *Client, key string, names keyNames, token, owner string, fence int64, fences []string, cfg lockConfig, start time.Time) *Lock {
	l := newLock(c, key, names, token, owner, fence, cfg)
	l.nodeFences = fences
	return l.granted(start)
}

func (l *Lock) lease() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ttl
}

func boundedContext(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d)
}

// fences returns a copy of the per-node fences; late grants add to them.
func (l *Lock) fences() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.nodeFences)
}

// lateGrants collects grants that arrive after a quorum acquire decided, so
// that the lock holds (and renews, and releases) every node that granted.
type lateGrants struct {
	mu      sync.Mutex
	settled bool
	lock    *Lock
	pending map[int]string
}

// adopt takes a late grant; false means the acquire failed: release it.
func (g *lateGrants) adopt(i int, fence string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case !g.settled:
		g.pending[i] = fence
	case g.lock != nil:
		g.lock.mu.Lock()
		g.lock.nodeFences[i] = fence
		g.lock.mu.Unlock()
	default:
		return false
	}
	return true
}

// settle records the outcome (l nil: failed) and returns the grants that
// came before it, which the caller releases when the acquire failed.
func (g *lateGrants) settle(l *Lock) map[int]string {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.settled, g.lock = true, l
	if l != nil {
		l.mu.Lock()
		for i, f := range g.pending {
			l.nodeFences[i] = f
		}
		l.mu.Unlock()
	}
	return g.pending
}
