package distlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// NewQuorum returns a Client whose locks are granted by a majority of
// independent Redis servers, as in the Redlock algorithm of the Redis docs.
// It has the same methods and Lock behaviour as a single-node Client.
//
// An acquire runs on all nodes in parallel and decides as soon as the
// answers allow, waiting for a node at most TTL/10 (within [50ms, 1s]); a
// node call goes on in the background after that, and a grant that comes
// after the decision joins the lock or is given back. It succeeds only if a
// majority granted it and the lease left, TTL − elapsed − drift (drift =
// TTL/100 + 2ms), is positive; otherwise it is undone on every node. Extend
// and renewal need a majority too, and Lost fires when a majority can no
// longer be confirmed. The fence is the highest fence counter in the
// granting majority; when the majority's counters differ it lifts them all
// to that value (a second round trip), so any later majority, which
// overlaps this one, draws a larger fence. A reentrant Lock returns the
// fence that a majority of nodes report for the grant.
//
// Nodes must not come back empty too soon: a node restarted without
// persistence must stay down for at least the longest TTL in use (the
// "delayed restart" rule), or it may grant a lock a majority still holds,
// and its fence counter must survive (use AOF) for fences to keep rising.
// Waiters of one process line up locally and only the first asks the nodes.
// WithFair is refused (ErrInvalidOption): a line across independent nodes
// would need a majority of its own. WithReplicaAck makes every method
// return ErrInvalidOption. Inspect, List and ForceRelease look at the first
// node. A node may be a Cluster client only with a key prefix that has a
// hash tag (WithKeyPrefix("app{locks}:")), which keeps the node's one fence
// counter in the slot of every lock; otherwise every method returns
// ErrInvalidOption.
func NewQuorum(nodes []redis.UniversalClient, opts ...ClientOption) *Client {
	cfg := buildClientConfig(opts)
	c := newClient(cfg)
	if len(nodes) == 0 || slices.ContainsFunc(nodes, func(n redis.UniversalClient) bool { return isNil(n) }) {
		c.broken = ErrNilClient
	} else if cfg.ack != (replicaAck{}) {
		c.broken = fmt.Errorf("%w: WithReplicaAck needs a single-node Client", ErrInvalidOption)
	} else if err := prefixClash(cfg.prefix); err != nil {
		c.broken = err
	} else if slices.ContainsFunc(nodes, isCluster) && hashTag(cfg.prefix) == cfg.prefix {
		// A node's fence counter is one key, which must be in the slot of
		// every lock on it: without a tag in the prefix every script on a
		// Cluster node fails with CROSSSLOT, an answer that counts as a
		// refusal. The node would never grant, unnoticed while the others
		// make a majority; with a majority of such nodes a TryLock would
		// say "held" and a Lock wait until its ctx ended.
		c.broken = fmt.Errorf("%w: key prefix %q: a Cluster client as a quorum node needs a hash tag in the prefix (\"app{locks}:\"), which keeps the node's fence counter in the slot of every lock", ErrInvalidOption, cfg.prefix)
	}
	c.b = &quorum{c: c, nodes: slices.Clone(nodes), suspect: make([]atomic.Bool, len(nodes))}
	c.deadlines = true // onNodes never waits for a node past ctx
	if len(nodes) > 0 {
		c.adminDeadlines = honoursDeadlines(nodes[0])
		c.counted = newCounterScripts(c.prefix, database(nodes[0]))
	}
	return c
}

// QuorumError reports a quorum operation that did not reach a majority. It
// matches ErrNotObtained with errors.Is, and unwraps to the node errors. A
// node that did not answer within the call's decision wait has an error
// whose Timeout method reports true; the error matches
// context.DeadlineExceeded only when the caller's context ended.
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
	errUndecided  = errors.New("no answer before the outcome was known")
	errCallEnded  = errors.New("no answer before the call's context ended")
)

// nodeTimeout is a node that did not answer within a quorum call's
// decision wait. It is a timeout (Timeout reports true, as a net.Error's
// does) but not context.DeadlineExceeded: a QuorumError unwraps to its node
// errors, and errors.Is(err, context.DeadlineExceeded) must say that the
// caller's context ended, not that one node was slow.
type nodeTimeout struct{ wait time.Duration }

func (e nodeTimeout) Error() string { return fmt.Sprintf("no answer within %v", e.wait) }
func (e nodeTimeout) Timeout() bool { return true }

