package distlock

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"
)

// Lock is one grant of a lock. Its methods are safe for concurrent use; on a
// nil *Lock they return ErrNotHeld.
type Lock struct {
	client *Client
	key    string
	names  keyNames
	token  string
	owner  string // the value Redis compares: token, or the WithOwner id
	fence  int64
	fenceS string
	renew  bool
	// nodeFences holds, on a quorum Client, each node's own fence for this
	// grant ("" where the node did not grant it); the scripts compare it.
	nodeFences []string

	mu      sync.Mutex
	ttl     time.Duration
	valid   time.Time // local validity deadline: lease start + ttl - drift
	renewAt time.Time
	state   lockState
	cause   error
	lost    chan struct{}
	cancels []context.CancelCauseFunc
	lastErr error // last renewal error, reported when the lease runs out

	// owned by the renewer goroutine
	heapIdx  int
	heapAt   time.Time
	renewing bool
}

type lockState uint8

const (
	held lockState = iota
	released
	lost
)

// newLock builds the Lock of a grant. The caller sets its validity and
// hands it to the renewer: granted, handedOver or newQuorumLock.
func newLock(c *Client, key string, names keyNames, token, owner string, fence int64, cfg lockConfig) *Lock {
	return &Lock{
		client: c, key: key, names: names, token: token, owner: owner,
		fence: fence, fenceS: strconv.FormatInt(fence, 10), renew: !cfg.noRenew,
		ttl: cfg.ttl, lost: make(chan struct{}), heapIdx: -1,
	}
}

// granted starts l as granted by a command sent at start, and schedules it.
func (l *Lock) granted(start time.Time) *Lock {
	l.confirmLocked(start)
	l.client.track(l)
	return l
}

// Key returns the lock's name as given to TryLock or Lock.
func (l *Lock) Key() string {
	if l == nil {
		return ""
	}
	return l.key
}

// Token returns the random 128-bit token of this grant.
func (l *Lock) Token() string {
	if l == nil {
		return ""
	}
	return l.token
}

// Fence returns the fencing token of this grant: strictly greater than the
// fence of every earlier grant of the same key. Pass it to the resource you
// protect so that it can refuse writes from a holder that lost the lock
// (see FenceGuard). Reentrant holds share one fence.
func (l *Lock) Fence() int64 {
	if l == nil {
		return 0
	}
	return l.fence
}

// Release gives the lock back. It returns ErrNotHeld, and changes nothing in
// Redis, when the lock expired, was taken by another owner or was already
// released through this Lock. For a reentrant lock it drops one hold; the
// last one frees the lock.
func (l *Lock) Release(ctx context.Context) error {
	if l == nil {
		return ErrNotHeld
	}
	l.mu.Lock()
	done := l.state == released
	l.mu.Unlock()
	if done {
		return ErrNotHeld
	}
	if l.client.isQuorum() {
		return l.releaseQuorum(ctx)
	}
	res, err := releaseScript.Run(ctx, l.client.rdb, l.names.all(),
		l.owner, l.fenceS, l.names.notice, lineEntryTTL.Milliseconds()).Slice()
	if err != nil {
		return fmt.Errorf("distlock: release %q: %w", l.key, err)
	}
	if left, _ := res[0].(int64); left < 0 {
		l.end(lost, ErrTaken)
		return ErrNotHeld
	} else if left == 0 {
		l.client.tellWaiters(l.names, res)
	}
	l.end(released, ErrReleased)
	return nil
}

// Extend resets the lease to ttl from now and makes ttl the lease that
// renewal keeps. It returns ErrNotHeld, changing nothing, when the lock is no
// longer held.
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	if l == nil {
		return ErrNotHeld
	}
	if ttl < time.Millisecond || ttl > MaxTTL {
		return fmt.Errorf("%w: %v is outside [1ms, %v]", ErrInvalidTTL, ttl, MaxTTL)
	}
	if !l.isHeld() {
		return ErrNotHeld
	}
	start := time.Now()
	ok, err := l.extendOnce(ctx, ttl)
	if err != nil {
		return fmt.Errorf("distlock: extend %q: %w", l.key, err)
	}
	if ok != 1 {
		l.end(lost, extendCause(ok))
		return ErrNotHeld
	}
	l.mu.Lock()
	l.ttl = ttl
	l.confirmLocked(start)
	l.mu.Unlock()
	l.client.track(l)
	return nil
}

// TTL returns the lease left on the server, or ErrNotHeld.
func (l *Lock) TTL(ctx context.Context) (time.Duration, error) {
	if l == nil {
		return 0, ErrNotHeld
	}
	ms, err := l.pttl(ctx)
	if err != nil {
		return 0, fmt.Errorf("distlock: ttl %q: %w", l.key, err)
	}
	if ms < 0 {
		return 0, ErrNotHeld
	}
	return time.Duration(ms) * time.Millisecond, nil
}

func (l *Lock) extendOnce(ctx context.Context, ttl time.Duration) (int64, error) {
	if l.client.isQuorum() {
		return l.extendQuorum(ctx, ttl)
	}
	cmd, acked := l.client.ack.runAcked(ctx, l.client.rdb, extendScript, []string{l.names.lock}, l.owner, l.fenceS, ttl.Milliseconds())
	v, err := cmd.Int64()
	if err == nil && v == 1 && !acked {
		// Extended on the master only: a failover could forget it.
		l.end(lost, notReplicatedCause)
		return 0, fmt.Errorf("distlock: extend %q: %w", l.key, ErrNotReplicated)
	}
	return v, err
}

func (l *Lock) pttl(ctx context.Context) (int64, error) {
	if l.client.isQuorum() {
		return l.pttlQuorum(ctx)
	}
	return pttlScript.Run(ctx, l.client.rdb, []string{l.names.lock}, l.owner, l.fenceS).Int64()
}

// Lost returns a channel that is closed once the lock is known lost: renewal
// found it expired or taken, or its lease ran out locally without a confirmed
// renewal (Redis unreachable), or the Client was closed. It is not closed by
// Release. The reason is in Err.
func (l *Lock) Lost() <-chan struct{} {
	if l == nil {
		return closedChan
	}
	return l.lost
}

// Err returns nil while the lock is held, ErrReleased after Release, and the
// reason (matching ErrLost) after it was lost.
func (l *Lock) Err() error {
	if l == nil {
		return ErrNotHeld
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cause
}

// Context returns a context derived from parent that is cancelled when the
// lock is lost or released; context.Cause tells which (ErrExpired, ErrTaken,
// ErrUnreachable, ErrClosed or ErrReleased). Run the protected work under it.
func (l *Lock) Context(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	if l == nil {
		cancel(ErrNotHeld)
		return ctx, func() {}
	}
	l.mu.Lock()
	if l.state != held {
		cancel(l.cause)
	} else {
		l.cancels = append(l.cancels, cancel)
	}
	l.mu.Unlock()
	return ctx, func() { cancel(context.Canceled) }
}

func (l *Lock) isHeld() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state == held
}

// confirmLocked records that the server granted the lease at or after start.
// The server's expiry therefore falls at or after start+ttl; the local
// deadline keeps a drift margin before it.
func (l *Lock) confirmLocked(start time.Time) {
	l.valid = start.Add(l.ttl - drift(l.ttl))
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

func (l *Lock) endLocked(state lockState, cause error) {
	if l.state != held {
		if state == released {
			l.state = released // a lost lock that is released stays ended
		}
		return
	}
	l.state, l.cause = state, cause
	if state == lost {
		close(l.lost)
	}
	for _, cancel := range l.cancels {
		cancel(cause)
	}
	l.cancels = nil
}

var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()
