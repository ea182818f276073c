package distlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Lock is one hold of a lock. Its methods are safe for concurrent use; on a
// nil *Lock they return ErrNotHeld.
//
// A renewed hold lasts until Release, its loss or Client.Close. Like an open
// file, a Lock the program drops without Release is still renewed while its
// Client lives: defer Release where it is taken.
type Lock struct {
	client *Client
	kind   *kind
	// releaseArg is the kind's own argument of its release script (a
	// semaphore's limit, see runReleaseLinked)
	releaseArg any
	key        string
	names      keyNames
	token      string // this hold; Redis releases and extends by it
	fence      int64
	renew      bool
	since      time.Time // when the hold began, for EventHoldEnded

	mu    sync.Mutex
	ttl   time.Duration // the lease renewal keeps
	valid time.Time     // local validity deadline: lease start + ttl - drift
	// slack is how much later than valid the server's lease may end: the
	// round trip of the call that set it, since Redis ran it at some
	// moment of that trip, plus drift
	slack time.Duration
	// span is the lease that valid and slack count from, whose drift is
	// their margin and guard's: a handoff's short first lease, or the lease
	// left that a late renewal's refusal told, may be far shorter than ttl
	span    time.Duration
	renewAt time.Time
	state   lockState
	cause   error
	lost    chan struct{} // made on first use, closed on loss
	ctxs    contexts      // those of Context
	lastErr error         // last renewal error, reported when the lease runs out
	// announced: observers were told of the grant, so they are told of its
	// end (once); a grant lost before its Lock call returned is not a hold
	announced bool
	// renewing: a call that sets the lease (a renewal, Extend, a handoff's
	// confirmation) is in flight; leaseIdle, made by a caller that waits
	// for it, is closed when it ends (see beginLeaseCall)
	renewing  bool
	leaseIdle chan struct{}

	// owned by the renewer goroutine
	heapIdx int
	heapAt  time.Time
	// scheduled is heapIdx >= 0, for Release to read (see renewer.forget)
	scheduled atomic.Bool
}

type lockState uint8

const (
	held lockState = iota
	released
	lost
)

// newLock returns the Lock of a grant to r whose lease of length lease
// started no earlier than start, and hands it to the renewer.
func newLock(c *Client, r *request, fence int64, start time.Time, lease time.Duration) *Lock {
	l := untrackedLock(c, r, fence, start, lease)
	c.track(l)
	return l
}

// untrackedLock is newLock for a grant to be confirmed before the
// scheduler may see it (see single.handedOver): confirm tracks it.
func untrackedLock(c *Client, r *request, fence int64, start time.Time, lease time.Duration) *Lock {
	l := &Lock{
		client: c, kind: r.kind, releaseArg: r.releaseArg, key: r.key, names: r.names, token: r.token,
		fence: fence, renew: !r.cfg.noRenew, ttl: r.cfg.ttl, heapIdx: -1,
	}
	if c.obs != nil {
		l.since = time.Now()
	}
	l.valid = start.Add(lease - drift(lease))
	l.slack = time.Since(start) + drift(lease)
	l.span = lease
	l.renewAt = start.Add(lease / 3)
	return l
}

// none reports a nil or zero Lock (one not made by this package), which
// holds nothing.
func (l *Lock) none() bool { return l == nil || l.client == nil }

// Key returns the lock's name as given to TryLock or Lock.
func (l *Lock) Key() string {
	if l == nil {
		return ""
	}
	return l.key
}

// Token returns the random 128-bit token of this hold.
func (l *Lock) Token() string {
	if l == nil {
		return ""
	}
	return l.token
}

// Fence returns the fencing token of this grant: strictly greater than the
// fence of every earlier grant of the same key (fences are drawn from one
// counter per Redis node, or per Cluster slot, so they also rise across
// keys, with gaps). Pass it to the resource you protect so that it can
// refuse writes from a holder that lost the lock (see package fence).
// Reentrant holds share one fence.
func (l *Lock) Fence() int64 {
	if l == nil {
		return 0
	}
	return l.fence
}

