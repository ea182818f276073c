package distlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// lineTTL is how long a line lives in Redis without a waiter asking
	// again; waiters ask at least every lineRefresh.
	lineTTL = 30 * time.Second
	// lineRefresh is the longest a waiter waits without asking Redis again:
	// the safety net for a notice that never came.
	lineRefresh = time.Second
	// liveWait bounds how long a waiter waits for its subscription to be
	// confirmed before it lines up anyway (a handoff nobody hears skips it,
	// and it lines up again when it next asks).
	liveWait = time.Second
)

// single is the backend of a Client on one Redis deployment: a standalone
// server, a Sentinel-managed master or a Cluster. Waiters line up in Redis
// next to the lock, and a release hands the lock to the first of them that
// still listens (see lua/lib.lua).
type single struct {
	c   *Client
	rdb redis.UniversalClient
	ack replicaAck
	pub string // PUBLISH, or SPUBLISH on a Cluster
	// pubArg is pub as a script argument
	pubArg any
	// slots bounds the acquire calls in flight to a quarter of the
	// connection pool: a call waits here, in the process and under its
	// caller's ctx, rather than in go-redis' pool under a context that
	// outlives its caller (see detached), and most of the pool stays free
	// for releases and renewals, so holders never queue behind waiters.
	// Under load, a caller with a short deadline then gives up without
	// costing Redis anything, instead of queueing a call that would only
	// have to be undone. Measured under deadline churn (make bench): 0.01×
	// the best peer's acquisitions/s without the bound, 0.70× with half the
	// pool, 0.82× with a quarter; a quarter of the default pool still allows
	// some 50,000 acquires/s per Client.
	slots chan struct{}
	// reloaded is when the Cluster map was last reloaded (unix ns; see
	// reloadMap)
	reloaded atomic.Int64
}

func (s *single) subscriptions() []redis.UniversalClient { return []redis.UniversalClient{s.rdb} }
func (s *single) serves(*kind, *lockConfig) error        { return nil }
func (s *single) admin() redis.UniversalClient           { return s.rdb }
func (s *single) publish() string                        { return s.pub }

// reply is the acquire script's answer.
type reply struct {
	granted bool
	handed  bool // granted by a handoff before this call asked
	fence   int64
	// left, when handed: the lease Redis had left for it (0: not told)
	left      time.Duration
	holderTTL time.Duration // when not granted: the holder's lease left
	// ended, when not granted: a handoff to the caller with a fence up to
	// this one was made before the attempt ran, and its grant had ended by
	// then (0: the script does not tell)
	ended int64
	// passedOver: a re-ask that did not find the caller in line; a handoff
	// passed it over, as nobody heard its Client (see notifier.rehome)
	passedOver bool
}

func (s *single) lock(ctx context.Context, r *request) (*Lock, error) {
	if err := ctx.Err(); err != nil {
		return nil, notObtained(r.key, err)
	}
	q := &call{s: s, r: r, mode: modeTry}
	q.start(ctx)
	defer q.leave()
	for {
		parked, err := q.heard(ctx)
		if err != nil {
			return nil, err
		}
		l, waitFor, done, err := q.ask(ctx)
		if done {
			return l, err
		}
		if waitFor < 0 {
			continue // asked in try mode: ask again, lining up
		}
		// A wait for the subscription counts against the wait for the next
		// ask: a waiter nobody hears still asks every lineRefresh.
		if l, done, err := q.wait(ctx, max(waitFor-parked, 0)); done {
			return l, err
		}
	}
}

// call is one Lock or TryLock call on a single-node Client, as it waits.
type call struct {
	s       *single
	r       *request
	n       *notifier // set once the call listens
	w       *waiter   // the call's registration with n
	inbox   string    // its Client's channel for the lock
	mode    string    // how the next attempt asks (modeTry, modeJoin, modeFair)
	again   bool      // an earlier attempt left the call in line
	won     *Lock     // the call's Lock, once it got one
	lastErr error     // a Redis error met while in line
	// answered: Redis answered one of the call's attempts, so a ctx that
	// ends now ends a wait for a held lock (ErrNotObtained), not a wait
	// for Redis (ErrNoAnswer)
	answered bool
	freeAt   time.Time // when the holder's lease, as last asked, runs out
	// ended: a handoff notice with a fence up to this one is late, of a
	// grant that had ended when an attempt found the lock held (reply.ended)
	ended int64
}

