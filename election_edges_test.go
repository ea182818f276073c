package distlock_test

// Edges of elections found in review: Observe at Close and after a slow
// read, Proclaim after the leadership ended.

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
)

// goroutineStacks returns the stacks of every goroutine, one per element.
func goroutineStacks() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Split(string(buf[:n]), "\n\n")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// observersSending counts the goroutines of Election.observe that are
// blocked handing a Leader to the caller (the select around `out <- now`,
// observe's only own select), as opposed to parked waiting for a change
// (in Client.park). The runtime's own frames are not shown: a goroutine
// blocked in observe's own select has observe as its top frame.
func observersSending() int {
	count := 0
	for _, g := range goroutineStacks() {
		lines := strings.Split(strings.TrimSpace(g), "\n")
		if len(lines) > 1 && strings.HasSuffix(lines[0], "[select]:") &&
			strings.HasPrefix(lines[1], "github.com/distlock/distlock.(*Election).observe(") {
			count++
		}
	}
	return count
}

// observersRunning counts the goroutines running Election.observe.
func observersRunning() int {
	count := 0
	for _, g := range goroutineStacks() {
		if strings.Contains(g, "github.com/distlock/distlock.(*Election).observe(") {
			count++
		}
	}
	return count
}

// Client.Close while an observer holds a change its reader has not taken
// yet: Observe's goroutine parks on the Client's closing (Client.park
// returns ErrClosed), but its send to the channel waits only for ctx. So
// Close waits for it until its own bound (2×cleanupTimeout = 4 s), and the
// goroutine, counted in the Client's background jobs, outlives Close until
// the caller's ctx ends (never, for context.Background()): the channel is
// never closed.
func TestObserveEndsAtClose(t *testing.T) {
	c, _, srv := setup(t)
	ctx := ctxT(t, 30*time.Second)
	e, err := c.NewElection("observe-close")
	must(t, err)
	// (observers of earlier tests may still be ending)
	sending0, observers0 := observersSending(), observersRunning()
	seen := e.Observe(ctx)
	if l := nextLeader(t, seen, 5*time.Second); l.Elected() {
		t.Fatalf("first report %+v, want no leader", l)
	}
	other := distlock.New(srv.Client(t))
	t.Cleanup(func() { other.Close() })
	oe, _ := other.NewElection("observe-close")
	lead, err := oe.Campaign(ctx, "a")
	must(t, err)
	defer lead.Resign(context.Background())
	// The reader does not read now: the observer holds "a" undelivered.
	waitFor(t, 5*time.Second, "the observer to hold the new leader", func() bool {
		return observersSending() > sending0
	})
	start := time.Now()
	c.Close()
	took := time.Since(start)
	gone := false
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if observersRunning() <= observers0 {
			gone = true
			break
		}
	}
	if took > 1500*time.Millisecond || !gone {
		t.Fatalf("Client.Close took %v (Redis healthy, nothing else in flight); Observe's goroutine still running 1s after Close: %v",
			took.Round(time.Millisecond), !gone)
	}
}

// A reader that takes a while over a change: the observer computes its
// timer for the lease's end from the TTL it read before the send, but
// starts it only after the send. A leader whose lease ran out while the
// reader was busy is delivered (stale, acceptable), and then "nobody
// leads" comes a whole TTL later, although Observe promises "a leader
// whose lease ran out is noticed when the lease ends".
func TestObserveNoticesLeaseEndAfterSlowRead(t *testing.T) {
	const ttl = 3 * time.Second
	c, _, _ := setup(t)
	ctx := ctxT(t, 60*time.Second)
	e, err := c.NewElection("observe-slow")
	must(t, err)
	seen := e.Observe(ctx)
	if l := nextLeader(t, seen, 5*time.Second); l.Elected() {
		t.Fatalf("first report %+v, want no leader", l)
	}
	lead, err := e.Campaign(ctx, "a", distlock.WithoutRenewal(), distlock.WithTTL(ttl))
	must(t, err)
	// The reader is busy until the lease has run out in Redis.
	waitFor(t, 2*ttl, "the leader's lease to run out", func() bool {
		_, err := e.Leader(ctx)
		return errors.Is(err, distlock.ErrNoLeader)
	})
	ended := time.Now()
	if l := nextLeader(t, seen, 5*time.Second); l.Fence != lead.Fence() {
		t.Fatalf("report %+v, want the leader of term %d", l, lead.Fence())
	}
	select {
	case l := <-seen:
		if l.Elected() {
			t.Fatalf("report %+v, want no leader", l)
		}
		t.Logf("\"nobody leads\" reported %v after the lease ran out", time.Since(ended).Round(time.Millisecond))
	case <-time.After(ttl / 2):
		t.Fatalf("no \"nobody leads\" within %v of reading the old leader, whose lease ran out %v ago (TTL %v)",
			ttl/2, time.Since(ended).Round(time.Millisecond), ttl)
	}
}

// A Leadership that has ended (Client.Close: Lost closed with ErrClosed,
// its Context cancelled) still proclaims: Proclaim returns nil and
// changes the value observers see, while Extend on the same Leadership
// returns ErrNotHeld. Proclaim promises ErrNotHeld "when the caller no
// longer leads", and the Leadership's Lost says when it ends.
func TestProclaimAfterLeadershipEndedIsNotHeld(t *testing.T) {
	c, _, srv := setup(t)
	ctx := ctxT(t, 30*time.Second)
	e, err := c.NewElection("proclaim-ended")
	must(t, err)
	lead, err := e.Campaign(ctx, "a", distlock.WithTTL(20*time.Second))
	must(t, err)
	work, stop := lead.Context(ctx)
	defer stop()
	c.Close()
	select {
	case <-lead.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("Lost not closed by Client.Close")
	}
	if !errors.Is(lead.Err(), distlock.ErrLost) || work.Err() == nil {
		t.Fatalf("after Close: Err %v, Context %v; want a loss", lead.Err(), work.Err())
	}
	if err := lead.Extend(ctx, 20*time.Second); !errors.Is(err, distlock.ErrNotHeld) {
		t.Fatalf("Extend after the loss: %v, want ErrNotHeld", err)
	}
	watcher := distlock.New(srv.Client(t))
	t.Cleanup(func() { watcher.Close() })
	we, _ := watcher.NewElection("proclaim-ended")
	perr := lead.Proclaim(ctx, "b")
	who, lerr := we.Leader(ctx)
	if perr == nil || who.Value != "a" {
		t.Fatalf("Proclaim after the leadership ended (Err %v): %v, want ErrNotHeld; the leader's value is now %q (%v), want %q unchanged",
			lead.Err(), perr, who.Value, lerr, "a")
	}
}