// Release gives this hold back: the last hold frees the lock, and hands it
// to the next waiter in line. Whatever ctx says, the Lock ends here at once
// (no more renewal; its contexts are cancelled with ErrReleased). The delete
// in Redis ignores ctx's cancellation and gives up two seconds after ctx's
// deadline, or after two seconds if ctx has none. Release waits for it until
// ctx ends, and if ctx ends first it returns ctx's error while the delete
// goes on in the background.
// If Redis cannot be reached the lease runs out within its TTL, since
// nothing renews it any more.
//
// It returns ErrNotHeld, changing nothing in Redis, when the lock expired,
// was taken by another owner or was already released through this Lock.
//
// A nil ctx is a bug in the caller, but refusing it would leave the hold
// renewed until the process exits: Release then releases as with
// context.Background() and returns ErrNilContext, joined with the
// release's own error if any.
func (l *Lock) Release(ctx context.Context) error {
	if ctx == nil {
		return errors.Join(ErrNilContext, l.Release(context.Background()))
	}
	if l.none() {
		return ErrNotHeld
	}
	c := l.client
	if c.obs == nil {
		return l.release(ctx, "")
	}
	start := time.Now()
	ctx = c.obs.Start(ctx, EventRelease, l.key)
	err := l.release(ctx, c.obs.Link(ctx))
	c.obs.Observe(ctx, Event{Kind: EventRelease, Key: l.key, Fence: l.fence, Err: err, Duration: time.Since(start)})
	return err
}

func (l *Lock) release(ctx context.Context, link string) error {
	l.mu.Lock()
	done := l.state == released
	if l.state == held && !time.Now().Before(l.valid) {
		// Past its validity deadline (the process was paused, say) the
		// lock counts as lost, whatever the scheduler has seen yet.
		l.endLocked(lost, l.expiryCauseLocked())
	}
	l.endLocked(released, ErrReleased)
	l.mu.Unlock()
	if done {
		return ErrNotHeld
	}
	if l.scheduled.Load() {
		l.client.forget(l)
	}
	if _, ok := ctx.Deadline(); !ok && !l.client.deadlines {
		// Without a deadline the delete gives up after cleanupTimeout by
		// runReleaseCall's timer, which a Redis client that ignores
		// deadlines does not heed. So the bound becomes ctx's deadline,
		// as if the caller had set it: detached waits in its goroutine,
		// the one way to stop waiting for such a client, and returns at
		// the bound while the delete goes on in the background. A client
		// that honours deadlines keeps the inline call and its timer.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cleanupTimeout)
		defer cancel()
	}
	rc := releaseCall{l: l, link: link}
	if d, ok := ctx.Deadline(); ok {
		rc.giveUp = d.Add(cleanupTimeout)
	}
	out, err := detached(l.client, ctx, rc, runReleaseCall, retryReleaseCall)
	l.observeEnd(out, err)
	switch {
	case err != nil && ctx.Err() != nil:
		return fmt.Errorf("distlock: release %q: %w (the release goes on in the background)", l.key, err)
	case err != nil:
		return fmt.Errorf("distlock: release %q: %w", l.key, err)
	case out == releaseGone:
		l.lostBeforeRelease(ErrExpired)
		return ErrNotHeld
	case out == releaseTaken:
		l.lostBeforeRelease(ErrTaken)
		return ErrNotHeld
	case out == releaseHandedOver:
		l.client.observe(ctx, Event{Kind: EventHandoff, Key: l.key, Fence: l.fence})
	}
	return nil
}

// releaseCall is one Release's call to Redis (see detached).
type releaseCall struct {
	l    *Lock
	link string
	// giveUp is when the delete gives up: the caller's deadline plus
	// cleanupTimeout (zero without a deadline)
	giveUp time.Time
}

func runReleaseCall(ctx context.Context, rc releaseCall) (releaseOutcome, error) {
	if ctx.Err() != nil { // run inline under a ctx that ended: no time to try
		return releaseGone, ctx.Err()
	}
	// A ctx with a deadline bounds the call already; one without gets a
	// shared bound (withBound), not a timer of its own per Release.
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = withBound(ctx)
		defer cancel()
	}
	return rc.l.client.b.release(ctx, rc.l, rc.link)
}

