package distlock_test

import (
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
