package distlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

const (
	// lineEntryTTL is how long a waiter's place in the Redis line lives on
	// the server without a refresh: a waiter that dies is skipped after it.
	// It is also the first lease of a handed-off grant, so a grantee that
	// died while waiting blocks the lock for at most this long.
	lineEntryTTL = 2 * time.Second
	// lineRefresh is the longest a waiter in line waits without refreshing its
	// entry; well under lineEntryTTL.
	lineRefresh = lineEntryTTL / 4
)

// lockLine is how a quorum Client waits (the Redis-side line cannot span
// independent nodes): waiters for key in this process form a local line and
// only its head asks the nodes; it retries when a release is announced (by
// any node, or directly by a Release in this process), when the holder's
// lease runs out, and on the retry strategy's backoff, so a lost message
// never hangs it.
func (c *Client) lockLine(ctx context.Context, key string, cfg lockConfig, token string) (*Lock, error) {
	names := c.names(key)
	n := c.notify()
	if !n.waiting(names.channel) { // fast path: no local line to respect
		l, _, err := c.attempt(ctx, key, cfg, token)
		if !errors.Is(err, ErrNotObtained) || ctx.Err() != nil {
			return l, err
		}
	}
	w := n.join(names.channel, token, false)
	acquired, last := false, error(nil)
	defer func() { n.leave(w, acquired) }()
	for try := 1; ; {
		// Not head: wait for our turn, but look again now and then, in case
		// the turn came without a notice (a local holder's lease ran out).
		wait := lineRefresh
		if n.isHead(w) {
			began := time.Now()
			l, holderTTL, err := c.attempt(ctx, key, cfg, token)
			if !errors.Is(err, ErrNotObtained) {
				acquired = err == nil
				return l, err
			}
			last = err
			if wait = nextWait(cfg.retry, try, holderTTL); wait < 0 {
				return nil, fmt.Errorf("%w: %q still held after %d attempts", ErrNotObtained, key, try)
			}
			try++
			if splitVote(err) {
				// Contenders that split the nodes between them must not
				// retry together, or they split again (Redlock's advice):
				// a random delay of a few attempt durations separates them.
				if err := sleepCtx(ctx, rand.N(3*time.Since(began)+time.Millisecond)); err != nil {
					return nil, gaveUp(key, err, last)
				}
				continue
			}
		}
		if _, err := c.park(ctx, w, wait); err != nil {
			return nil, gaveUp(key, err, last)
		}
	}
}

// lockQueued joins the line in Redis and waits for the lock to be handed
// over. It asks Redis again only to keep its place (every lineRefresh), when
// its subscription is confirmed (a handoff may have been published before),
// and when the holder's lease runs out; the retry strategy decides only when
// to give up.
func (c *Client) lockQueued(ctx context.Context, key string, cfg lockConfig, token string) (*Lock, error) {
	names := c.names(key)
	n := c.notify()
	w := n.join(names.inbox, token, true)
	defer n.leave(w, true)
	for try := 1; ; try++ {
		l, holderTTL, err := c.attemptFair(ctx, key, cfg, token)
		if !errors.Is(err, ErrNotObtained) {
			return l, err
		}
		if cfg.retry.Backoff(try) < 0 {
			return nil, c.leaveLine(ctx, key, token, fmt.Errorf("%w: %q still held after %d attempts", ErrNotObtained, key, try))
		}
		wait := lineRefresh
		if holderTTL >= 0 {
			wait = min(wait, holderTTL)
		}
		fence, err := c.park(ctx, w, wait)
		if err != nil {
			return nil, c.leaveLine(ctx, key, token, notObtained(key, err))
		}
		if fence > 0 {
			return c.handedOver(ctx, key, names, token, fence, cfg)
		}
	}
}

// splitVote reports a quorum attempt that some nodes granted but too few.
func splitVote(err error) bool {
	var qe *QuorumError
	if !errors.As(err, &qe) {
		return false
	}
	return slices.Contains(qe.Nodes, nil)
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

// park blocks until w is woken, wait passes (negative: no timer), ctx ends
// or the Client closes. It returns the fence when the lock was handed to w.
func (c *Client) park(ctx context.Context, w *waiter, wait time.Duration) (int64, error) {
	select {
	case fence := <-w.grant:
		return fence, nil
	default:
	}
	var timeout <-chan time.Time
	if wait >= 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case fence := <-w.grant:
		return fence, nil
	case <-w.wake:
	case <-timeout:
	case <-c.closing:
		return 0, ErrClosed
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	return 0, nil
}

// nextWait is the retry strategy's backoff, but never past the holder's
// remaining lease, so the lock of a crashed holder is taken at its expiry.
func nextWait(s RetryStrategy, try int, holderTTL time.Duration) time.Duration {
	wait := s.Backoff(try)
	if wait >= 0 && holderTTL >= 0 && wait > holderTTL {
		wait = holderTTL
	}
	return wait
}

// leaveLine takes a giving-up fair waiter out of the line in Redis (passing
// on a grant it was handed meanwhile) and returns cause. If Redis cannot be
// reached the entry expires on its own after lineEntryTTL.
func (c *Client) leaveLine(ctx context.Context, key, token string, cause error) error {
	names := c.names(key)
	cleanup, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	_ = leaveScript.Run(cleanup, c.rdb, names.all(), token, names.notice, lineEntryTTL.Milliseconds()).Err()
	return cause
}

// handedOver builds the Lock for a grant that a release handed to token.
// The grant's first lease is short (at most lineEntryTTL) and was set before
// the notice reached us: the Lock treats it as valid for half of it, and the
// renewer extends it to the TTL at once. A fixed-lease lock is extended here.
func (c *Client) handedOver(ctx context.Context, key string, names keyNames, token string, fence int64, cfg lockConfig) (*Lock, error) {
	owner, _ := cfg.ownerArgs(token)
	claim := min(cfg.ttl, lineEntryTTL)
	l := newLock(c, key, names, token, owner, fence, cfg)
	// Valid for only half the short first lease; renewal raises it to ttl
	// well before that runs out, and a shorter hold never needs the call.
	start, validFor := time.Now(), claim/2
	l.valid, l.renewAt = start.Add(validFor), start.Add(validFor/2)
	c.track(l)
	if cfg.noRenew && cfg.ttl > claim {
		if err := l.Extend(ctx, cfg.ttl); err != nil {
			return nil, fmt.Errorf("distlock: acquire %q: extend handed-over lease: %w", key, err)
		}
	}
	return l, nil
}