// quorum is the backend of a NewQuorum Client.
type quorum struct {
	c     *Client
	nodes []redis.UniversalClient
	// suspect[i]: node i failed at the network level and is not waited
	// for until one of its answers comes back (see onNodes).
	suspect []atomic.Bool
}

func (q *quorum) subscriptions() []redis.UniversalClient { return q.nodes }
func (q *quorum) admin() redis.UniversalClient           { return q.nodes[0] }
func (q *quorum) publish() string                        { return "PUBLISH" }
func (q *quorum) passOn(hold)                            {} // no Redis line, no handoffs
// serves refuses every kind but the mutex: the scripts of the others keep
// state that a majority of independent nodes cannot agree on. It refuses
// WithFair too, which needs the one waiting line of a single node; when a
// request is built, so that NewMutex refuses it and Mutex.Lock never
// retries it.
func (q *quorum) serves(k *kind, cfg *lockConfig) error {
	if k != mutexKind {
		return fmt.Errorf("%w: %s needs a single-node Client, not a quorum", ErrInvalidOption, article(k.primitive))
	}
	if cfg != nil && cfg.fair {
		return fmt.Errorf("%w: WithFair needs a single-node Client", ErrInvalidOption)
	}
	return nil
}

// article prefixes a noun with "a" or "an".
func article(noun string) string {
	if strings.ContainsRune("aeiou", rune(noun[0])) {
		return "an " + noun
	}
	return "a " + noun
}

func (q *quorum) majority() int { return len(q.nodes)/2 + 1 }

// decisionWait bounds how long a quorum operation waits for a node: small
// against the TTL, so that a dead node does not eat the lease, yet enough
// for a new connection and a script over a slow link.
func decisionWait(ttl time.Duration) time.Duration {
	return min(max(ttl/10, 50*time.Millisecond), time.Second)
}

func (q *quorum) lock(ctx context.Context, r *request) (*Lock, error) {
	if err := ctx.Err(); err != nil {
		return nil, notObtained(r.key, err)
	}
	if n := q.c.existingNotifier(); n == nil || !r.wait || r.cfg.owner != "" || !n.waitingLocally(r.names.channel()) {
		// Ask at once when nobody in this process waits for it, for a
		// TryLock (one attempt, never a place in line) and for an owner,
		// who may hold it already: behind a waiter of its own Client, whom
		// only its Release can serve, a reentry would wait forever.
		l, _, err := q.attempt(ctx, r)
		if !r.wait || !errors.Is(err, ErrNotObtained) {
			r.how = HowFree
			return l, err
		}
		if ctx.Err() != nil {
			return nil, gaveUp(r.key, ctx.Err(), err)
		}
	}
	n := q.c.ensureNotifier()
	if n == nil {
		return nil, notObtained(r.key, ErrClosed)
	}
	return q.wait(ctx, r, n)
}

// wait lines up in this process and asks the nodes when first in line: when
// a release is announced (by any node, or by a Release in this process),
// when the holder's lease runs out, and after a backoff, so that a lost
// message never hangs it.
func (q *quorum) wait(ctx context.Context, r *request, n *notifier) (*Lock, error) {
	w := n.joinLocal(r.names.channel())
	q.c.queued(ctx, r)
	acquired := false
	defer func() { n.leaveLine(w, acquired) }()
	var last error
	for try := 1; ; {
		wait := lineRefresh
		// Only the head asks, so that the process sends one attempt per
		// release, not one per waiter; an owner asks whenever it wakes,
		// since its owner may have come to hold the lock meanwhile.
		if r.cfg.owner != "" || n.isHead(w) {
			began := time.Now()
			l, holderTTL, err := q.attempt(ctx, r)
			if !errors.Is(err, ErrNotObtained) {
				acquired, r.how = err == nil, HowAfterWait
				return l, err
			}
			last = err
			wait = quorumBackoff(try)
			if holderTTL >= 0 {
				wait = min(wait, holderTTL)
			}
			try++
			if splitVote(err) {
				// Contenders that split the nodes between them must not
				// retry together, or they split again (Redlock's advice):
				// a random delay of a few attempt durations separates them.
				wait = rand.N(3*time.Since(began) + time.Millisecond)
			}
		}
		if _, err := q.c.park(ctx, w, wait); err != nil {
			return nil, gaveUp(r.key, err, last)
		}
	}
}