// start starts a call: a lock this Client waited for lately is likely
// held, so the call lines up in the same request that asks, if its
// subscription is still there. The line entry is built only then: a Client
// that waited for some lock once keeps its notifier, and its calls on other
// keys, mostly free, need no entry; one that only held keeps no channel
// that a call could join. A fair call lines up whenever it is
// not free; one whose subscription is not there first asks as a fair
// TryLock does (modeFairTry), which takes a free lock only with nobody in
// line: it would otherwise wait for the subscription before it asked at
// all, up to liveWait for a free lock when the subscription cannot be
// confirmed.
func (q *call) start(ctx context.Context) {
	r := q.r
	q.n = q.s.c.existingNotifier()
	if !r.wait {
		return
	}
	if q.n != nil && q.n.waited.Load() > 0 {
		q.inbox = r.names.inbox(q.s.c.id)
		if q.w = q.n.joinLive(q.inbox, r.hold()); q.w != nil {
			q.mode = modeJoin
		}
	}
	if q.w != nil || r.cfg.fair {
		q.lineUp(ctx)
	}
	if r.cfg.fair && q.w != nil {
		q.mode = modeFair
	}
}

func (q *call) lineUp(ctx context.Context) {
	if q.inbox == "" {
		q.inbox = q.r.names.inbox(q.s.c.id)
	}
	q.r.lineEntry(ctx, q.s.c.id)
}

// heard makes sure that a call about to line up is heard: a handoff skips
// a client nobody hears. It returns how long it waited for that.
func (q *call) heard(ctx context.Context) (time.Duration, error) {
	if q.mode == modeTry {
		return 0, nil
	}
	if q.w == nil {
		if q.n = q.s.c.ensureNotifier(); q.n == nil {
			return 0, notObtained(q.r.key, ErrClosed)
		}
		q.w = q.n.join(q.inbox, q.r.hold())
	}
	if q.n.isLive(q.w) {
		return 0, nil
	}
	// Not past the holder's lease, though: a crashed holder's lock is free
	// then, and asking takes it whether anyone hears the call.
	wait := liveWait
	if !q.freeAt.IsZero() {
		wait = max(min(wait, time.Until(q.freeAt)), 0)
	}
	start := time.Now()
	if _, err := q.s.c.park(ctx, q.w, wait); err != nil {
		if !q.answered && ctx.Err() != nil {
			// (a subscription that broke as the call began: an outage, likely)
			return 0, noAnswer(q.r.key, ctx.Err())
		}
		return 0, q.s.gaveUp(q.r, err, q.again, q.lastErr)
	}
	return time.Since(start), nil
}

