package distlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Election elects one leader among candidates, like etcd's concurrency
// Election: Campaign blocks until the caller leads (or ctx ends), Leader
// says who leads now, and Observe streams every change. A leadership is a
// lease that the Client renews; losing it cancels the leader's context
// (Leadership.Context) before the lease runs out in Redis, so before any
// other candidate can win. Each leadership has a term, its fence, greater
// than every earlier term.
type Election struct {
	c     *Client
	name  string
	names keyNames
}

// Leader is an election's leader as Redis holds it; Fence 0 means none.
type Leader struct {
	Value string        // what the leader campaigned or proclaimed with
	Fence int64         // the term: greater for every new leadership
	Since time.Time     // when this leadership began (the granting client's clock)
	TTL   time.Duration // lease left
}

// Elected reports whether there is a leader.
func (l Leader) Elected() bool { return l.Fence != 0 }

// Leadership is a won election: a *Lock whose Context says when the
// leadership ends (lost, or given up by Resign) and whose Lost when it is
// lost. Fence is its term.
type Leadership struct {
	*Lock
	e *Election
}

// The methods of *Lock again, so that a nil *Leadership (the result of a
// failed Campaign) answers as a nil *Lock does, ErrNotHeld, where the
// promoted methods would dereference it and panic.

func (l *Leadership) lock() *Lock {
	if l == nil {
		return nil
	}
	return l.Lock
}

// Key is Lock.Key.
func (l *Leadership) Key() string { return l.lock().Key() }

// Token is Lock.Token.
func (l *Leadership) Token() string { return l.lock().Token() }

// Fence is Lock.Fence: the term.
func (l *Leadership) Fence() int64 { return l.lock().Fence() }

// Release is Lock.Release; Resign says it better.
func (l *Leadership) Release(ctx context.Context) error { return l.lock().Release(ctx) }

// Extend is Lock.Extend.
func (l *Leadership) Extend(ctx context.Context, ttl time.Duration) error {
	return l.lock().Extend(ctx, ttl)
}

// TTL is Lock.TTL.
func (l *Leadership) TTL(ctx context.Context) (time.Duration, error) { return l.lock().TTL(ctx) }

// Lost is Lock.Lost: closed when the leadership is lost; not by Resign
// (Context is cancelled by both).
func (l *Leadership) Lost() <-chan struct{} { return l.lock().Lost() }

// Err is Lock.Err.
func (l *Leadership) Err() error { return l.lock().Err() }

// Context is Lock.Context: cancelled when the leadership ends.
func (l *Leadership) Context(parent context.Context) (context.Context, context.CancelFunc) {
	return l.lock().Context(parent)
}

// NewElection returns the election name. It returns ErrInvalidKey for a
// bad name, ErrInvalidOption on a quorum Client, and ErrClosed or
// ErrNilClient.
func (c *Client) NewElection(name string) (*Election, error) {
	if err := c.checkPrimitive(leaderKind, name); err != nil {
		return nil, err
	}
	return &Election{c: c, name: name, names: c.names(leaderKind, name)}, nil
}

// Campaign waits until the caller leads with value (at most 4096 bytes), or
// ctx ends. Candidates are served in arrival order when the leader resigns.
// Options are those of Client.Lock (WithTTL, WithoutRenewal, WithFair);
// WithMetadata is replaced by value, and WithOwner is refused with
// ErrInvalidOption (reentrancy would let two campaigns lead at once).
// Errors are as for Client.Lock.
func (e *Election) Campaign(ctx context.Context, value string, opts ...Option) (*Leadership, error) {
	if ctx == nil {
		return nil, ErrNilContext
	}
	if e == nil {
		return nil, ErrNilClient
	}
	// Clipped: an append into spare capacity of the caller's slice would
	// write to its backing array, a data race when campaigns share it.
	r, err := e.c.request(leaderKind, e.name, append(slices.Clip(opts), WithMetadata(value)), true)
	if err != nil {
		return nil, e.c.refused(ctx, e.name, err)
	}
	l, err := e.c.acquire(ctx, r)
	if err != nil {
		return nil, err
	}
	return &Leadership{Lock: l, e: e}, nil
}

// Proclaim changes the value the leader leads with; observers see it. It
// returns ErrNotHeld when the caller no longer leads, which ends the
// leadership (Lost closes, cause ErrTaken or ErrExpired), ErrNilContext for
// a nil ctx. Under WithReplicaAck it waits for the replicas as an acquire
// does, and returns ErrNotReplicated when too few acknowledged in time: the
// master has the value (observers may have seen it), a promoted replica may
// lead with the old one; the leadership goes on.
func (l *Leadership) Proclaim(ctx context.Context, value string) error {
	if ctx == nil {
		return ErrNilContext
	}
	if l == nil || l.Lock.none() {
		return ErrNotHeld
	}
	if len(value) > maxMetadataLen {
		return fmt.Errorf("%w: value longer than %d bytes", ErrInvalidOption, maxMetadataLen)
	}
	if !l.isHeld() {
		return ErrNotHeld
	}
	c := l.client
	s, _ := c.b.(*single) // (a quorum Client has no elections)
	var ack replicaAck
	if s != nil {
		ack = s.ack
	}
	res, err := detachedFunc(c, ctx, func(ctx context.Context) (proclaimed, error) {
		cmd, acked := ack.run(ctx, c.b.admin(), proclaimScript, proclaimScript.evalsha(l.names.keys[:1], l.token, "0:"+value, c.b.publish()))
		v, err := cmd.Int64()
		if s != nil {
			s.reloadMap(err) // the slot may have failed over
		}
		return proclaimed{v, acked}, err
	})
	ok := res.v
	switch {
	case err != nil:
		return fmt.Errorf("distlock: proclaim %q: %w", l.key, err)
	case ok == 1 && !res.acked:
		return fmt.Errorf("distlock: proclaim %q: %w", l.key, ErrNotReplicated)
	case ok != 1:
		// Redis no longer has the leadership: it is known lost now, and
		// Lost and Context must say so at once, not at the next renewal
		// (another candidate may lead already).
		l.end(lost, lossCause(extendOutcomeOf(ok)))
		return ErrNotHeld
	}
	return nil
}

