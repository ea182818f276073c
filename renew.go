package distlock

import (
	"container/heap"
	"context"
	"fmt"
	"math"
	"sync"
	"time"
)

// maxRenewBatch bounds one renewal pipeline, so a slow batch does not delay
// every other lock.
const maxRenewBatch = 512

// New locks wait in the renewer's pending list until the scheduler next
// wakes: at most pendingDrain later, or once maxPending of them wait.
const (
	pendingDrain = time.Second
	maxPending   = 4096
)

// renewAllGap bounds how often renewAll renews every lock.
const renewAllGap = time.Second

// renewer is the one scheduler per Client behind every Lock: it renews due
// leases in pipelined batches and fires the loss signal of any lock whose
// local validity deadline passes without a confirmed renewal. It runs two
// goroutines whatever the number of locks: the scheduler, which never blocks
// on Redis so that deadlines fire even while Redis hangs, and one worker that
// sends batches.
type renewer struct {
	b   backend
	obs Observer

	mu      sync.Mutex
	pending []*Lock
	ended   []*Lock // released while scheduled: to leave the schedule
	stopped bool
	rush    bool      // renew every lock now (renewAll)
	rushed  time.Time // when renewAll last asked
	putOff  bool      // a renewAll within renewAllGap waits for its end
	armedAt int64     // unix ns the scheduler's timer fires; guarded by mu
	// scheduled is how many locks the scheduler had when it last armed its
	// timer; guarded by mu, for tests
	scheduled int

	wake    chan struct{}
	quit    chan struct{}
	done    chan struct{}
	batches chan []*Lock
	results chan []renewResult
}

type renewResult struct {
	l     *Lock
	start time.Time     // when the renewal was sent
	ttl   time.Duration // the lease it asked for
	out   extendOutcome
	left  time.Duration // the lease Redis had left, when out is extendLate
	err   error
}

// failure is why a renewal failed, nil when it did not fail that way.
func (x renewResult) failure() error {
	if x.out == extendLate {
		return fmt.Errorf("a renewal reached Redis with only %v of the lease left", x.left)
	}
	return x.err
}

func startRenewer(c *Client) *renewer {
	r := &renewer{
		b:       c.b,
		obs:     c.obs,
		wake:    make(chan struct{}, 1),
		quit:    make(chan struct{}),
		done:    make(chan struct{}),
		batches: make(chan []*Lock),
		results: make(chan []renewResult),
	}
	// Both goroutines start here, so that a renewer is complete (and seen
	// whole by leak checks) once startRenewer returns. The worker counts in
	// c.bg: Close waits for a renewal in flight as for the other background
	// work, for a bounded time, since a Redis client that ignores deadlines
	// may hold the batch until its ReadTimeout.
	c.bg.add()
	go func() {
		defer c.bg.done()
		r.work()
	}()
	go r.run()
	return r
}

// track hands a new or extended lock to the Client's renewer, starting it on
// first use.
func (c *Client) track(l *Lock) {
	c.mu.Lock()
	if c.closed.Load() {
		c.mu.Unlock()
		l.end(lost, closedCause)
		return
	}
	if c.renewer == nil {
		c.renewer = startRenewer(c)
	}
	r := c.renewer
	c.mu.Unlock()
	if l.renew && c.watching.CompareAndSwap(false, true) {
		c.watchRestarts() // (what it tells renews renewed locks only)
	}
	r.add(l)
}

// forget has the renewer drop l, released, from its schedule (see
// renewer.forget).
func (c *Client) forget(l *Lock) {
	c.mu.Lock()
	r := c.renewer
	c.mu.Unlock()
	if r != nil {
		r.forget(l)
	}
}

// renewAll renews every lock c holds now (see renewer.renewAll).
func (c *Client) renewAll() {
	c.mu.Lock()
	r := c.renewer
	c.mu.Unlock()
	if r != nil {
		r.renewAll()
	}
}

func (r *renewer) add(l *Lock) {
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		l.end(lost, closedCause)
		return
	}
	r.pending = append(r.pending, l)
	// Wake the scheduler only if l needs it before its timer, or to keep
	// pending short: a new lock is usually due TTL/3 after the locks
	// already scheduled, and a wake-up per grant costs a goroutine switch on
	// the acquire path.
	wake := l.nextEvent().UnixNano() < r.armedAt || len(r.pending) >= maxPending
	r.mu.Unlock()
	if wake {
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
}