// ask runs one attempt. It returns done with the call's result, or how long
// to wait before asking again (negative: ask again at once, lining up).
func (q *call) ask(ctx context.Context) (l *Lock, waitFor time.Duration, done bool, err error) {
	s, r := q.s, q.r
	rep, sent, err := s.attempt(ctx, r, q.mode, q.again)
	q.answered = q.answered || err == nil
	if rep.passedOver && q.n != nil {
		q.n.rehome(q.inbox)
	}
	switch {
	case err != nil && ctx.Err() != nil:
		// Gave up while the call was out: its late answer is undone
		// (attempt's late), and a re-ask's place in line left.
		if q.again {
			s.abandon(r)
		}
		if !q.answered {
			return nil, 0, true, noAnswer(r.key, ctx.Err())
		}
		return nil, 0, true, notObtained(r.key, ctx.Err())
	case err != nil && (!q.again || errors.Is(err, ErrLimitMismatch) || errors.Is(err, ErrNotReplicated)):
		// What Redis did is unknown; and a semaphore asked with another
		// limit than its holders' (recorded while this call waited) would
		// refuse every ask, while a release might still hand it a permit.
		// A re-ask's grant that too few replicas acknowledged was undone,
		// with its place in line: it fails as a handoff's does, rather than
		// take and undo the lock every second until ctx ends.
		s.abandon(r)
		return nil, 0, true, err
	case err != nil:
		q.lastErr = err // already in line: keep waiting, ask again later
		return nil, lineRefresh, false, nil
	case rep.granted && rep.handed && q.w != nil && (q.again || q.mode != modeTry):
		// Only a call that can have lined up can be handed the lock; any
		// other's reply is its own grant, read again by an attempt that the
		// Redis client sent once more after a lost answer. So can a first
		// join's: a handoff may have come between its two runs, after this
		// send. (A handoff's notice is on its way: see leave.)
		if !q.again {
			r.sent = sent
		}
		if l, err := q.handedOver(ctx, rep.fence, sent, rep.left, ""); l != nil || err != nil {
			return l, 0, true, err
		}
		return nil, -1, false, nil // gone before it was confirmed: ask again
	case rep.granted && !time.Now().Before(sent.Add(r.cfg.ttl-drift(r.cfg.ttl))):
		// Its lease may have run out before the answer came: a Lock of it
		// would be held by nobody, and asking again would meet the same.
		s.abandon(r)
		return nil, 0, true, fmt.Errorf("%w: %q: its lease of %v may have run out before Redis's answer came",
			ErrNotObtained, r.key, r.cfg.ttl)
	case rep.granted:
		return q.granted(rep, sent), 0, true, nil
	case !r.wait:
		return nil, 0, true, fmt.Errorf("%w: %q %s", ErrNotObtained, r.key, r.kind.busy)
	}
	if rep.holderTTL >= 0 {
		q.freeAt = sent.Add(rep.holderTTL)
	}
	q.ended = max(q.ended, rep.ended)
	if q.mode == modeTry {
		q.mode = modeJoin // held: line up and wait
		if r.cfg.fair {
			q.mode = modeFair
		}
		q.lineUp(ctx)
		return nil, -1, false, nil
	}
	q.again, r.sent = true, sent
	s.c.queued(ctx, r)
	if rep.holderTTL >= 0 {
		return nil, min(lineRefresh, rep.holderTTL), false, nil // a crashed holder's lock is free then
	}
	return nil, lineRefresh, false, nil
}

func (q *call) granted(rep reply, sent time.Time) *Lock {
	r := q.r
	r.how = HowFree
	if q.again {
		r.how = HowAfterWait
	}
	q.won = newLock(q.s.c, r, rep.fence, sent, r.cfg.ttl)
	return q.won
}

// handedOver builds the Lock of a grant that a handoff made to the call:
// told by its notice (link: the release's trace link), or found by an
// attempt sent at sent that read the lock after it (left: the lease it
// found, 0 if not told). The handoff, not an attempt, set the lease, a
// short first one (see single.handedOver). It returns nil if the grant is
// gone by then.
func (q *call) handedOver(ctx context.Context, fence int64, sent time.Time, left time.Duration, link string) (*Lock, error) {
	q.r.how, q.r.link = HowHandedOver, link
	l, err := q.s.handedOver(ctx, q.r, fence, sent, left)
	q.won = l
	var later *askLater
	if errors.As(err, &later) {
		// Asked again at once, a Redis that serves reads but refuses
		// writes (NOREPLICAS, READONLY) would loop: the re-ask reads the
		// grant, its extend fails, as fast as round trips go for as long
		// as the grant lasts. Wait as a failed renewal does; if the call
		// ends meanwhile, or later, its grant is given back (again: it
		// has one in Redis, as a waiter in line may).
		q.lastErr, q.again = later.err, true
		if _, err := q.s.c.park(ctx, q.w, later.gap); err != nil {
			return nil, q.s.gaveUp(q.r, err, true, q.lastErr)
		}
		return nil, nil
	}
	return l, err
}

// wait parks until a handoff, a wake-up or d; it returns done with the
// call's result when the call ends.
func (q *call) wait(ctx context.Context, d time.Duration) (*Lock, bool, error) {
	h, err := q.s.c.park(ctx, q.w, d)
	if err != nil {
		return nil, true, q.s.gaveUp(q.r, err, true, q.lastErr)
	}
	if h.fence > q.ended { // else a late notice of a grant that has ended
		if l, err := q.handedOver(ctx, h.fence, time.Time{}, 0, h.link); l != nil || err != nil {
			return l, true, err
		}
	}
	return nil, false, nil
}

