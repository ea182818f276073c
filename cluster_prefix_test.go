package distlock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redistest"
)

// On a Cluster a prefix ending with "fence:" names its lock "0" as the
// slot fence counter of the prefix without it ("X:fence:{0}"): New must
// refuse it as it refuses a prefix ending with a kind's part.
func TestClusterPrefixEndingWithFenceIsRefused(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	ctx := ctxT(t, 30*time.Second)
	a := distlock.New(cl.Client(t), distlock.WithKeyPrefix("X:"))
	t.Cleanup(func() { a.Close() })
	b := distlock.New(cl.Client(t), distlock.WithKeyPrefix("X:fence:"))
	t.Cleanup(func() { b.Close() })
	l, err := a.Lock(ctx, "0")
	if err != nil {
		t.Fatalf("prefix X: Lock: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	// Before New refused it, the free lock was "held by another owner".
	if _, err := b.TryLock(ctx, "0"); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Fatalf("prefix X:fence: TryLock: %v, want ErrInvalidOption", err)
	}
}
