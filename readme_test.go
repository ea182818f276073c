package distlock_test

// The README's snippets, as written but for the functions around them: they
// must compile against the current API and run against a real Redis.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

func readmePlaceOrder(ctx context.Context, fence int64) error { return ctx.Err() }

// readmeQuickstart is the README's Quickstart, verbatim but for the
// function around it.
func readmeQuickstart(ctx context.Context, addr string) error {
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	locks := distlock.New(rdb) // a Sentinel or Cluster client works too; NewQuorum for Redlock
	defer locks.Close()

	lock, err := locks.Lock(ctx, "order:1001", distlock.WithTTL(10*time.Second))
	if errors.Is(err, distlock.ErrNotObtained) {
		return nil // someone else holds it and ctx ended first
	} else if err != nil {
		return err // Redis error or bad input
	}
	defer lock.Release(ctx)

	work, stop := lock.Context(ctx) // cancelled if the lock is lost
	defer stop()
	return readmePlaceOrder(work, lock.Fence())
}

// readmePrimitives is the README's second snippet with the
// constructors of its comments.
func readmePrimitives(ctx context.Context, locks *distlock.Client) error {
	rw, _ := locks.NewRWMutex("catalog")
	sem, _ := locks.NewSemaphore("exports", 4)
	election, _ := locks.NewElection("scheduler")

	r, err := rw.RLock(ctx) // rw, _ := locks.NewRWMutex("catalog"); rw.Lock for the writer
	if err != nil {
		return err
	}
	r.Release(ctx)
	w, err := rw.Lock(ctx)
	if err != nil {
		return err
	}
	w.Release(ctx)
	p, err := sem.Acquire(ctx) // sem, _ := locks.NewSemaphore("exports", 4)
	if err != nil {
		return err
	}
	p.Release(ctx)
	all, err := locks.LockAll(ctx, []string{"account:9", "account:3"}) // all or nothing, no deadlock
	if err != nil {
		return err
	}
	actx, astop := all.Context(ctx)
	_ = actx
	astop()
	_ = all.Lost()
	all.Release(ctx)
	lead, err := election.Campaign(ctx, "host-a") // election, _ := locks.NewElection("scheduler"); Observe, Leader, Proclaim, Resign
	if err != nil {
		return err
	}
	_ = election.Observe
	if _, err := election.Leader(ctx); err != nil {
		return err
	}
	if err := lead.Proclaim(ctx, "host-a:9090"); err != nil {
		return err
	}
	// Leadership embeds a *Lock: Lost, Context, Fence, Release, Extend, TTL.
	_ = lead.Lost()
	_ = lead.Fence()
	work, stop := lead.Context(ctx)
	defer stop()
	_ = work
	return lead.Resign(ctx)
}

func TestReadmeSnippetsRun(t *testing.T) {
	srv := redistest.Start(t)
	ctx := ctxT(t, 20*time.Second)
	if err := readmeQuickstart(ctx, srv.Options().Addr); err != nil {
		t.Fatal(err)
	}
	c := distlock.New(srv.Client(t))
	defer c.Close()
	if err := readmePrimitives(ctx, c); err != nil {
		t.Fatal(err)
	}
}
