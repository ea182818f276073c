package distlock

import (
	"context"
	"testing"
	"time"

	"github.com/distlock/distlock/internal/redistest"
)

// A caller refused for asking a semaphore with another limit leaves
// through the release script (abandon), in the background. It must not
// hand out permits by its own limit: with 2 of 2 permits held and a waiter
// in line, a leaving caller of limit 3 gave the waiter a third permit (a
// make test run caught it as the waiter never lining up). Nor may a
// release hand out more than one permit when the semaphore's limit is
// forgotten (its keys expired under a line whose holders died).
func TestSemaphoreReleaseHandsByTheLimitInUse(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	c := New(rdb)
	defer c.Close()
	ctx := ctxFor(t, 20*time.Second)
	two, err := c.NewSemaphore("pool", 2)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := two.Acquire(ctx); err != nil {
			t.Fatal(err)
		}
	}
	names := c.names(permitKind, "pool")
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	got := make(chan error, 3)
	for i := range 3 {
		wc := New(srv.Client(t))
		defer wc.Close()
		s, _ := wc.NewSemaphore("pool", 2)
		go func() {
			_, err := s.Acquire(wctx)
			got <- err
		}()
		poll(t, 5*time.Second, "a waiter to line up", func() bool { return rdb.LLen(ctx, names.line).Val() == int64(i+1) })
	}

	leave := func(limit string) []int64 {
		t.Helper()
		h := hold{kind: permitKind, names: names, token: "refused", releaseArg: limit}
		res, err := int64s(runRelease(ctx, rdb, h, publishArg, "", false), nil)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := leave("3"); len(res) != 1 || res[0] != -1 {
		t.Fatalf("release by a caller of limit 3, holding nothing: %v, want [-1] (nothing handed)", res)
	}
	if n := rdb.ZCard(ctx, names.lock+":h").Val(); n != 2 {
		t.Fatalf("%d permits held of 2 after a limit-3 caller left", n)
	}

	// The limit forgotten under the line: one permit at most is handed, not
	// one per the leaving caller's limit (3 here, for waiters of 2).
	if err := rdb.Del(ctx, names.lock+":h", names.lock+":d").Err(); err != nil {
		t.Fatal(err)
	}
	leave("3")
	if n := rdb.ZCard(ctx, names.lock+":h").Val(); n != 1 {
		t.Fatalf("%d permits handed while the limit was unknown, want 1", n)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the first waiter did not get the permit handed to it within 5s")
	}
	cancel()
}
