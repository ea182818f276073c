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
