package distlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
)

// MultiLock holds several locks at once: all of them or none.
//
// LockAll takes the locks one at a time in the order of their names, so
// two callers that ask for overlapping sets in any order never deadlock:
// both wait for the first name they share. A name can be on any node of a
// Cluster, or on a quorum: each lock is an ordinary one. (One script over
// all the keys would need them in one Cluster slot; ordered acquisition
// does not.) If one lock cannot be had, those already taken are released.
type MultiLock struct {
	locks []*Lock

	mu   sync.Mutex
	err  error
	lost chan struct{}
	ctxs contexts // those of Context
}

// LockAll takes the locks keys, waiting for each until ctx ends. Options
// apply to each lock. On failure no lock is held; the error is that of the
// lock that failed (as for Client.Lock), ErrNotObtained wrapping the cause
// when a lock taken early was lost while a later one was waited for, and
// ErrInvalidKey for an empty set or a name given twice.
func (c *Client) LockAll(ctx context.Context, keys []string, opts ...Option) (*MultiLock, error) {
	return c.lockAll(ctx, keys, opts, c.Lock)
}

// TryLockAll takes the locks keys if every one is free now; otherwise it
// releases what it took and returns ErrNotObtained.
func (c *Client) TryLockAll(ctx context.Context, keys []string, opts ...Option) (*MultiLock, error) {
	return c.lockAll(ctx, keys, opts, c.TryLock)
}

type lockFunc func(context.Context, string, ...Option) (*Lock, error)

func (c *Client) lockAll(ctx context.Context, keys []string, opts []Option, take lockFunc) (*MultiLock, error) {
	if ctx == nil {
		return nil, ErrNilContext
	}
	sorted := slices.Clone(keys)
	slices.Sort(sorted)
	if len(sorted) == 0 {
		return nil, fmt.Errorf("%w: no keys", ErrInvalidKey)
	}
	for i := 1; i < len(sorted); i++ {
		if sorted[i] == sorted[i-1] {
			return nil, fmt.Errorf("%w: %q given twice", ErrInvalidKey, sorted[i])
		}
	}
	// A bad name is refused before any lock is taken, wherever it sorts.
	if err := c.usable(); err != nil {
		return nil, err
	}
	for _, key := range sorted {
		if err := c.checkName(mutexKind, key); err != nil {
			return nil, err
		}
	}
	m := &MultiLock{lost: make(chan struct{})}
	for _, key := range sorted {
		l, err := take(ctx, key, opts...)
		if err != nil {
			m.giveBack(ctx)
			return nil, err
		}
		m.locks = append(m.locks, l)
	}
	// A lock taken early may have been lost while a later one was waited
	// for: then the set was never held whole.
	for _, l := range m.locks {
		if cause := l.Err(); cause != nil {
			m.giveBack(ctx)
			return nil, fmt.Errorf("%w: %q was lost while the others were taken: %w", ErrNotObtained, l.key, cause)
		}
	}
	m.watch()
	return m, nil
}

// watch closes m.lost when any lock is lost. It starts no goroutine:
// context.AfterFunc runs the callback when a lock's context ends.
func (m *MultiLock) watch() {
	for _, l := range m.locks {
		ctx, _ := l.Context(context.Background()) // ends with l
		context.AfterFunc(ctx, func() {
			if cause := context.Cause(ctx); errors.Is(cause, ErrLost) {
				m.lose(l.key, cause)
			}
		})
	}
}

func (m *MultiLock) lose(key string, cause error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err == nil {
		m.err = fmt.Errorf("%q: %w", key, cause)
		m.ctxs.cancelAll(cause) // before lost closes (see contexts)
		close(m.lost)
	}
}

// giveBack releases the locks taken so far under the caller's ctx, which
// has often ended (the next lock was not had by its deadline): Release ends
// each hold at once and, when ctx has ended, deletes it in the background,
// bounded by cleanupTimeout. A context without ctx's deadline would make
// LockAll wait for each delete, up to 2 s apiece past the caller's
// deadline when Redis hangs.
func (m *MultiLock) giveBack(ctx context.Context) {
	for _, l := range m.locks {
		_ = l.Release(ctx)
	}
}