// leave ends the call's registration; a grant handed to it as it gave up
// is passed on. A call that lined up may be told of a handoff to it after
// it got the lock otherwise (its notice came late, or after the attempt
// that found the handoff): the notifier keeps its Lock to know the notice
// for late.
func (q *call) leave() {
	if q.w == nil {
		return
	}
	// So may a first join (q.w is set only for a call that may line up):
	// a handoff can come between two runs of its script, which go-redis
	// sent again after a lost answer, and the second run find that grant
	// or, once it ran out, take the lock free under the same token.
	if q.won != nil {
		q.n.holding(q.won)
	}
	q.n.leave(q.w)
	select {
	case <-q.w.grant:
		if q.won == nil {
			q.s.passOn(q.r.hold())
		}
	default:
	}
}

// gaveUp is the error of a Lock call that stopped waiting because of err,
// after leaving the line (in the background: the caller does not wait).
// A call that gave up at its deadline leaves too, although handoffs skip
// its entry from then on: while the lock stays held nothing else removes
// it, and the line would grow with every waiter that gives up.
func (s *single) gaveUp(r *request, err error, inLine bool, last error) error {
	if inLine {
		s.abandon(r)
	}
	if last != nil {
		return fmt.Errorf("%w: %q: %w (last Redis error: %w)", ErrNotObtained, r.key, err, last)
	}
	return notObtained(r.key, err)
}

// attempt runs the acquire script once in mode, and returns when it was
// sent: once it had its slot. A grant's lease starts when Redis runs the
// script, so the wait for a slot, which under load outlasted a short TTL,
// is no part of the round trip that its caller must allow for (a grant
// whose answer came a TTL after it was asked for is refused). If ctx ends
// first, its outcome is undone in the background when it comes.
func (s *single) attempt(ctx context.Context, r *request, mode string, again bool) (reply, time.Time, error) {
	select {
	case s.slots <- struct{}{}:
	case <-ctx.Done():
		return reply{}, time.Now(), ctx.Err()
	}
	sent := time.Now()
	if again && ctx.Done() == nil {
		// A waiter's re-ask under a ctx that never ends (Mutex.Lock's) would
		// run inline, and on a Redis that hangs only go-redis' timeouts would
		// end it: Close, the one thing that can end such a wait, must. (Not
		// for a first attempt: that would cost every Lock a goroutine.)
		var stop context.CancelFunc
		ctx, stop = context.WithCancel(ctx)
		defer stop()
		defer context.AfterFunc(s.c.closedCtx, stop)()
	}
	rep, err := detached(s.c, ctx, attemptCall{s, r, mode, again, ctx}, runAttempt, undoAttempt)
	return rep, sent, err
}

// attemptCall is one acquire attempt's call to Redis (see detached); ctx is
// its caller's.
type attemptCall struct {
	s     *single
	r     *request
	mode  string
	again bool
	ctx   context.Context
}

func runAttempt(ctx context.Context, a attemptCall) (reply, error) {
	defer func() { <-a.s.slots }()
	rep, err := a.s.acquire(ctx, a.r, a.mode, a.again)
	a.s.reloadMap(err)
	return rep, err
}