// quorumBackoff is the head's wait after its n-th failed attempt when no
// release is announced: 1ms doubling to 100ms, jittered to [d/2, d].
func quorumBackoff(n int) time.Duration {
	d := time.Millisecond << min(n-1, 7)
	d = min(d, 100*time.Millisecond)
	return d/2 + rand.N(d/2+1)
}

// splitVote reports a quorum attempt that some nodes granted but too few.
func splitVote(err error) bool {
	var qe *QuorumError
	return errors.As(err, &qe) && slices.Contains(qe.Nodes, nil)
}

// gaveUp is the error of a Lock call that stopped waiting because of err; a
// quorum error from the last attempt says more than "held" and is kept.
func gaveUp(key string, err, last error) error {
	var qe *QuorumError
	if errors.As(last, &qe) {
		return fmt.Errorf("%w: %w", qe, err)
	}
	return notObtained(key, err)
}

// attempt asks every node once. It returns the lock, or an error and the
// shortest lease left among the nodes that found it held (-1 if none).
// Every grant of a failed attempt, including one that comes late, is given
// back.
func (q *quorum) attempt(ctx context.Context, r *request) (*Lock, time.Duration, error) {
	start := time.Now()
	// Each attempt is its own grant: a late give-back of a failed attempt
	// must never release a later one of the same call.
	token := newToken()
	settled := make(chan struct{})
	var won *Lock // set before settled is closed
	// Node calls outlive the decision; each gives back what it was granted
	// once the attempt is known to have failed, or once its Lock no longer
	// holds: a grant that lands after the Lock's Release or loss would
	// otherwise stay on the node, for nobody, for its TTL. (A Release that
	// ends the hold after this check reaches the node after this grant.)
	// The node's counter is lifted either way, as on the other nodes. Both
	// run in the node's goroutine, which Close waits for. A call that ended
	// at its own bound (a frozen or slow node) leaves ctx done, yet it may
	// have landed, or land when the node resumes: its give-back gets a
	// bound of its own, cleanupTimeout, as a Release's delete does (not
	// once Close began, whose own bound it would outlive).
	var top int64 // the grant's fence, once settled
	late := func(ctx context.Context, i int, res nodeResult) {
		<-settled
		if ctx.Err() != nil && !q.c.closed.Load() {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
			defer cancel()
		}
		if v, _ := res.val.([]int64); won != nil && isGrant(res) && v[1] != top {
			_ = raiseFence(ctx, q.nodes[i], r.names, token, top).Err() // as raiseFences did on the others
		}
		if won == nil || (isGrant(res) || res.err != nil) && !won.isHeld() {
			_ = q.giveBackNow(ctx, i, r.names, token)
		}
	}
	grant, ttl := tryGrant(token, r.tail), r.cfg.ttl.Milliseconds()
	res := q.onNodes(ctx, decisionWait(r.cfg.ttl), func(ctx context.Context, i int, rdb redis.UniversalClient) (any, error) {
		return tryReply(r.names.counted.of(tryScript).run(ctx, rdb, r.names.keys[:2], grant, ttl), nil)
	}, q.grantDecided, late)
	errs := make([]error, len(res))
	grants, holderTTL := 0, time.Duration(-1)
	var fences []int64
	for i, x := range res {
		v, _ := x.val.([]int64)
		switch {
		case x.err != nil:
			errs[i] = x.err
		case len(v) < 2:
			errs[i] = fmt.Errorf("unexpected reply %v", v)
		case v[0] == 1:
			grants++
			top = max(top, v[1])
			fences = append(fences, v[1])
		default:
			errs[i] = errHeldOnNode
			if ttl := time.Duration(v[1]) * time.Millisecond; holderTTL < 0 || ttl < holderTTL {
				holderTTL = ttl
			}
		}
	}
	// valid reports whether the lease is still valid; when it is not, the
	// nodes that granted it say why in the error.
	valid := func() bool {
		if r.cfg.ttl-time.Since(start)-drift(r.cfg.ttl) > 0 {
			return true
		}
		for i, x := range res {
			if errs[i] == nil && isGrant(x) {
				errs[i] = fmt.Errorf("granted, but the lease's validity ran out %v after the attempt began", time.Since(start).Round(time.Millisecond))
			}
		}
		return false
	}
	ok := grants >= q.majority() && valid()
	reentry, agreed := reentryFence(res, q.majority())
	switch {
	case !ok:
	case reentry && agreed == 0:
		ok = false
		for i, x := range res {
			if isGrant(x) {
				errs[i] = fmt.Errorf("%w: took the lock again with fence %d, and no majority of nodes reports one fence yet", ErrNotObtained, x.val.([]int64)[1])
			}
		}
	case reentry:
		top = agreed // the grant's: a node that granted it late may not be settled yet
	case slices.ContainsFunc(fences, func(f int64) bool { return f != top }):
		// (a second round trip: the lease left is looked at again after it)
		ok = q.raiseFences(ctx, r, token, res, top, errs) && valid()
	}
	if ok {
		r.token = token
		won = newLock(q.c, r, top, start, r.cfg.ttl)
	}
	close(settled)
	if ok {
		return won, -1, nil
	}
	for i, x := range res {
		if x.err != nil || isGrant(x) {
			q.giveBack(i, r.names, token)
		}
	}
	qe := &QuorumError{Key: r.key, Quorum: q.majority(), Nodes: errs}
	if ctx.Err() != nil {
		return nil, holderTTL, fmt.Errorf("%w: %w", qe, ctx.Err())
	}
	return nil, holderTTL, qe
}

