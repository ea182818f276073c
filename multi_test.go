package distlock_test

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// NewMutex promises to validate the options "now so that Lock cannot fail
// on bad input later (... ErrInvalidOption ...)", and Lock to panic only on
// a closed Client. A quorum Client refuses WithFair only when a Lock call
// runs, so NewMutex accepts it and every Mutex.Lock then loops forever on
// ErrInvalidOption with backoff.
func TestQuorumMutexRefusesWithFairUpFront(t *testing.T) {
	srvs := redistest.StartN(t, 3)
	var nodes []redis.UniversalClient
	for _, s := range srvs {
		nodes = append(nodes, s.Client(t))
	}
	c := distlock.NewQuorum(nodes)
	defer c.Close()
	if _, err := c.Lock(ctxT(t, 5*time.Second), "m", distlock.WithFair()); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Fatalf("quorum Lock WithFair: %v, want ErrInvalidOption", err)
	}
	m, err := c.NewMutex("m", distlock.WithFair())
	if errors.Is(err, distlock.ErrInvalidOption) {
		return // refused up front, as promised
	}
	if err != nil {
		t.Fatalf("NewMutex: %v, want ErrInvalidOption", err)
	}
	done := make(chan any, 1)
	go func() {
		defer func() { done <- recover() }()
		m.Lock()
		m.Unlock()
	}()
	select {
	case p := <-done:
		t.Fatalf("NewMutex(WithFair) on a quorum Client accepted; Lock ended with %v", p)
	case <-time.After(3 * time.Second):
		t.Errorf("NewMutex(\"m\", WithFair()) on a quorum Client returned nil error, and Mutex.Lock has not returned after 3s although the lock is free (it retries ErrInvalidOption forever)")
	}
	c.Close() // makes the stuck Lock panic (recovered above) so that it ends
	select {
	case <-done:
	case <-time.After(5 * time.Second):
	}
}

// MultiLock.Release: "Like Lock.Release it ends every hold at once". With
// Redis frozen and a deadline on ctx, the release of the first lock waits
// for Redis while the others are still held and renewed.
func TestMultiReleaseEndsEveryHoldAtOnce(t *testing.T) {
	for _, timeouts := range []bool{false, true} {
		t.Run(map[bool]string{false: "ContextTimeoutEnabled=false", true: "ContextTimeoutEnabled=true"}[timeouts], func(t *testing.T) {
			srv, c := frozenLater(t, timeouts)
			m, err := c.TryLockAll(ctxT(t, 5*time.Second), []string{"m1", "m2", "m3"})
			if err != nil {
				t.Fatal(err)
			}
			srv.Signal(syscall.SIGSTOP)
			rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- m.Release(rctx) }()
			// Each hold ends at once; one after another, the later ones
			// stayed held until the earlier deletes gave up, 5 s later.
			held := func() (keys []string) {
				for _, l := range m.Locks() {
					if l.Err() == nil {
						keys = append(keys, l.Key())
					}
				}
				return keys
			}
			for end := time.Now().Add(time.Second); len(held()) > 0 && time.Now().Before(end); {
				time.Sleep(2 * time.Millisecond) // polling the Locks' state
			}
			if keys := held(); len(keys) > 0 {
				t.Errorf("1s into MultiLock.Release (Redis frozen, 5s deadline): %q still held: Release did not end every hold at once", keys)
			}
			srv.Signal(syscall.SIGCONT)
			<-done
		})
	}
}

// MultiLock.Context: "a context derived from parent that is cancelled
// when any lock is lost or released". Asked for after the set was lost
// (Lost closed, Err set), it returns a context that is not done: the
// members' contexts are wired to it by context.AfterFunc, whose callbacks
// run later in goroutines of their own. Lock.Context cancels at once a
// context asked for after the loss, "so that no work starts under it".
func TestMultiContextAskedAfterLossIsDone(t *testing.T) {
	c, rdb, _ := setup(t)
	ctx := ctxT(t, 30*time.Second)
	live := 0
	var lossErr error
	const rounds = 20
	for i := range rounds {
		m, err := c.LockAll(ctx, []string{"a", "b"})
		if err != nil {
			t.Fatal(err)
		}
		rdb.Del(ctx, "distlock:{b}")
		if err := m.Locks()[1].Extend(ctx, 10*time.Second); !errors.Is(err, distlock.ErrNotHeld) { // finds the loss now
			t.Fatalf("round %d: Extend of a deleted member: %v", i, err)
		}
		select {
		case <-m.Lost():
		case <-time.After(5 * time.Second):
			t.Fatal("the loss of b was not signalled")
		}
		if lossErr = m.Err(); lossErr == nil {
			t.Fatal("Lost closed but Err nil")
		}
		work, stop := m.Context(ctx)
		if work.Err() == nil {
			live++
		}
		stop()
		m.Release(ctx)
	}
	if live > 0 {
		t.Errorf("MultiLock.Context asked for after the set was lost (Lost closed, Err=%v): context not done on return in %d of %d rounds", lossErr, live, rounds)
	}
}

// MultiLock.Lost: "closed when any of the locks is lost". A member whose
// lease was gone from Redis when the set was released counts as lost for
// its Lock ("the reason (matching ErrLost) after it was lost, also when the
// loss was found by Release", and its Lost closes), but the MultiLock never
// hears of it: watch's context was already cancelled with ErrReleased.
func TestMultiLossFoundByReleaseIsSignalled(t *testing.T) {
	c, rdb, _ := setup(t)
	ctx := ctxT(t, 10*time.Second)
	m, err := c.LockAll(ctx, []string{"a", "b"})
	if err != nil {
		t.Fatal(err)
	}
	rdb.Del(ctx, "distlock:{b}") // b's lease is gone (expired, force-released) before the next renewal
	err = m.Release(ctx)
	if !errors.Is(err, distlock.ErrNotHeld) {
		t.Fatalf("Release: %v, want ErrNotHeld for b", err)
	}
	b := m.Locks()[1]
	select {
	case <-b.Lost():
	default:
		t.Fatalf("member b: Lost not closed after Release found it gone (Err %v)", b.Err())
	}
	if !errors.Is(b.Err(), distlock.ErrLost) {
		t.Fatalf("member b: Err %v", b.Err())
	}
	select {
	case <-m.Lost():
	default:
		t.Errorf("member b is lost (b.Lost() closed, b.Err()=%q) but MultiLock.Lost() is not closed and MultiLock.Err()=%v", b.Err(), m.Err())
	}
}