// forget hands the scheduler a released lock to take out of its schedule,
// where it would otherwise stay until its renewal time, a third of its TTL
// (up to 8 h) away: with long leases the schedule grew with every release.
// The scheduler takes it out when it next wakes, within pendingDrain; it is
// woken only if it would sleep longer.
func (r *renewer) forget(l *Lock) {
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return
	}
	r.ended = append(r.ended, l)
	wake := len(r.ended) == 1 && r.armedAt > time.Now().Add(pendingDrain).UnixNano()
	r.mu.Unlock()
	if wake {
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
}

// renewAll asks the scheduler to renew every lock it has now, not at its
// scheduled time: a Client whose subscription came back after a break may
// be talking to a server that restarted empty or a replica promoted
// without some grants, and a holder should hear of that within a round
// trip, not a third of its TTL later. A break costs one early renewal per
// lock, and a connection that keeps breaking at most one per lock per
// renewAllGap: asks within it are put off to its end, one for all of them,
// not dropped, since a server that restarts again soon after (a crash
// loop) may have lost a lock granted between the two.
func (r *renewer) renewAll() {
	r.mu.Lock()
	if now := time.Now(); now.Sub(r.rushed) >= renewAllGap {
		r.rush, r.rushed = true, now
	} else if !r.putOff && !r.stopped {
		r.putOff = true
		time.AfterFunc(renewAllGap-now.Sub(r.rushed), func() {
			r.mu.Lock()
			r.putOff = false
			r.mu.Unlock()
			r.renewAll()
		})
	}
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// stop ends the scheduler, which ends the locks it has (lost, ErrClosed).
// It does not wait for a renewal in flight (see startRenewer).
func (r *renewer) stop() {
	r.mu.Lock()
	r.stopped = true
	r.mu.Unlock()
	close(r.quit)
	<-r.done
}

// run is the scheduler. Once stopped it ends the locks it has, without
// waiting for the worker (see startRenewer).
func (r *renewer) run() {
	defer close(r.done)
	var (
		sched    schedule
		queue    []*Lock // due, waiting for the worker
		inflight bool
		timer    = time.NewTimer(time.Hour)
	)
	defer func() {
		timer.Stop()
		close(r.batches)
		for _, l := range append(sched, r.takePending()...) {
			l.end(lost, closedCause)
		}
	}()
	for {
		r.arm(&sched, timer)
		select {
		case <-r.quit:
			return
		case <-r.wake:
		case <-timer.C:
		case res := <-r.results:
			inflight = false
			for _, x := range res {
				x.l.applyRenewal(x)
				if x.l.isHeld() {
					sched.at(x.l, x.l.nextEvent())
				} else {
					sched.remove(x.l)
				}
			}
		}
		if r.takeRush(&sched) {
			sched.renewAllAt(time.Now())
		}
		queue = sched.popDue(time.Now(), queue)
		if !inflight && len(queue) > 0 {
			var batch []*Lock
			batch, queue = nextBatch(queue)
			if len(batch) > 0 {
				select {
				case r.batches <- batch:
					inflight = true
				case <-r.quit:
					return
				}
			}
		}
	}
}

// arm schedules the pending locks still held and sets the timer for the
// earliest event; under mu, so that add sees the time the timer really
// fires. Locks released before the scheduler saw them (most short holds)
// never enter the schedule. While locks come and go, the timer fires at
// least every pendingDrain, so that add need not wake the scheduler for a
// lock due later.
func (r *renewer) arm(sched *schedule, timer *time.Timer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	busy := r.schedulePendingLocked(sched)
	var next time.Time
	if len(*sched) > 0 {
		next = (*sched)[0].heapAt
	}
	if busy && (next.IsZero() || time.Until(next) > pendingDrain) {
		next = time.Now().Add(pendingDrain)
	}
	r.armedAt = math.MaxInt64
	if !next.IsZero() {
		timer.Reset(time.Until(next))
		r.armedAt = next.UnixNano()
	}
}

// schedulePendingLocked moves the pending locks still held into sched,
// takes the released ones out, and reports whether there were any.
func (r *renewer) schedulePendingLocked(sched *schedule) bool {
	busy := len(r.pending) > 0 || len(r.ended) > 0
	for _, l := range r.pending {
		if l.isHeld() {
			sched.at(l, l.nextEvent())
			if !l.isHeld() {
				sched.remove(l)
			}
		}
	}
	clear(r.pending)
	r.pending = r.pending[:0]
	for _, l := range r.ended {
		sched.remove(l)
	}
	clear(r.ended)
	r.ended = r.ended[:0]
	r.scheduled = len(*sched)
	return busy
}

// takeRush reports whether renewAll was asked for since it last looked,
// and then schedules the pending locks too: a lock granted just before the
// break may not have been scheduled yet.
func (r *renewer) takeRush(sched *schedule) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.rush {
		return false
	}
	r.rush = false
	r.schedulePendingLocked(sched)
	return true
}

