package distlock_test

import (
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redistest"
)

func TestReplicaAck(t *testing.T) {
	master := redistest.Start(t)
	replica := master.StartReplica(t)
	rdb := master.Client(t)
	c := distlock.New(rdb, distlock.WithReplicaAck(1, 200*time.Millisecond))
	defer c.Close()
	ctx := ctxT(t, 10*time.Second)

	l, err := c.TryLock(ctx, "acked")
	if err != nil {
		t.Fatalf("acquire with a live replica: %v", err)
	}
	if n, _ := replica.Client(t).Exists(ctx, "distlock:{acked}").Result(); n != 1 {
		t.Fatal("acknowledged lock is not on the replica")
	}
	l.Release(ctx)

	replica.Signal(syscall.SIGSTOP) // the replica stops acknowledging
	defer replica.Signal(syscall.SIGCONT)
	if _, err := c.TryLock(ctx, "stalled"); !errors.Is(err, distlock.ErrNotReplicated) {
		t.Fatalf("acquire with a stalled replica: %v, want ErrNotReplicated", err)
	}
	if n, _ := rdb.Exists(ctx, "distlock:{stalled}").Result(); n != 0 {
		t.Fatal("an unacknowledged acquire left the lock on the master")
	}
}

func TestReplicaAckRenewalLoss(t *testing.T) {
	master := redistest.Start(t)
	replica := master.StartReplica(t)
	c := distlock.New(master.Client(t), distlock.WithReplicaAck(1, 50*time.Millisecond))
	defer c.Close()
	ctx := ctxT(t, 10*time.Second)
	l, err := c.TryLock(ctx, "renewed", distlock.WithTTL(time.Second)) // Redis times WAIT out on its 100ms cron
	if err != nil {
		t.Fatal(err)
	}
	replica.Signal(syscall.SIGSTOP)
	defer replica.Signal(syscall.SIGCONT)
	select {
	case <-l.Lost():
	case <-ctx.Done():
		t.Fatal("renewal without acknowledgement did not signal loss")
	}
	if !errors.Is(l.Err(), distlock.ErrNotReplicated) || !errors.Is(l.Err(), distlock.ErrLost) {
		t.Fatalf("cause %v, want ErrLost and ErrNotReplicated", l.Err())
	}
}

func TestReplicaAckBadOptions(t *testing.T) {
	c, _, _ := setup(t, distlock.WithReplicaAck(-1, time.Second))
	if _, err := c.TryLock(ctxT(t, time.Second), "k"); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Fatalf("got %v", err)
	}
}

// A lock that a release hands to a waiter under WithReplicaAck is
// acknowledged by the replicas before Lock returns it, as an acquire is:
// with the replica stalled, the waiter gets ErrNotReplicated and the grant
// is given back. (The release wrote it without WAIT, and a promoted replica
// would not have it.)
func TestReplicaAckHandoff(t *testing.T) {
	master := redistest.Start(t)
	replica := master.StartReplica(t)
	rdb := master.Client(t)
	ack := distlock.WithReplicaAck(1, 200*time.Millisecond)
	a, b := distlock.New(rdb, ack), distlock.New(master.Client(t), ack)
	defer a.Close()
	defer b.Close()
	ctx := ctxT(t, 10*time.Second)
	for _, stalled := range []bool{false, true} {
		held, err := a.TryLock(ctx, "payment")
		if err != nil {
			t.Fatal(err)
		}
		got := acquireAsync(ctx, b, "payment")
		waitFor(t, 2*time.Second, "the waiter to line up", func() bool { return rdb.LLen(ctx, "distlock:{payment}:line").Val() == 1 })
		if stalled {
			replica.Signal(syscall.SIGSTOP) // the replica stops acknowledging
			defer replica.Signal(syscall.SIGCONT)
		}
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-got:
			switch {
			case !stalled && r.err != nil:
				t.Fatalf("handoff with a live replica: %v", r.err)
			case !stalled:
				if err := r.l.Release(ctx); err != nil {
					t.Fatal(err)
				}
			case r.err == nil:
				t.Fatalf("handoff with a stalled replica returned a lock (fence %d), want ErrNotReplicated", r.l.Fence())
			case !errors.Is(r.err, distlock.ErrNotReplicated):
				t.Fatalf("handoff with a stalled replica: %v, want ErrNotReplicated", r.err)
			}
		case <-ctx.Done():
			t.Fatal("the waiter's Lock did not return")
		}
	}
	waitFor(t, 3*time.Second, "the unacknowledged grant to be given back", func() bool {
		return rdb.Exists(ctx, "distlock:{payment}").Val() == 0
	})
}