// netFailure reports an error that is neither Redis's reply nor the
// caller's context ending: the network's, or a dead node's.
func netFailure(err error) bool {
	var reply redis.Error
	return !errors.As(err, &reply) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// reloadMap has go-redis reload its map of a Cluster after a call that
// failed at the network level, at most every 200 ms: by itself it reloads
// the map only after a MOVED reply, which a dead master never sends, or
// every ClusterStateReloadInterval (60 s by default), and until then a
// failed-over slot's renewals go to the dead master and its locks are lost
// though their replica took over with them. (A lazy reload: no call waits.)
func (s *single) reloadMap(err error) {
	if err == nil || !s.c.cluster {
		return // (before netFailure, whose errors.As target escapes: no allocation)
	}
	cc, ok := s.rdb.(*redis.ClusterClient)
	if !ok || !netFailure(err) {
		return
	}
	now, last := time.Now().UnixNano(), s.reloaded.Load()
	if now-last >= int64(200*time.Millisecond) && s.reloaded.CompareAndSwap(last, now) {
		cc.ReloadState(context.Background())
	}
}

// undoAttempt undoes what Redis did for an attempt whose caller gave up:
// a grant, or a place in line.
func undoAttempt(a attemptCall, rep reply, err error) {
	if err != nil || rep.granted || a.mode != modeTry {
		a.s.abandon(a.r)
	}
}

func (s *single) acquire(ctx context.Context, r *request, mode string, again bool) (reply, error) {
	sc, call := s.acquireCall(r, mode, again)
	cmd, acked := s.ack.run(ctx, s.rdb, sc, call)
	var buf [4]int64
	res, err := tryReply(cmd, buf[:0])
	if err != nil {
		if limit, ok := limitError(err); ok {
			return reply{}, fmt.Errorf("%w: %q has %s permits, not %v", ErrLimitMismatch, r.key, limit, r.acquireArg)
		}
		return reply{}, fmt.Errorf("distlock: acquire %q: %w", r.key, err)
	}
	if len(res) < 2 {
		// A copy: formatting res itself would put buf on the heap on every call.
		return reply{}, fmt.Errorf("distlock: acquire %q: unexpected reply %v", r.key, slices.Clone(res))
	}
	if res[0] == 0 {
		rep := reply{holderTTL: time.Duration(res[1]) * time.Millisecond}
		if len(res) > 2 {
			rep.ended = res[2]
		}
		rep.passedOver = len(res) > 3 && res[3] == 1
		return rep, nil
	}
	if !acked {
		// The grant may not survive a failover: undo it rather than hand out
		// a lock that a promoted replica would give to someone else too.
		_ = runRelease(ctx, s.rdb, r.hold(), s.pubArg, r.entry, r.kind.announce).Err()
		return reply{}, fmt.Errorf("distlock: acquire %q: %w", r.key, ErrNotReplicated)
	}
	rep := reply{granted: true, fence: res[1], passedOver: res[0] == 2}
	if len(res) > 3 {
		rep.handed, rep.left = true, time.Duration(max(res[3], 0))*time.Millisecond
	}
	return rep, nil
}

// acquireCall is the script of one attempt in mode and its call (see
// script.command).
func (s *single) acquireCall(r *request, mode string, again bool) (*script, []any) {
	if mode == modeTry && r.cfg.fair && !r.kind.shared {
		mode = modeFairTry // try.lua would take a free lock ahead of the line
	}
	if mode == modeTry && r.kind.try != nil {
		sc := r.names.counted.of(r.kind.try)
		cmd := sc.command(r.tryCmd[:0], r.names.keys[:2])
		cmd = append(cmd, tryGrant(r.token, r.tail), msArg(r.cfg.ttl))
		if r.kind.announce {
			cmd = append(cmd, s.pubArg)
		}
		return sc, cmd
	}
	sc := r.names.counted.of(r.kind.acquire)
	cmd := sc.command(make([]any, 0, 3+len(r.names.keys)+12), r.names.keys)
	if r.kind.shared { // see lua/shared.lua
		cmd = append(cmd, r.token, msArg(r.cfg.ttl), r.tail, nowMillis(), s.pubArg, handoffLeaseArg, r.acquireArg)
		if mode != modeTry {
			cmd = append(cmd, mode, r.entry, boolArg(again), lineTTLArg)
		}
		return sc, cmd
	}
	cmd = append(cmd, r.token, msArg(r.cfg.ttl), r.cfg.owner, r.tail, nowMillis(), mode,
		r.entry, boolArg(again), s.pubArg, lineTTLArg, handoffLeaseArg)
	if r.acquireArg != nil {
		cmd = append(cmd, r.acquireArg)
	}
	return sc, cmd
}

// limitError reads sem_acquire.lua's "LIMIT <n>" error reply.
func limitError(err error) (string, bool) {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return "", false
	}
	return strings.CutPrefix(rerr.Error(), "LIMIT ")
}