// retryReleaseCall tries once more, detached, a release that the caller's
// deadline cut off, until giveUp. A call that ran in detached's goroutine
// already had until giveUp (or its own cleanupTimeout without a deadline),
// and comes here only when that ran out: a retry of its own cleanupTimeout
// would make the delete outlive the 2 s the docs promise, and Close wait
// for it (TestReleaseGivesUpTwoSecondsAfterDeadline).
func retryReleaseCall(rc releaseCall, _ releaseOutcome, err error) {
	if err != nil && time.Now().Before(rc.giveUp) {
		rc.l.client.backgroundUntil(rc.giveUp, func(ctx context.Context) { _, _ = rc.l.client.b.release(ctx, rc.l, rc.link) })
	}
}

// observeEnd reports the end of a hold by Release, with what Redis said.
func (l *Lock) observeEnd(out releaseOutcome, err error) {
	cause := ErrReleased
	switch {
	case err != nil:
	case out == releaseGone:
		cause = ErrExpired
	case out == releaseTaken:
		cause = ErrTaken
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.observeEndLocked(cause)
}

// lostBeforeRelease records what a release found: the lock had been lost
// before it (Lost fires, Err says why, unless a loss was seen already).
func (l *Lock) lostBeforeRelease(cause error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cause == ErrReleased {
		l.cause = cause
		if l.lost != nil {
			close(l.lost)
		}
	}
}

// Extend resets the lease to ttl from now and makes ttl the lease that
// renewal keeps. On a reentrant lock with other holds the lease is theirs
// too: Extend (and renewal) lengthens it to ttl but never shortens it. It
// returns ErrNotHeld, changing nothing, when the lock is no longer held
// (and ErrNotHeld too if it was lost while the call was under way: Redis
// may then have renewed a lease that Release frees), ErrInvalidTTL for a
// ttl outside [MinTTL, MaxTTL] (or below MinRenewedTTL for a lock that is
// renewed), and otherwise wraps the Redis error (the lock
// stays held and renewed, valid for the shorter of its old lease and ttl
// until a renewal confirms it). A renewal of the lock in flight is waited
// for before the call goes out: calls that set a lease never overlap. If
// ctx ends meanwhile, Extend returns its error and changes nothing. A nil
// ctx gets ErrNilContext, and renewal goes on as before.
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	if ctx == nil {
		return ErrNilContext
	}
	if l.none() {
		return ErrNotHeld
	}
	c := l.client
	if c.obs == nil {
		return l.extendCall(ctx, ttl)
	}
	start := time.Now()
	ctx = c.obs.Start(ctx, EventExtend, l.key)
	err := l.extendCall(ctx, ttl)
	c.obs.Observe(ctx, Event{Kind: EventExtend, Key: l.key, Fence: l.fence, Err: err, Duration: time.Since(start)})
	return err
}

// extendCall is extend for Extend's caller, whose ctx may have ended
// before the call: then nothing is sent and nothing changes, as when ctx
// ends while it waits for a renewal in flight. Sent all the same (in the
// background, or inline with its ttl kept for renewal), it left the lock
// renewed with the lease that the caller was told it did not get.
func (l *Lock) extendCall(ctx context.Context, ttl time.Duration) error {
	if err := checkTTL(ttl, l.renew); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("distlock: extend %q: %w", l.key, err)
	}
	return l.extend(ctx, ttl)
}