// grantDecided is decided(isGrant) for an attempt, except that grants that
// took the lock again (reentries) decide only once a majority of nodes
// agree on its fence: a node that granted the first hold after its quorum
// decided keeps a fence of its own until attempt's late lifts it, and
// reports that one for a reentry it answers meanwhile. The nodes that hold
// the grant's fence are a majority (raiseFences saw to it), so waiting for
// one more answer finds it. Too few grants decide a failure at once.
func (q *quorum) grantDecided(res []nodeResult) bool {
	if !q.decided(isGrant)(res) {
		return false
	}
	reentry, agreed := reentryFence(res, q.majority())
	return !reentry || agreed != 0 || countGrants(res) < q.majority()
}

func countGrants(res []nodeResult) int {
	n := 0
	for _, x := range res {
		if isGrant(x) {
			n++
		}
	}
	return n
}

// reentryFence reports whether the grants in res include a reentry (a hold
// added to a lock its owner held), and the fence that a majority of the
// grants report, 0 if none. Grants on a majority of nodes that had the lock
// free are a new grant, not a reentry, whatever the others say: the owner's
// earlier grant is left on a minority only (a lost hold whose copy on one
// node outlived the others), and the new grant takes its fence as any
// other does.
func reentryFence(res []nodeResult, majority int) (reentry bool, fence int64) {
	fresh := 0
	for i, x := range res {
		if !isGrant(x) {
			continue
		}
		v := x.val.([]int64)
		if len(v) == 3 && v[2] > 1 {
			reentry = true
		} else {
			fresh++
		}
		same := 0
		for _, y := range res[i:] {
			if isGrant(y) && y.val.([]int64)[1] == v[1] {
				same++
			}
		}
		if same >= majority {
			fence = v[1]
		}
	}
	if fresh >= majority {
		return false, 0
	}
	return reentry, fence
}

func isGrant(r nodeResult) bool {
	v, _ := r.val.([]int64)
	return r.err == nil && len(v) >= 3 && v[0] == 1
}

// giveBack releases, in the background, whatever node i granted token.
func (q *quorum) giveBack(i int, names keyNames, token string) {
	q.c.background(func(ctx context.Context) { _ = q.giveBackNow(ctx, i, names, token) })
}

// giveBackNow releases whatever node i granted token. It announces no
// release: the lock was never held, and the notice woke this caller's own
// waiter at once, which attempted again, was granted by that node again
// and gave it back, in a loop, while a node lacked a majority holder's
// grant. Contenders that split the nodes between them retry after a
// random delay (wait), released or not.
func (q *quorum) giveBackNow(ctx context.Context, i int, names keyNames, token string) error {
	return runRelease(ctx, q.nodes[i], hold{mutexKind, names, token, nil}, publishArg, "", false).Err()
}

// raiseFence settles one node on the grant's fence top (raise_fence.lua).
func raiseFence(ctx context.Context, rdb redis.UniversalClient, names keyNames, token string, top int64) *redis.Cmd {
	return raiseFenceScript.run(ctx, rdb, []string{names.fence, names.keys[0]}, top, token)
}

