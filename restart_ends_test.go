package distlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock"
)

// Redis forgets a leader's lock (its renewal is 10 s away) and another
// candidate takes the lead. The old leader's Proclaim finds the leadership
// gone (ErrNotHeld), and that is a loss known now: Lost() is closed and its
// contexts cancelled by the time Proclaim returns, not at the next
// renewal, while two leaders ran. FLUSHALL stands for what forgets it (a
// restart without persistence, an eviction, an operator): a restart would
// also break the Client's subscription, whose reconnect renews the lock
// (TestHolderToldWhenSubscriptionReconnects) and could tell the leader
// first, so that Proclaim's own path went untested.
func TestProclaimThatFindsTheLeadershipGoneEndsIt(t *testing.T) {
	const ttl = 30 * time.Second
	c, rdb, srv := setup(t)
	ctx := ctxT(t, 30*time.Second)
	e, err := c.NewElection("proclaim")
	must(t, err)
	lead, err := e.Campaign(ctx, "a", distlock.WithTTL(ttl))
	must(t, err)
	work, stop := lead.Context(ctx)
	defer stop()
	must(t, rdb.FlushAll(ctx).Err())
	other := distlock.New(srv.Client(t))
	defer other.Close()
	oe, err := other.NewElection("proclaim")
	must(t, err)
	b, err := oe.Campaign(ctx, "b", distlock.WithTTL(ttl))
	must(t, err)
	defer b.Resign(ctx)
	if err := lead.Proclaim(ctx, "a2"); !errors.Is(err, distlock.ErrNotHeld) {
		t.Fatalf("Proclaim: %v, want ErrNotHeld", err)
	}
	select {
	case <-lead.Lost():
	default:
		t.Fatalf("Proclaim returned ErrNotHeld (b leads with term %d), but a's Lost() is open and its Context live (err %v, ctx %v): two leaders",
			b.Fence(), lead.Err(), work.Err())
	}
	if !errors.Is(lead.Err(), distlock.ErrTaken) || !errors.Is(context.Cause(work), distlock.ErrTaken) {
		t.Fatalf("Err %v, Context's cause %v: want ErrTaken (another leads)", lead.Err(), context.Cause(work))
	}
}

// The same for Lock.TTL of a mutex that Redis no longer has.
func TestTTLThatFindsTheLockGoneEndsIt(t *testing.T) {
	const ttl = 30 * time.Second
	c, rdb, _ := setup(t)
	ctx := ctxT(t, 30*time.Second)
	l, err := c.TryLock(ctx, "ttl", distlock.WithTTL(ttl))
	must(t, err)
	must(t, rdb.FlushAll(ctx).Err())
	if _, err := l.TTL(ctx); !errors.Is(err, distlock.ErrNotHeld) {
		t.Fatalf("TTL: %v, want ErrNotHeld", err)
	}
	select {
	case <-l.Lost():
	default:
		t.Fatalf("TTL returned ErrNotHeld, but Lost() is open (err %v)", l.Err())
	}
	if !errors.Is(l.Err(), distlock.ErrExpired) {
		t.Fatalf("Err %v, want ErrExpired", l.Err())
	}
}