func (l *Lock) extend(ctx context.Context, ttl time.Duration) error {
	if err := checkTTL(ttl, l.renew); err != nil {
		return err
	}
	if err := l.beginLeaseCall(ctx); err != nil {
		if errors.Is(err, ErrNotHeld) {
			return err
		}
		return fmt.Errorf("distlock: extend %q: %w", l.key, err)
	}
	start := time.Now()
	l.mu.Lock()
	// Until Redis answers, the lease may already be the new one.
	shorter := ttl < l.ttl
	l.ttl = ttl
	l.valid = minTime(l.valid, start.Add(ttl-drift(ttl)))
	l.mu.Unlock()
	l.client.track(l) // the scheduler must see the new deadline

	out, err := detachedFunc(l.client, ctx, func(ctx context.Context) (extendOutcome, error) {
		out, err := l.client.b.extend(ctx, l, ttl)
		if shorter && l.kind.announce && out != extendGone && out != extendTaken {
			// The lease may now end before the moment an election's
			// observers read from it (Observe): they read it again.
			b := l.client.b
			_ = b.admin().Do(ctx, b.publish(), l.names.channel(), "e").Err()
		}
		return l.extended(start, out, err), err
	})
	if err != nil {
		return fmt.Errorf("distlock: extend %q: %w", l.key, err)
	}
	switch out {
	case extendDone:
		return nil
	case extendUnacked:
		return fmt.Errorf("distlock: extend %q: %w", l.key, ErrNotReplicated)
	case extendUndecided:
		return fmt.Errorf("distlock: extend %q: no majority answered", l.key)
	}
	return ErrNotHeld
}

// extended applies the answer to an Extend sent at start, even when
// its caller stopped waiting, and ends its lease call. It returns the
// outcome for the caller: extendGone when Redis renewed a lease the Lock
// gave up meanwhile (its deadline passed, or Release ran; Release frees it).
func (l *Lock) extended(start time.Time, out extendOutcome, err error) extendOutcome {
	l.mu.Lock()
	l.leaseCallEndedLocked()
	stillHeld := l.state == held
	switch {
	case (err != nil || out == extendUndecided) && stillHeld:
		// The lease in Redis is the old one or ttl's: renewal confirms it
		// soon, and must go out before the shorter deadline set above.
		l.renewAt = minTime(l.renewAt, time.Now().Add(l.retryGapLocked()))
		if out == extendUnknown {
			l.leaseUnknownLocked()
		}
	case err != nil || out == extendUndecided:
	case !stillHeld:
		out = extendGone
	case out == extendDone:
		l.confirmLocked(start) // l.ttl is ttl: no other lease call ran meanwhile
	case out == extendUnacked:
		l.endLocked(lost, notReplicatedCause)
	default:
		l.endLocked(lost, lossCause(out))
	}
	l.mu.Unlock()
	if stillHeld {
		l.client.track(l) // the scheduler must see the new deadline
	}
	return out
}