// raiseFences lifts the granting nodes' counters to top, and reports
// whether a majority holds top afterwards; it returns as soon as the
// answers decide that.
func (q *quorum) raiseFences(ctx context.Context, r *request, token string, acq []nodeResult, top int64, errs []error) bool {
	res := q.onNodes(ctx, decisionWait(r.cfg.ttl), func(ctx context.Context, i int, rdb redis.UniversalClient) (any, error) {
		if !isGrant(acq[i]) {
			return nil, errHeldOnNode
		}
		return raiseFence(ctx, rdb, r.names, token, top).Int64()
	}, q.decided(func(x nodeResult) bool { return x.err == nil }), nil)
	ok := 0
	for i, x := range res {
		if x.err == nil {
			ok++
		} else if errs[i] == nil {
			errs[i] = fmt.Errorf("raise fence: %w", x.err)
		}
	}
	return ok >= q.majority()
}

// release returns once a majority has released the lock (the other nodes'
// calls go on in the background), else when every node answered or the
// decision wait ran out. A stopped or blackholed minority so costs a
// Release nothing, as it costs a Lock nothing.
func (q *quorum) release(ctx context.Context, l *Lock, _ string) (releaseOutcome, error) {
	res := q.onNodes(ctx, decisionWait(l.lease()), func(ctx context.Context, _ int, rdb redis.UniversalClient) (any, error) {
		return int64s(runRelease(ctx, rdb, l.hold(), publishArg, "", true), nil)
	}, q.releasedByMajority, nil)
	held, taken, failed, freed := 0, 0, 0, false
	for _, x := range res {
		v, _ := x.val.([]int64)
		switch out := releaseReply(v); {
		case x.err != nil:
			failed++
		case out == releaseTaken:
			taken++
		case out != releaseGone:
			held++
			freed = freed || out == releaseFreed
		}
	}
	// The lock was this Lock's only if a majority held it: copies left on
	// fewer nodes (a node that granted late keeps its copy longer) are
	// freed all the same, but say nothing of the lock.
	switch {
	case held < q.majority() && held+failed >= q.majority():
		return releaseGone, fmt.Errorf("%d nodes unreachable", failed)
	case held < q.majority() && taken > 0:
		return releaseTaken, nil
	case held < q.majority():
		return releaseGone, nil
	case freed:
		if n := q.c.existingNotifier(); n != nil {
			n.deliver(l.names.channel(), "r") // the local line need not wait for Redis' notice
		}
		return releaseFreed, nil
	}
	return releaseHoldsLeft, nil
}

// releasedByMajority is release's enough func: a majority of nodes held the
// lock until this release. Only that decides early, so that the outcome is
// the one waiting for every node would give whenever the answers agree;
// fewer holders leave the outcome to the remaining nodes, as before.
func (q *quorum) releasedByMajority(res []nodeResult) bool {
	held := 0
	for _, x := range res {
		v, _ := x.val.([]int64)
		if out := releaseReply(v); x.err == nil && out != releaseGone && out != releaseTaken {
			held++
		}
	}
	return held >= q.majority()
}

func (q *quorum) extend(ctx context.Context, l *Lock, ttl time.Duration) (extendOutcome, error) {
	start := time.Now()
	res := q.onNodes(ctx, decisionWait(ttl), func(ctx context.Context, _ int, rdb redis.UniversalClient) (any, error) {
		return extendScript.run(ctx, rdb, l.names.keys[:1], l.token, ttl.Milliseconds()).Int64()
	}, q.decided(func(r nodeResult) bool { v, _ := r.val.(int64); return r.err == nil && v == 1 }), nil)
	renewed, notHeld, taken := 0, 0, 0
	for _, x := range res {
		switch v, _ := x.val.(int64); {
		case x.err != nil:
		case v == 1:
			renewed++
		case v < 0:
			taken++
			notHeld++
		default:
			notHeld++
		}
	}
	out := q.outcome(renewed, notHeld, taken, start, ttl)
	if out == extendUndecided && ctx.Err() != nil {
		return out, ctx.Err() // Extend's caller gets its ctx's error, as on a single node
	}
	return out, nil
}

// outcome turns node counts into an extend outcome: done when a majority
// renewed in time, gone when too many nodes said "not held" for a majority
// to be reached (taken when a majority found another grant), and undecided
// while nodes are down.
func (q *quorum) outcome(renewed, notHeld, taken int, start time.Time, ttl time.Duration) extendOutcome {
	switch {
	case renewed >= q.majority() && ttl-time.Since(start)-drift(ttl) > 0:
		return extendDone
	case taken >= q.majority():
		return extendTaken
	case notHeld > len(q.nodes)-q.majority():
		return extendGone
	}
	return extendUndecided
}