// proclaimed is proclaim.lua's reply, and whether enough replicas
// acknowledged it (WithReplicaAck).
type proclaimed struct {
	v     int64
	acked bool
}

// extendOutcomeOf reads proclaim.lua's "not held" replies as an extend's.
func extendOutcomeOf(v int64) extendOutcome {
	if v < 0 {
		return extendTaken
	}
	return extendGone
}

// Resign gives up the leadership (a Release): the next candidate in line,
// if any, leads at once. Errors are as for Lock.Release.
func (l *Leadership) Resign(ctx context.Context) error {
	if ctx == nil {
		return errors.Join(ErrNilContext, l.Resign(context.Background()))
	}
	if l == nil || l.Lock == nil {
		return ErrNotHeld
	}
	return l.Release(ctx)
}

// Leader returns who leads now, or ErrNoLeader. Errors otherwise are
// ErrNilContext (a nil ctx), ErrClosed or ErrNilClient, or wrap the Redis
// error.
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	if ctx == nil {
		return Leader{}, ErrNilContext
	}
	if e == nil {
		return Leader{}, ErrNilClient
	}
	if err := e.c.usable(); err != nil {
		return Leader{}, err
	}
	info, err := e.c.inspect(ctx, e.name, e.names, leaderKind)
	if err != nil {
		return Leader{}, err
	}
	if !info.Held() {
		return Leader{}, ErrNoLeader
	}
	return Leader{Value: info.Meta, Fence: info.Fence, Since: info.Since, TTL: info.TTL}, nil
}

// Observe returns a channel that receives the leader now, then every
// change of leader or of its value, in order, until ctx ends (the channel
// is then closed). A Leader with Fence 0 says that nobody leads. Changes
// are announced by the scripts that make them, over the Client's pub/sub
// subscription; a leader whose lease ran out is noticed when the lease
// ends. Changes closer together than a round trip to Redis may arrive as
// the last of them. Errors reading Redis are retried. The channel is
// closed at once after Close, for a nil ctx (see ErrNilContext) and for a
// nil or zero Election (see ErrNilClient): its goroutine could only fail
// later, out of the caller's reach.
func (e *Election) Observe(ctx context.Context) <-chan Leader {
	out := make(chan Leader)
	var n *notifier
	if ctx != nil && e != nil && e.c.usable() == nil {
		n = e.c.ensureNotifier()
	}
	if n == nil {
		close(out)
		return out
	}
	w := n.join(e.names.channel(), hold{token: "observe:" + newToken()})
	e.c.bg.add()
	go func() {
		defer e.c.bg.done()
		defer close(out)
		defer n.leave(w)
		e.observe(ctx, n, w, out)
	}()
	return out
}

func (e *Election) observe(ctx context.Context, n *notifier, w *waiter, out chan<- Leader) {
	// Reads end at Close too, and each within a bound: a read stuck on a
	// hung Redis would otherwise keep the channel open past Close.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(e.c.closedCtx, cancel)()
	if !n.isLive(w) {
		if _, err := e.c.park(ctx, w, liveWait); err != nil {
			return
		}
	}
	var last Leader
	sent, backoff := false, 10*time.Millisecond
	for {
		asked := time.Now()
		rctx, stop := context.WithTimeout(ctx, cleanupTimeout)
		// not inline: a cancel does not cut short an inline call
		now, err := detachedOn(e.c, false, rctx, e, func(ctx context.Context, e *Election) (Leader, error) { return e.Leader(ctx) }, nil)
		stop()
		wait := time.Duration(-1) // no timer: changes are announced
		switch {
		case err == nil || errors.Is(err, ErrNoLeader):
			backoff = 10 * time.Millisecond
			if !sent || now.Fence != last.Fence || now.Value != last.Value {
				select {
				case out <- now:
				case <-ctx.Done():
					return
				case <-e.c.closedCtx.Done():
					return
				}
				last, sent = now, true
			}
			if now.Elected() {
				// a lease that runs out is not announced; counted from
				// the read, not from a send the reader held up
				wait = max(time.Until(asked.Add(now.TTL)), 0) + time.Millisecond
			}
		case ctx.Err() != nil:
			return
		default:
			wait, backoff = backoff, min(2*backoff, time.Second)
		}
		if _, err := e.c.park(ctx, w, wait); err != nil {
			return
		}
	}
}

// Name returns the election's name.
func (e *Election) Name() string {
	if e == nil {
		return ""
	}
	return e.name
}