// beginLeaseCall waits until no other call that sets l's lease is in
// flight, then marks one as in flight, for its caller: the renewer skips l
// until leaseCallEndedLocked. Such calls must not overlap. A renewal's guard
// comes from the last confirmed call (see guard); one sent while an Extend
// is in flight could reach Redis after the deadline the Extend's answer
// sets and find more lease left than its guard, and renew for nobody.
func (l *Lock) beginLeaseCall(ctx context.Context) error {
	for {
		l.mu.Lock()
		if l.state != held {
			l.mu.Unlock()
			return ErrNotHeld
		}
		if !l.renewing {
			l.renewing = true
			l.mu.Unlock()
			return nil
		}
		if l.leaseIdle == nil {
			l.leaseIdle = make(chan struct{})
		}
		idle := l.leaseIdle
		l.mu.Unlock()
		select {
		case <-idle:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// leaseCallEndedLocked ends the lease call in flight.
func (l *Lock) leaseCallEndedLocked() {
	l.renewing = false
	l.wakeLeaseWaitersLocked()
}

// wakeLeaseWaitersLocked wakes the callers waiting in beginLeaseCall.
func (l *Lock) wakeLeaseWaitersLocked() {
	if l.leaseIdle != nil {
		close(l.leaseIdle)
		l.leaseIdle = nil
	}
}

// TTL returns the lease left on the server, ErrNotHeld when the lock is no
// longer held (which ends the hold: Lost closes, cause ErrExpired) or was
// already released or known lost, ErrNilContext for a nil ctx, or wraps the
// Redis error.
func (l *Lock) TTL(ctx context.Context) (time.Duration, error) {
	if ctx == nil {
		return 0, ErrNilContext
	}
	if l.none() || !l.isHeld() {
		// A lock known lost may still have its grant in Redis (the lease
		// ran out locally first, or an unacknowledged renewal set it):
		// a lease there is no one's, and must not read as this holder's.
		return 0, ErrNotHeld
	}
	d, err := detachedFunc(l.client, ctx, func(ctx context.Context) (time.Duration, error) {
		return l.client.b.pttl(ctx, l)
	})
	if err != nil {
		return 0, fmt.Errorf("distlock: ttl %q: %w", l.key, err)
	}
	if d < 0 {
		// Redis no longer has the hold: it is known lost now (Lost and
		// Context say so at once, not at the next renewal).
		l.end(lost, ErrExpired)
		return 0, ErrNotHeld
	}
	return d, nil
}

// Lost returns a channel that is closed once the lock is known lost: renewal
// found it expired or taken, or its lease ran out locally without a confirmed
// renewal (Redis unreachable), or the Client was closed. It is not closed by
// Release. The reason is in Err.
func (l *Lock) Lost() <-chan struct{} {
	if l.none() {
		return closedChan
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost == nil {
		l.lost = make(chan struct{})
		if l.cause != nil && l.cause != ErrReleased {
			close(l.lost)
		}
	}
	return l.lost
}

// Err returns nil while the lock is held, ErrReleased after Release, and the
// reason (matching ErrLost) after it was lost, also when the loss was found
// by Release.
func (l *Lock) Err() error {
	if l.none() {
		return ErrNotHeld
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cause
}

// Context returns a context derived from parent that is cancelled when the
// lock is lost or released; context.Cause tells which (ErrExpired, ErrTaken,
// ErrUnreachable, ErrNotReplicated, ErrClosed or ErrReleased). Run the
// protected work under it, and call the returned cancel func when done, as
// for any context: it forgets the derived context at once. A nil parent
// gives a context already cancelled with cause ErrNilContext, so that no
// work starts under it (context.WithCancel would panic).
func (l *Lock) Context(parent context.Context) (context.Context, context.CancelFunc) {
	if parent == nil {
		return doneContext(ErrNilContext)
	}
	ctx, cancel := context.WithCancelCause(parent)
	if l.none() {
		cancel(ErrNotHeld)
		return ctx, func() {}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != held {
		cancel(l.cause)
		return ctx, func() {}
	}
	l.ctxs.add(&l.mu, ctx, cancel)
	return ctx, func() { cancel(context.Canceled) }
}

// confirm asks Redis about a grant whose lease start is uncertain (a
// handoff after a long wait): with renewal on, or extend (so that
// WithReplicaAck's WAIT follows it), it extends the lease, otherwise it
// reads the lease left; the local deadline then counts from
// start, when the question was sent. It returns ErrNotHeld when the grant
// is gone, and leaves the Lock as it was when ctx ends or Redis fails.
func (l *Lock) confirm(ctx context.Context, start time.Time, extend bool) error {
	b := l.client.b
	if l.renew || extend {
		if err := l.beginLeaseCall(ctx); err != nil {
			return err
		}
		out, err := detachedFunc(l.client, ctx, func(ctx context.Context) (extendOutcome, error) {
			out, err := b.extend(ctx, l, l.lease())
			l.mu.Lock()
			l.leaseCallEndedLocked()
			switch {
			case l.state != held:
			case err == nil && out == extendDone:
				l.confirmLocked(start)
			case out == extendUnknown:
				l.leaseUnknownLocked()
			}
			l.mu.Unlock()
			return out, err
		})
		switch {
		case err != nil:
			return err
		case out != extendDone:
			l.end(lost, lossCause(out))
			return ErrNotHeld
		case !l.isHeld(): // ended meanwhile (Close): Release frees the lease
			return ErrNotHeld
		}
	} else {
		left, err := detachedFunc(l.client, ctx, func(ctx context.Context) (time.Duration, error) {
			return b.pttl(ctx, l)
		})
		switch {
		case err != nil:
			return err
		case left < 0:
			l.end(lost, ErrExpired)
			return ErrNotHeld
		}
		l.mu.Lock()
		l.valid = start.Add(left - drift(l.ttl))
		l.slack = time.Since(start) + drift(l.ttl)
		l.mu.Unlock()
	}
	l.client.track(l)
	return nil
}

// guard is the least lease, in ms, that Redis must still have for a
// renewal of l to apply (ARGV[3] of the extend scripts). A renewal that
// finds less may have been held up in the network past valid, when the
// scheduler declared l lost: extending the lease then would leave it held
// by nobody for another TTL. The server's lease ends at most slack after
// valid, and one more drift covers the two clocks' rates over that lease
// (span): the drift of ttl, when the lease is a handoff's 2 s or a few
// seconds left and ttl is minutes, exceeds the lease, and every renewal
// would be refused.
func (l *Lock) guard() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return int64((l.slack + drift(l.span) + time.Millisecond - 1) / time.Millisecond)
}

// leaseUnknownLocked follows a call that may have set l's lease without
// an answer (extendUnknown). That lease ends up to a TTL after the call
// reached Redis, later than slack allows for: a renewal held up in the
// network past valid would find it, pass its guard and renew for nobody.
// The next renewal's guard exceeds any lease of l's TTL, so Redis refuses
// it and tells the lease left (lateRenewalLocked), which bounds the lease
// again: one round trip more, once.
func (l *Lock) leaseUnknownLocked() {
	l.slack = max(l.slack, l.ttl+drift(l.ttl))
}

// raiseSlack makes l's slack at least slack.
func (l *Lock) raiseSlack(slack time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.slack = max(l.slack, slack)
}

// setSlack sets l's slack (see guard) and returns the one it had.
func (l *Lock) setSlack(slack time.Duration) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	old := l.slack
	l.slack = slack
	return old
}

func (l *Lock) lease() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ttl
}

func (l *Lock) isHeld() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state == held
}

// confirmLocked records that the server set the lease at or after start.
// The server's expiry therefore falls at or after start+ttl; the local
// deadline keeps a drift margin before it.
func (l *Lock) confirmLocked(start time.Time) {
	l.valid = start.Add(l.ttl - drift(l.ttl))
	l.slack = time.Since(start) + drift(l.ttl)
	l.span = l.ttl
	l.renewAt = start.Add(l.ttl / 3)
	l.lastErr = nil
}

// drift is the margin for clock-rate differences and signal delivery, as in
// the Redlock algorithm: 1% of the lease plus 2ms.
func drift(ttl time.Duration) time.Duration {
	return ttl/100 + 2*time.Millisecond
}

func (l *Lock) end(state lockState, cause error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.endLocked(state, cause)
}

// endLocked ends a held lock; a lost lock that is released stays lost
// (its cause stays) but counts as released.
func (l *Lock) endLocked(state lockState, cause error) {
	if l.state != held {
		if state == released {
			l.state = released
		}
		return
	}
	l.state, l.cause = state, cause
	// Callers waiting in beginLeaseCall find it ended.
	l.wakeLeaseWaitersLocked()
	if state == lost { // observed before the signal, so a watcher finds the event
		l.observeEndLocked(cause)
	}
	l.ctxs.cancelAll(cause) // before Lost closes (see contexts)
	if state == lost && l.lost != nil {
		close(l.lost)
	}
}

// announce marks l as reported to observers, and reports its end if it
// ended before.
func (l *Lock) announce() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.announced = true
	if l.state == lost {
		l.observeEndLocked(l.cause)
	}
}

// observeEndLocked reports the end of an announced hold, once. A release
// reports it when Redis has said whether the hold was still there.
func (l *Lock) observeEndLocked(cause error) {
	if c := l.client; c.obs != nil && l.announced {
		l.announced = false
		c.obs.Observe(context.Background(), Event{Kind: EventHoldEnded, Key: l.key, Fence: l.fence, Err: cause, Duration: time.Since(l.since)})
	}
}

// lossCause maps what a renewal or extend found to the reason of a loss.
func lossCause(out extendOutcome) error {
	switch out {
	case extendTaken:
		return ErrTaken
	case extendUnacked:
		return notReplicatedCause
	}
	return ErrExpired
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// doneContext returns a context already cancelled with cause, and a cancel
// func with nothing left to do.
func doneContext(cause error) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(cause)
	return ctx, func() {}
}

var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()