// handedOver builds the Lock of a grant that a release handed to r. Its
// first lease, the shorter of its TTL and handoffLease, was set by that
// release, after r's last attempt was sent, so it runs at least until that
// send time plus the lease, and at least left past sent when an attempt
// sent then found left of it (the later of the two counts: a longer one is
// the caller's own grant, read again by an attempt that the Redis client
// sent once more after a lost answer); renewal raises it to the TTL. A
// lock that is not renewed is extended to its TTL here, and a grant whose
// notice came so late that little of that bound is left is confirmed with
// Redis first. It returns nil if the grant is gone by then, or an
// *askLater when Redis failed the extend of a lock that is not renewed
// (the call asks again).
// With WithReplicaAck the grant,
// which the release wrote without WAIT, is always confirmed (WAIT follows
// the extend), and one that too few replicas acknowledge is given back and
// fails with ErrNotReplicated, as an acquire does.
//
// A Lock to be confirmed is not shown to the scheduler until it is: its
// bound from the last attempt may have passed already (a short TTL, a late
// notice), and the scheduler would declare it lost while its grant is
// alive. Nobody else has seen it, so no renewal of it can come late, and
// its confirmation needs no more guard than one drift.
func (s *single) handedOver(ctx context.Context, r *request, fence int64, sent time.Time, left time.Duration) (*Lock, error) {
	first := min(r.cfg.ttl, handoffLease)
	start, lease := r.sent, first
	if left = min(left, r.cfg.ttl); sent.Add(left).After(start.Add(lease)) {
		start, lease = sent, left
	}
	noAck := s.ack == (replicaAck{})
	if r.cfg.noRenew && lease < r.cfg.ttl && noAck {
		l := newLock(s.c, r, fence, start, lease)
		// extend, not Extend: there is no Extend call of the program's to
		// observe.
		err := l.extend(ctx, r.cfg.ttl)
		if err != nil && !errors.Is(err, ErrNotHeld) && ctx.Err() == nil {
			// Redis failed it: nothing would extend the lock later, and it
			// would be lost at the end of the first lease, not its TTL.
			// The call asks again, and finds the grant if it is still there,
			// a tenth of the first lease later (not of the lease left, which
			// shrinks with every ask).
			s.dropUnconfirmed(l)
			return nil, &askLater{err: err, gap: max(first/10, time.Millisecond)}
		}
		return s.confirmedHandoff(ctx, r, l, err)
	}
	l := untrackedLock(s.c, r, fence, start, lease)
	// On a Cluster a grant known only from its notice is confirmed: a
	// shard's replicas pass SPUBLISH on over the cluster bus, so a
	// subscription that a failover left on a replica hears notices of
	// grants that the master, whose count missed it, never made. (Elsewhere
	// the script keeps the notice off the replication stream.)
	heardOnly := sent.IsZero() && s.c.cluster
	if !heardOnly && time.Until(l.validUntil()) > first/2 && noAck {
		s.c.track(l)
		return l, nil
	}
	slack := l.setSlack(drift(first))
	// Under WithReplicaAck the confirmation extends the lease (also of a
	// lock that is not renewed), so that WAIT follows it; untracked until
	// it answers, as the bound from the last attempt may have passed.
	err := l.confirm(ctx, time.Now(), !noAck)
	if err != nil && !errors.Is(err, ErrNotHeld) && !errors.Is(l.Err(), ErrNotReplicated) && noAck {
		// Not known: the Lock keeps the bound of the last attempt, and the
		// raised guard of a confirmation that may have landed. (Under
		// WithReplicaAck, confirmedHandoff gives it back: no replica is
		// known to have it.)
		l.raiseSlack(slack)
		s.c.track(l)
	}
	return s.confirmedHandoff(ctx, r, l, err)
}

// dropUnconfirmed ends l, a handed-over Lock never shown to its caller,
// and takes it out of the renewer's schedule; its grant stays in Redis.
func (s *single) dropUnconfirmed(l *Lock) {
	l.end(released, ErrReleased)
	if l.scheduled.Load() {
		s.c.forget(l)
	}
}

// askLater is handedOver's error when Redis failed the extend of a grant
// that it dropped (err): the call asks again after gap, not at once.
type askLater struct {
	err error
	gap time.Duration
}

func (e *askLater) Error() string { return e.err.Error() }
func (e *askLater) Unwrap() error { return e.err }