// pttl is the lease a majority still has: the quorum-th longest of the
// answers. It returns once a majority answered either way; a node that
// answers later could only lengthen that lease, so the early figure errs
// short, the safe side. Not held (-1) needs enough nodes to say so that no
// majority can hold it; nodes that did not answer make it an error.
func (q *quorum) pttl(ctx context.Context, l *Lock) (time.Duration, error) {
	res := q.onNodes(ctx, decisionWait(l.lease()), func(ctx context.Context, _ int, rdb redis.UniversalClient) (any, error) {
		return pttlScript.run(ctx, rdb, l.names.keys[:1], l.token).Int64()
	}, q.decided(func(r nodeResult) bool { v, ok := r.val.(int64); return r.err == nil && ok && v >= 0 }), nil)
	var ttls []int64
	notHeld := 0
	for _, x := range res {
		switch v, ok := x.val.(int64); {
		case x.err != nil || !ok:
		case v >= 0:
			ttls = append(ttls, v)
		default:
			notHeld++
		}
	}
	switch {
	case len(ttls) >= q.majority():
	case notHeld > len(q.nodes)-q.majority():
		return -1, nil
	case ctx.Err() != nil:
		return 0, ctx.Err()
	default:
		return 0, errors.New("no majority answered")
	}
	slices.Sort(ttls)
	return time.Duration(ttls[len(ttls)-q.majority()]) * time.Millisecond, nil
}

// renew extends a batch of quorum locks: one pipeline per node, all nodes
// at once (through onNodes); a lock is renewed when a majority renewed it
// within its validity. It returns once every lock of the batch is decided
// or decisionWait ran out, so that a blackholed minority does not hold up
// the scheduler's worker; the node calls run to their own end, so a slow
// node still extends its lease.
func (q *quorum) renew(batch []*Lock) []renewResult {
	start := time.Now()
	var longest time.Duration // the batch waits as its longest lease may
	for _, l := range batch {
		longest = max(longest, l.lease())
	}
	res := q.onNodes(context.Background(), decisionWait(longest), func(ctx context.Context, _ int, rdb redis.UniversalClient) (any, error) {
		res, _ := pipelineExtend(ctx, rdb, batch, replicaAck{})
		if needsScriptLoad(res) {
			_ = extendScript.Load(ctx, rdb).Err()
			res, _ = pipelineExtend(ctx, rdb, batch, replicaAck{})
		}
		return res, firstNetworkError(res)
	}, func(res []nodeResult) bool {
		renewed, notHeld, _ := countRenewals(res, len(batch))
		return q.allDecided(renewed, notHeld)
	}, nil)
	renewed, notHeld, taken := countRenewals(res, len(batch))
	out := make([]renewResult, len(batch))
	for j, l := range batch {
		out[j] = renewResult{l: l, start: start, ttl: l.lease(), out: q.outcome(renewed[j], notHeld[j], taken[j], start, l.lease())}
		if out[j].out == extendUndecided {
			out[j].err = fmt.Errorf("renewed on %d of %d nodes, %d needed", renewed[j], len(q.nodes), q.majority())
		}
	}
	return out
}

// countRenewals counts, for each of n locks of a renewal batch, the nodes
// that renewed it and those that said it is not held there.
func countRenewals(res []nodeResult, n int) (renewed, notHeld, taken []int) {
	renewed, notHeld, taken = make([]int, n), make([]int, n), make([]int, n)
	for _, node := range res {
		answers, _ := node.val.([]renewResult)
		for j, x := range answers {
			switch {
			case x.err != nil, x.out == extendLate:
			case x.out == extendDone:
				renewed[j]++
			default:
				notHeld[j]++
				if x.out == extendTaken {
					taken[j]++
				}
			}
		}
	}
	return renewed, notHeld, taken
}

// allDecided reports whether the node counts so far decide every lock of a
// renewal batch: a majority renewed it, or a majority is out of reach.
func (q *quorum) allDecided(renewed, notHeld []int) bool {
	for j := range renewed {
		if renewed[j] < q.majority() && notHeld[j] <= len(q.nodes)-q.majority() {
			return false
		}
	}
	return true
}

func firstNetworkError(res []renewResult) error {
	for _, x := range res {
		if x.err != nil {
			return x.err
		}
	}
	return nil
}