func (r *renewer) takePending() []*Lock {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.pending
	r.pending = nil
	return p
}

// work sends renewal batches; it is the only goroutine that waits on Redis.
func (r *renewer) work() {
	for batch := range r.batches {
		// The lag is how late the batch goes out: taken before the
		// round trip, which says nothing about the renewer.
		var lag time.Duration
		if r.obs != nil {
			lag = time.Since(firstDue(batch))
		}
		res := r.b.renew(batch)
		if r.obs != nil {
			r.observe(res, lag)
		}
		select {
		case r.results <- res:
		case <-r.quit:
			return
		}
	}
}

// firstDue is the earliest renewal time in batch.
func firstDue(batch []*Lock) time.Time {
	var due time.Time
	for _, l := range batch {
		l.mu.Lock()
		// A lock is not due before its grant: one handed over counts its
		// lease, for safety, from its waiter's last ask, so its renewal
		// may be due before the handoff that set the lease.
		at := l.renewAt
		if at.Before(l.since) {
			at = l.since
		}
		l.mu.Unlock()
		if due.IsZero() || at.Before(due) {
			due = at
		}
	}
	return due
}

// observe reports a renewal batch: its size, the leases that got no
// answer, and how late it went out (lag).
func (r *renewer) observe(res []renewResult, lag time.Duration) {
	e := Event{Kind: EventRenewal, Batch: len(res), Lag: max(lag, 0)}
	for _, x := range res {
		// (A renewal refused as late got an answer: it is retried or the
		// lock is lost, and a timeout before it was counted already.)
		if x.err != nil || x.out == extendUndecided {
			e.Failed++
			if e.Err == nil {
				e.Err = x.failure()
			}
		}
	}
	r.obs.Observe(context.Background(), e)
}

// nextEvent is when the scheduler must look at l again: its renewal time,
// or its validity deadline while a renewal is pending or renewal is off.
func (l *Lock) nextEvent() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.renew && !l.renewing && l.renewAt.Before(l.valid) {
		return l.renewAt
	}
	return l.valid
}

// dueForRenewal reports whether l should be renewed now; a lock past its
// validity deadline is ended as lost instead.
func (l *Lock) dueForRenewal(now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != held {
		return false
	}
	if !now.Before(l.valid) {
		l.endLocked(lost, l.expiryCauseLocked())
		return false
	}
	if !l.renew || l.renewing || now.Before(l.renewAt) {
		return false
	}
	l.renewing = true
	return true
}

// renewBy brings l's next renewal forward to now if it is later, and
// reports whether it did; a lock not renewing, or with a lease call in
// flight (whose answer says what a renewal would), is left alone.
func (l *Lock) renewBy(now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != held || !l.renew || l.renewing || !l.renewAt.After(now) {
		return false
	}
	l.renewAt = now
	return true
}

func (l *Lock) expiryCauseLocked() error {
	if !l.renew {
		return ErrExpired
	}
	if l.lastErr != nil {
		return fmt.Errorf("%w: %w", ErrUnreachable, l.lastErr)
	}
	return ErrUnreachable
}

func (l *Lock) applyRenewal(x renewResult) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.leaseCallEndedLocked()
	if l.state != held {
		return
	}
	switch {
	case x.err != nil || x.out == extendUndecided:
		l.lastErr = x.err
		if x.out == extendUnknown {
			l.leaseUnknownLocked()
		}
		// Retry soon, but not in a tight loop against a failing server.
		l.renewAt = time.Now().Add(l.retryGapLocked())
	case x.out == extendLate:
		l.lateRenewalLocked(x)
	case x.out != extendDone:
		l.endLocked(lost, lossCause(x.out))
	case x.ttl != l.ttl:
		l.renewAt = time.Now() // Extend changed the lease meanwhile: renew with it
	default:
		l.confirmLocked(x.start)
	}
}

