package distlock_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redistest"
)

// 100,000 distinct lock names taken and released leave one key in Redis:
// the node's fence counter. Nothing grows with the number of names.
func TestDistinctNamesLeaveConstantKeys(t *testing.T) {
	c, rdb, _ := setup(t)
	ctx := ctxT(t, 5*time.Minute)
	const names, workers = 100_000, 8
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < names; i += workers {
				l, err := c.Lock(ctx, fmt.Sprintf("order:%d", i))
				if err == nil {
					err = l.Release(ctx)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	if keys := rdb.Keys(ctx, "*").Val(); len(keys) != 1 || keys[0] != "distlock:fence" {
		t.Fatalf("after %d distinct names: %d keys left (%.5v), want only distlock:fence", names, len(keys), keys)
	}
}

// Fences keep rising across a restart of a server with AOF: the counter is
// data like any other.
func TestFencesSurviveRestartWithAOF(t *testing.T) {
	srv := redistest.Start(t, "--appendonly", "yes", "--appendfsync", "always")
	ctx := ctxT(t, 20*time.Second)
	fence := func() int64 {
		t.Helper()
		rdb := srv.Client(t)
		c := distlock.New(rdb)
		defer c.Close()
		l, err := c.Lock(ctx, "durable")
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		return l.Fence()
	}
	before := fence()
	srv.Restart(t)
	if after := fence(); after <= before {
		t.Fatalf("fence %d after the restart, %d before", after, before)
	}
}

// Fences keep rising when the counter is lost: a restart without
// persistence, a FLUSHALL (or an eviction) starts it again from the
// server's clock in microseconds, above every fence it gave before, so a
// resource that keeps the highest fence it saw (package fence, a SQL
// column) goes on refusing stale holders and accepts the new ones. Every
// script that draws a fence is covered: a TryLock of a free lock
// (try_head.lua), a fair Lock (acquire.lua), a handoff to a waiter
// (lib.lua's offer), a read-write lock and a semaphore. Fences are exact
// integers: two draws in a row differ by the grants they made (two for a
// handoff: the holder's and the waiter's).
func TestFencesRiseWhenTheCounterIsLost(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := ctxT(t, 60*time.Second)
	draws := fenceDraws(t, ctx)
	losses := []struct {
		name string
		lose func()
	}{
		{"restart without persistence", func() { srv.Restart(t) }},
		{"FLUSHALL", func() { must(t, rdb.FlushAll(ctx).Err()) }},
	}
	for name, draw := range draws {
		for _, loss := range losses {
			t.Run(name+"/"+loss.name, func(t *testing.T) {
				c := distlock.New(srv.Client(t))
				draw(c) // loads the scripts (a load lifts the counter: see reload)
				before := draw(c)
				if next := draw(c); next-before != grants(name) {
					t.Fatalf("fences %d then %d, want %d apart", before, next, grants(name))
				}
				c.Close()
				loss.lose()
				c = distlock.New(srv.Client(t))
				defer c.Close()
				after := draw(c)
				if after <= before+grants(name) {
					t.Fatalf("fence %d after the counter was lost, %d before", after, before+grants(name))
				}
				// The first draw's release may lift the counter again as it
				// loads its script (see TestFencesRiseAfterRestartFromSnapshot).
				next := draw(c)
				if next <= after {
					t.Fatalf("fences %d then %d after the loss", after, next)
				}
				if last := draw(c); last-next != grants(name) {
					t.Fatalf("fences %d then %d after the loss, want %d apart", next, last, grants(name))
				}
			})
		}
	}
}

// fenceDraws are the ways of drawing a fence, each returning the fence it
// drew (see TestFencesRiseWhenTheCounterIsLost).
func fenceDraws(t *testing.T, ctx context.Context) map[string]func(c *distlock.Client) int64 {
	return map[string]func(c *distlock.Client) int64{
		"trylock": func(c *distlock.Client) int64 {
			l, err := c.TryLock(ctx, "drawn")
			must(t, err)
			must(t, l.Release(ctx))
			return l.Fence()
		},
		"fair": func(c *distlock.Client) int64 {
			l, err := c.Lock(ctx, "drawn", distlock.WithFair())
			must(t, err)
			must(t, l.Release(ctx))
			return l.Fence()
		},
		"handoff": func(c *distlock.Client) int64 {
			held, err := c.TryLock(ctx, "handed")
			must(t, err)
			got := make(chan *distlock.Lock, 1)
			go func() {
				l, err := c.Lock(ctx, "handed")
				if err != nil {
					t.Error(err)
				}
				got <- l
			}()
			waitFor(t, 10*time.Second, "a waiter in line", func() bool {
				info, err := c.Inspect(ctx, "handed")
				return err == nil && info.Queued == 1
			})
			must(t, held.Release(ctx))
			l := <-got
			if l == nil {
				t.FailNow()
			}
			must(t, l.Release(ctx))
			return l.Fence()
		},
		"rwmutex": func(c *distlock.Client) int64 {
			rw, err := c.NewRWMutex("drawn-rw")
			must(t, err)
			l, err := rw.TryLock(ctx)
			must(t, err)
			must(t, l.Release(ctx))
			return l.Fence()
		},
		"semaphore": func(c *distlock.Client) int64 {
			sem, err := c.NewSemaphore("drawn-sem", 2)
			must(t, err)
			l, err := sem.TryAcquire(ctx)
			must(t, err)
			must(t, l.Release(ctx))
			return l.Fence()
		},
	}
}

// Fences keep rising across a restart from a snapshot taken before the
// latest grants: the counter comes back, but behind fences already given
// out. The first Client to find its scripts gone (every restart empties
// Redis's script cache) lifts the counter to the server's clock before it
// loads a script that draws, so the next fence is above them all, and a
// resource refuses the holder that the restart forgot. Before the lift,
// the next grant repeated the last fence.
func TestFencesRiseAfterRestartFromSnapshot(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	for name, draw := range fenceDraws(t, ctx) {
		t.Run(name, func(t *testing.T) {
			srv := redistest.Start(t)
			c := distlock.New(srv.Client(t))
			draw(c)
			must(t, srv.Client(t).Save(ctx).Err()) // a periodic snapshot
			before := draw(c)                      // given out, not in the snapshot
			c.Close()
			srv.Restart(t) // loads the snapshot
			c = distlock.New(srv.Client(t))
			defer c.Close()
			if after := draw(c); after <= before {
				t.Fatalf("fence %d after a restart from a snapshot, %d given out before it", after, before)
			}
		})
	}
}

// grants is how many fences a draw of TestFencesRiseWhenTheCounterIsLost takes.
func grants(draw string) int64 {
	if draw == "handoff" {
		return 2
	}
	return 1
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
