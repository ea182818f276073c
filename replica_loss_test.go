package distlock_test

import (
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redistest"
)

// A lock lost to an unacknowledged Extend (WithReplicaAck) is no longer
// held: TTL says ErrNotHeld, as Extend does, though the master still has
// the grant. It returned the master's lease with a nil error.
func TestTTLOfALostLockIsNotHeld(t *testing.T) {
	master := redistest.Start(t)
	replica := master.StartReplica(t)
	c := distlock.New(master.Client(t), distlock.WithReplicaAck(1, 50*time.Millisecond))
	defer c.Close()
	ctx := ctxT(t, 20*time.Second)
	l, err := c.TryLock(ctx, "k", distlock.WithTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	replica.Signal(syscall.SIGSTOP)
	defer replica.Signal(syscall.SIGCONT)
	if err := l.Extend(ctx, time.Hour); !errors.Is(err, distlock.ErrNotReplicated) {
		t.Fatalf("Extend with a stalled replica: %v, want ErrNotReplicated", err)
	}
	waitLost(t, l, 5*time.Second)
	if d, err := l.TTL(ctx); !errors.Is(err, distlock.ErrNotHeld) {
		t.Fatalf("TTL of a lost lock: %v, %v, want ErrNotHeld", d, err)
	}
}

// A lock lost to an unacknowledged renewal or Extend (WithReplicaAck) is
// given back: the master had just reset its lease to the full TTL, for
// nobody, and the next owner waited that out (or Release, which a holder
// told of the loss may never call).
func TestUnacknowledgedRenewalGivesTheLeaseBack(t *testing.T) {
	master := redistest.Start(t)
	replica := master.StartReplica(t)
	rdb := master.Client(t)
	c := distlock.New(rdb, distlock.WithReplicaAck(1, 50*time.Millisecond))
	defer c.Close()
	ctx := ctxT(t, 60*time.Second)
	const ttl = 6 * time.Second
	extended, err := c.TryLock(ctx, "extended", distlock.WithTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	renewed, err := c.TryLock(ctx, "renewed", distlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	replica.Signal(syscall.SIGSTOP)
	defer replica.Signal(syscall.SIGCONT)
	if err := extended.Extend(ctx, time.Hour); !errors.Is(err, distlock.ErrNotReplicated) {
		t.Fatalf("Extend with a stalled replica: %v, want ErrNotReplicated", err)
	}
	waitLost(t, renewed, ttl)
	if !errors.Is(renewed.Err(), distlock.ErrNotReplicated) {
		t.Fatalf("renewed lock lost with %v, want ErrNotReplicated", renewed.Err())
	}
	for _, key := range []string{"extended", "renewed"} {
		waitFor(t, ttl/3, "the grant of "+key+" to be given back", func() bool {
			return rdb.Exists(ctx, "distlock:{"+key+"}").Val() == 0
		})
	}
}

// Under WithReplicaAck Proclaim waits for the replicas as an acquire and a
// renewal do: a value too few of them acknowledged is reported
// (ErrNotReplicated), since a promoted replica would lead with the old one.
// Proclaim returned nil for it.
func TestProclaimWaitsForReplicaAck(t *testing.T) {
	master := redistest.Start(t)
	replica := master.StartReplica(t)
	c := distlock.New(master.Client(t), distlock.WithReplicaAck(1, 50*time.Millisecond))
	defer c.Close()
	ctx := ctxT(t, 20*time.Second)
	e, err := c.NewElection("e")
	if err != nil {
		t.Fatal(err)
	}
	lead, err := e.Campaign(ctx, "a", distlock.WithTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if err := lead.Proclaim(ctx, "b"); err != nil {
		t.Fatalf("Proclaim with a live replica: %v", err)
	}
	replica.Signal(syscall.SIGSTOP)
	defer replica.Signal(syscall.SIGCONT)
	if err := lead.Proclaim(ctx, "c"); !errors.Is(err, distlock.ErrNotReplicated) {
		t.Fatalf("Proclaim with a stalled replica: %v, want ErrNotReplicated", err)
	}
}