// lateRenewalLocked takes in a renewal that Redis refused because less
// lease was left than its guard. Its answer came back, so the lease runs
// from the renewal's start for about left, no more and no less: that bound,
// known within one round trip, replaces the one the lock had, which may
// have been far looser (a grant handed over after a long wait) or far later
// than the lease Redis has (a restart from a snapshot brought back an older,
// shorter one). A retry, whose guard is then slack plus drift, goes out at
// once if it can still pass: it finds about a round trip (slack) less
// lease than the refusal did. Otherwise the lock runs out, and is lost at
// the new bound. (A renewal after a call that may have landed is always
// refused, leaseUnknownLocked: after an outage a lock then needs this
// second round trip to be renewed.)
func (l *Lock) lateRenewalLocked(x renewResult) {
	l.lastErr = x.failure()
	// Its margins are those of a lease of left, not of ttl: a margin of
	// ttl's drift (36 s for an hour) could put the bound in the past, and
	// lose a lock whose lease Redis has (after an Extend to a far longer
	// ttl that may not have landed, say).
	l.span = x.left
	l.valid = x.start.Add(x.left - drift(x.left))
	l.slack = time.Since(x.start) + drift(x.left)
	l.renewAt = l.valid
	if x.left > 2*l.slack {
		l.renewAt = time.Now()
	}
}

// retryGapLocked is how long renewal waits to try again after a call that
// set no lease: a tenth of the lease in force, span, or of ttl if shorter,
// and at most a second. A tenth of ttl alone outlasted a handoff's 2 s
// first lease for a TTL of 20 s or more: one failed renewal lost the lock,
// with Redis back at once. And uncapped, a lock of an hour whose Redis
// came back with up to 6 minutes of its lease left was lost all the same.
func (l *Lock) retryGapLocked() time.Duration {
	return min(max(min(l.ttl, l.span)/10, time.Millisecond), time.Second)
}

func (l *Lock) validUntil() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.valid
}

// schedule is a min-heap of locks by their next event; each lock is in it at
// most once (heapIdx), so its size is the number of live locks.
type schedule []*Lock

func (s schedule) Len() int           { return len(s) }
func (s schedule) Less(i, j int) bool { return s[i].heapAt.Before(s[j].heapAt) }
func (s schedule) Swap(i, j int) {
	s[i], s[j] = s[j], s[i]
	s[i].heapIdx, s[j].heapIdx = i, j
}
func (s *schedule) Push(x any) {
	l := x.(*Lock)
	l.heapIdx = len(*s)
	l.scheduled.Store(true)
	*s = append(*s, l)
}
func (s *schedule) Pop() any {
	old := *s
	l := old[len(old)-1]
	old[len(old)-1] = nil
	*s = old[:len(old)-1]
	l.heapIdx = -1
	l.scheduled.Store(false)
	return l
}

// remove takes l out, if it is in.
func (s *schedule) remove(l *Lock) {
	if l.heapIdx >= 0 {
		heap.Remove(s, l.heapIdx)
	}
}

// at (re)schedules l for t.
func (s *schedule) at(l *Lock, t time.Time) {
	l.heapAt = t
	if l.heapIdx >= 0 {
		heap.Fix(s, l.heapIdx)
		return
	}
	heap.Push(s, l)
}

// renewAllAt makes every lock that renews and has no lease call in flight
// due for renewal at now. It touches every lock once: a renewAll is rare.
func (s *schedule) renewAllAt(now time.Time) {
	for _, l := range *s {
		if l.renewBy(now) {
			l.heapAt = now
		}
	}
	heap.Init(s)
}

// popDue removes the locks whose event has come, appends those due for
// renewal to queue and reschedules every lock still held.
func (s *schedule) popDue(now time.Time, queue []*Lock) []*Lock {
	var again []*Lock
	for len(*s) > 0 && !(*s)[0].heapAt.After(now) {
		l := heap.Pop(s).(*Lock)
		if l.dueForRenewal(now) {
			queue = append(queue, l)
		}
		if l.isHeld() {
			again = append(again, l)
		}
	}
	for _, l := range again {
		s.at(l, l.nextEvent())
		if !l.isHeld() { // released after the check above: Release saw it unscheduled
			s.remove(l)
		}
	}
	return queue
}

// nextBatch takes up to maxRenewBatch locks still held from the front of
// queue, dropping ended ones on the way. It looks at each lock once: the
// queue can hold many thousands of locks when Redis is slow, and filtering
// all of it on every wake-up made the scheduler quadratic.
func nextBatch(queue []*Lock) (batch, rest []*Lock) {
	i := 0
	for ; i < len(queue) && len(batch) < maxRenewBatch; i++ {
		l := queue[i]
		queue[i] = nil
		if l.isHeld() {
			batch = append(batch, l)
			continue
		}
		l.mu.Lock()
		l.leaseCallEndedLocked()
		l.mu.Unlock()
	}
	return batch, queue[i:]
}