type nodeResult struct {
	val any
	err error
}

type nodeFunc func(context.Context, int, redis.UniversalClient) (any, error)

// onNodes runs f on every node at once and waits at most wait (or until
// ctx ends) for the answers; a node that has not answered by then counts as
// failed. If enough is non-nil, it stops waiting as soon as enough says the
// answers so far decide the outcome; answers after the decision go to late,
// if set, from the node's goroutine and with the call's context, so that
// what late does stays within the call's bound.
//
// The node calls run under a context of their own, detached from ctx and
// bounded by wait + cleanupTimeout: neither the decision nor the caller
// giving up cuts a call off (go-redis drops a connection whose call is cut
// off, and the call's grant must still be seen). Each call has its own
// goroutine because a go-redis client without ContextTimeoutEnabled would
// not stop at the deadline.
func (q *quorum) onNodes(ctx context.Context, wait time.Duration, f nodeFunc, enough func([]nodeResult) bool, late func(context.Context, int, nodeResult)) []nodeResult {
	var (
		mu       sync.Mutex
		decided  bool
		res      = make([]nodeResult, len(q.nodes))
		answered = make(chan struct{}, len(q.nodes))
	)
	for i := range res {
		res[i].err = errPending
	}
	q.skipSuspects(res)
	for i, rdb := range q.nodes {
		q.c.bg.add()
		go func() {
			defer q.c.bg.done()
			callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), wait+cleanupTimeout)
			defer cancel()
			v, err := f(callCtx, i, rdb)
			q.noteNode(i, err)
			mu.Lock()
			if decided {
				mu.Unlock()
				if late != nil {
					late(callCtx, i, nodeResult{v, err})
				}
				return
			}
			res[i] = nodeResult{v, err}
			mu.Unlock()
			answered <- struct{}{}
		}()
	}
	// decide ends the wait; a node still out gets pending as its error, or,
	// when pending is nil (the wait ran out), is noted as failed. One still
	// out when the others' answers decided the outcome, or when the caller
	// gave up, is only slower, and its own call notes how it ends. (Noting
	// those failed flagged the slowest node of most healthy calls, an
	// EventNodeError each time.)
	decide := func(pending error) []nodeResult {
		mu.Lock()
		defer mu.Unlock()
		decided = true
		out := slices.Clone(res)
		for i := range out {
			if out[i].err != errPending && out[i].err != errSuspect {
				continue
			}
			out[i].err = pending
			if pending == nil {
				out[i].err = nodeTimeout{wait}
				q.noteNode(i, out[i].err)
			}
		}
		return out
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for range q.nodes {
		select {
		case <-answered:
			if enough != nil {
				mu.Lock()
				done := enough(res)
				mu.Unlock()
				if done {
					return decide(errUndecided)
				}
			}
		case <-timer.C:
			return decide(nil)
		case <-ctx.Done():
			return decide(errCallEnded)
		}
	}
	return decide(errUndecided)
}

// skipSuspects marks in res the nodes that failed at the network level
// last time, so that the decision does not wait for them unless they answer
// first; but only while the others can make a majority on their own. When
// most nodes failed (a majority restarted, say), a decision without them
// could only be a refusal, even of a free lock: they are waited for like
// any node then, within the decision's wait.
func (q *quorum) skipSuspects(res []nodeResult) {
	var suspects []int
	for i := range res {
		if q.suspect[i].Load() {
			suspects = append(suspects, i)
		}
	}
	if len(suspects) > len(q.nodes)-q.majority() {
		return
	}
	for _, i := range suspects {
		res[i].err = errSuspect
	}
}

// noteNode records whether node i just answered. Redis error replies come
// from a live node and count as answers.
func (q *quorum) noteNode(i int, err error) {
	var reply redis.Error
	if errors.Is(err, ErrNotObtained) {
		return // not asked: says nothing about the node
	}
	failed := err != nil && !errors.As(err, &reply)
	if was := q.suspect[i].Swap(failed); failed && !was {
		q.c.observe(context.Background(), Event{Kind: EventNodeError, Node: i, Err: err})
	}
}

// decided returns an enough func for onNodes: the outcome is known once a
// majority said yes, or so many said anything else that a majority is out
// of reach.
func (q *quorum) decided(yes func(nodeResult) bool) func([]nodeResult) bool {
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
		return ok >= q.majority() || no > len(q.nodes)-q.majority()
	}
}