// confirmedHandoff is handedOver's result for l after its confirmation
// returned err.
func (s *single) confirmedHandoff(ctx context.Context, r *request, l *Lock, err error) (*Lock, error) {
	switch {
	case errors.Is(l.Err(), ErrNotReplicated):
		s.abandon(r)
		return nil, fmt.Errorf("distlock: acquire %q: %w", r.key, ErrNotReplicated)
	case errors.Is(err, ErrNotHeld):
		return nil, nil
	case err != nil && s.ack != (replicaAck{}):
		// The confirmation, and its WAIT, did not answer (ctx ended, or
		// Redis failed): no replica is known to have the grant, which a
		// promoted one might give to someone else. Give it back.
		l.end(lost, notReplicatedCause)
		s.abandon(r)
		if ctx.Err() != nil {
			return nil, notObtained(r.key, ctx.Err())
		}
		return nil, fmt.Errorf("distlock: acquire %q: %w", r.key, err)
	}
	return l, nil
}

// abandon undoes what a Lock call that gave up may have left in Redis: its
// line entry, and a grant made to it. It runs in the background.
func (s *single) abandon(r *request) {
	s.c.background(func(ctx context.Context) {
		_ = runRelease(ctx, s.rdb, r.hold(), s.pubArg, r.entry, r.kind.announce).Err()
	})
}

// passOn frees a grant handed to a waiter that is gone, or one whose
// renewal or extend too few replicas acknowledged: that ends the lock, and
// the master, which has just reset its lease to the full TTL, would keep it
// for nobody until Release (which a holder told of the loss may never call).
func (s *single) passOn(h hold) {
	s.c.background(func(ctx context.Context) {
		_ = runRelease(ctx, s.rdb, h, s.pubArg, "", h.kind.announce).Err()
	})
}

func (s *single) release(ctx context.Context, l *Lock, link string) (releaseOutcome, error) {
	out, err := s.releaseOnce(ctx, l, link)
	if err != nil && s.remapped(ctx, err) {
		// A Cluster may have failed the lock's slot over to a replica that
		// has the grant: nothing else would send the delete there, and the
		// lock would stay held for nobody until its lease ran out.
		out, err = s.releaseOnce(ctx, l, link)
	}
	return out, err
}

func (s *single) releaseOnce(ctx context.Context, l *Lock, link string) (releaseOutcome, error) {
	var buf [2]int64
	res, err := int64s(runReleaseLinked(ctx, s.rdb, l.hold(), s.pubArg, "", l.kind.announce, link), buf[:0])
	if err != nil {
		return releaseGone, err
	}
	return releaseReply(res), nil
}

// remapped reloads the map of a Cluster before it returns, after a call
// that failed at the network level, and reports whether it did: unlike
// reloadMap's, a reload that the caller's next call can count on.
// (ForEachMaster reloads the map first; ReloadState only starts a reload.)
func (s *single) remapped(ctx context.Context, err error) bool {
	cc, ok := s.rdb.(*redis.ClusterClient)
	if !ok || ctx.Err() != nil || !netFailure(err) {
		return false
	}
	s.reloaded.Store(time.Now().UnixNano())
	return cc.ForEachMaster(ctx, func(context.Context, *redis.Client) error { return nil }) == nil
}

// releaseReply reads the release script's reply.
func releaseReply(res []int64) releaseOutcome {
	switch {
	case len(res) == 0 || res[0] == -1:
		return releaseGone
	case res[0] < 0:
		return releaseTaken
	case res[0] > 0:
		return releaseHoldsLeft
	case len(res) > 1:
		return releaseHandedOver
	}
	return releaseFreed
}

func (s *single) extend(ctx context.Context, l *Lock, ttl time.Duration) (extendOutcome, error) {
	ext := l.kind.extend
	cmd, acked := s.ack.run(ctx, s.rdb, ext, ext.evalsha(l.kind.holdKeys(l.names), l.token, ttl.Milliseconds()))
	v, err := cmd.Int64()
	if err != nil {
		s.reloadMap(err) // as a renewal does: the slot may have failed over
		return failedExtend(err), err
	}
	out := extendReply(v, acked)
	if out == extendUnacked {
		s.passOn(l.hold())
	}
	return out, nil
}