// Release releases every lock. It returns nil if all were released, else
// the errors of those that were not (joined; ErrNotHeld for a lock already
// lost). Like Lock.Release it ends every hold at once and, with Redis
// hanging, returns by ctx's deadline, or after 2 s if it has none (for all
// the locks together; the deletes go on in the background). A nil ctx
// releases them as Lock.Release does, and adds ErrNilContext.
func (m *MultiLock) Release(ctx context.Context) error {
	if ctx == nil {
		return errors.Join(ErrNilContext, m.Release(context.Background()))
	}
	if m == nil {
		return ErrNotHeld
	}
	if _, ok := ctx.Deadline(); !ok {
		// One bound for the call: each Lock.Release without a deadline
		// would take its own 2 s, one lock after another.
		var cancel context.CancelFunc
		ctx, cancel = withBound(ctx)
		defer cancel()
	}
	if len(m.locks) == 0 {
		return ErrNotHeld
	}
	// The locks are released side by side: one after another, a Redis that
	// hangs would keep the later ones held, and renewed, until the earlier
	// deletes gave up; and the call would cost a round trip per lock.
	errs := make([]error, len(m.locks))
	var wg sync.WaitGroup
	for i, l := range m.locks[1:] {
		wg.Go(func() { errs[i+1] = m.release(ctx, l) })
	}
	errs[0] = m.release(ctx, m.locks[0])
	wg.Wait()
	return errors.Join(errs...)
}

// release releases one of the locks. A loss that the release finds (the
// lease had run out, or another owner had it) is the set's loss too: watch
// hears only of losses seen before, as Release cancels l's context first.
func (m *MultiLock) release(ctx context.Context, l *Lock) error {
	err := l.Release(ctx)
	if cause := l.Err(); errors.Is(cause, ErrLost) {
		m.lose(l.key, cause)
	}
	if err != nil {
		return fmt.Errorf("%q: %w", l.key, err)
	}
	return nil
}

// none reports a nil or zero MultiLock, which holds nothing.
func (m *MultiLock) none() bool { return m == nil || m.lost == nil }

// Lost returns a channel that is closed when any of the locks is lost.
func (m *MultiLock) Lost() <-chan struct{} {
	if m.none() {
		return closedChan
	}
	m.noticeLoss()
	return m.lost
}

// noticeLoss makes a member's loss that is known already (its Err says
// so) the set's at once, not when watch's callback gets to run.
func (m *MultiLock) noticeLoss() {
	for _, l := range m.locks {
		if cause := l.Err(); errors.Is(cause, ErrLost) {
			m.lose(l.key, cause)
			return
		}
	}
}

// Err returns nil while every lock is held, after a loss the first
// loss's cause (matching ErrLost, naming the lock), ErrReleased once a lock
// was released, and ErrNotHeld for a zero MultiLock.
func (m *MultiLock) Err() error {
	if m.none() {
		return ErrNotHeld
	}
	m.noticeLoss()
	m.mu.Lock()
	err := m.err
	m.mu.Unlock()
	if err != nil {
		return err
	}
	for _, l := range m.locks {
		if cause := l.Err(); errors.Is(cause, ErrReleased) {
			return cause
		}
	}
	return nil
}

// Context returns a context derived from parent that is cancelled when any
// lock is lost or released; context.Cause tells why. A nil parent gives a
// context already cancelled with cause ErrNilContext.
func (m *MultiLock) Context(parent context.Context) (context.Context, context.CancelFunc) {
	if parent == nil {
		return doneContext(ErrNilContext)
	}
	ctx, cancel := context.WithCancelCause(parent)
	if m.none() {
		cancel(ErrNotHeld)
		return ctx, func() {}
	}
	// (Once the set is lost, a lost lock's context below cancels ctx
	// before this returns.)
	m.mu.Lock()
	if m.err == nil {
		m.ctxs.add(&m.mu, ctx, cancel)
	}
	m.mu.Unlock()
	var stops []func()
	for _, l := range m.locks {
		lctx, stop := l.Context(ctx)
		stops = append(stops, stop)
		if lctx.Err() != nil {
			// Lost or released already: AfterFunc would cancel ctx only
			// later, in a goroutine, after work may have started under it.
			cancel(context.Cause(lctx))
		}
		context.AfterFunc(lctx, func() { cancel(context.Cause(lctx)) })
	}
	return ctx, func() {
		cancel(context.Canceled)
		for _, stop := range stops {
			stop()
		}
	}
}

// Locks returns the locks, in the order of their names (the order they
// were taken in).
func (m *MultiLock) Locks() []*Lock {
	if m == nil {
		return nil
	}
	return slices.Clone(m.locks)
}