// failedExtend is the outcome of an extend or renewal that failed with
// err: extendUnknown unless Redis itself answered with an error, when the
// script did not run.
func failedExtend(err error) extendOutcome {
	var reply redis.Error
	if errors.As(err, &reply) {
		return extendGone
	}
	return extendUnknown
}

// extendReply reads the extend script's reply.
func extendReply(v int64, acked bool) extendOutcome {
	switch {
	case v == 1 && !acked:
		return extendUnacked
	case v == 1:
		return extendDone
	case v < 0:
		return extendTaken
	}
	return extendGone
}

func (s *single) pttl(ctx context.Context, l *Lock) (time.Duration, error) {
	ms, err := l.kind.pttl.run(ctx, s.rdb, l.kind.holdKeys(l.names), l.token).Int64()
	s.reloadMap(err)
	if err != nil || ms < 0 {
		return -1, err
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// renew extends every lock of the batch in one pipeline. Its context ends
// at the latest validity deadline of the batch, past which the scheduler has
// declared every lock of it lost, and at most maxRenewWait away: a round
// trip longer than a second must not lose a lease that has the time for it,
// nor a lock near its deadline cut short the renewal of the others (the
// scheduler declares each lock lost at its own deadline, whatever the batch
// does).
func (s *single) renew(batch []*Lock) []renewResult {
	var deadline time.Time
	for _, l := range batch {
		if v := l.validUntil(); v.After(deadline) {
			deadline = v
		}
	}
	deadline = minTime(deadline, time.Now().Add(maxRenewWait))
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	start := time.Now()
	res, wait := pipelineExtend(ctx, s.rdb, batch, s.ack)
	if needsScriptLoad(res) {
		// A restarted or failed-over server lost the script cache: load it
		// once and repeat, rather than sending the full script per lock.
		loadExtendScripts(ctx, s.rdb, batch)
		start = time.Now()
		res, wait = pipelineExtend(ctx, s.rdb, batch, s.ack)
	}
	acked := s.ack.enough(wait)
	for i := range res {
		s.reloadMap(res[i].err)
		res[i].start = start
		if res[i].out == extendUnacked || (res[i].out == extendDone && !acked) {
			res[i].out = extendUnacked
			s.passOn(batch[i].hold())
		}
	}
	return res
}

// maxRenewWait bounds how long a renewal batch waits for Redis: the one
// worker that sends batches waits for each.
const maxRenewWait = 10 * time.Second

// pipelineExtend runs the extend script for every lock of batch in one
// pipeline on rdb and, with replica acknowledgement on, one WAIT after them
// that covers them all.
func pipelineExtend(ctx context.Context, rdb redis.UniversalClient, batch []*Lock, ack replicaAck) ([]renewResult, *redis.IntCmd) {
	cmds := make([]*redis.Cmd, len(batch))
	res := make([]renewResult, len(batch))
	var wait *redis.IntCmd
	_, _ = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, l := range batch {
			res[i].l, res[i].ttl = l, l.lease()
			cmds[i] = p.Do(ctx, l.kind.extend.evalsha(l.kind.holdKeys(l.names), l.token, res[i].ttl.Milliseconds(), l.guard())...)
		}
		if ack.replicas > 0 {
			wait = ack.queueWait(ctx, p)
		}
		return nil
	})
	for i, cmd := range cmds {
		if late, ok := cmd.Val().([]any); ok && len(late) == 1 {
			left, _ := late[0].(int64)
			res[i].out, res[i].left = extendLate, time.Duration(left)*time.Millisecond
			continue
		}
		v, err := cmd.Int64()
		res[i].out, res[i].err = extendReply(v, true), err
		if err != nil {
			res[i].out = failedExtend(err)
		}
	}
	return res, wait
}

// loadExtendScripts loads the extend scripts of the batch's kinds.
func loadExtendScripts(ctx context.Context, rdb redis.UniversalClient, batch []*Lock) {
	seen := map[*kind]bool{}
	for _, l := range batch {
		if !seen[l.kind] {
			seen[l.kind] = true
			_ = l.kind.extend.Load(ctx, rdb).Err()
		}
	}
}

func needsScriptLoad(res []renewResult) bool {
	for _, r := range res {
		if isNoScript(r.err) {
			return true
		}
	}
	return false
}

func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}
