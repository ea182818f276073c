package distlock_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/distlock/distlock"
	"github.com/redis/go-redis/v9"
)

func ExampleClient_NewRWMutex() {
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locks := distlock.New(rdb)
	defer locks.Close()
	ctx := context.Background()

	catalog, _ := locks.NewRWMutex("catalog")
	r1, _ := catalog.RLock(ctx) // readers share the lock
	r2, _ := catalog.RLock(ctx)
	_, err := catalog.TryLock(ctx) // a writer waits for them
	fmt.Println(errors.Is(err, distlock.ErrNotObtained))
	r1.Release(ctx)
	r2.Release(ctx)

	w, err := catalog.Lock(ctx)
	fmt.Println(err, w.Fence() > r2.Fence())
	w.Release(ctx)
	// Output:
	// true
	// <nil> true
}

func ExampleClient_NewSemaphore() {
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locks := distlock.New(rdb)
	defer locks.Close()
	ctx := context.Background()

	// At most 2 exports at once across every process.
	exports, _ := locks.NewSemaphore("exports", 2)
	a, _ := exports.Acquire(ctx)
	b, _ := exports.Acquire(ctx)
	_, err := exports.TryAcquire(ctx)
	fmt.Println(errors.Is(err, distlock.ErrNotObtained))
	a.Release(ctx)
	c, err := exports.TryAcquire(ctx)
	fmt.Println(err)
	b.Release(ctx)
	c.Release(ctx)
	// Output:
	// true
	// <nil>
}

func ExampleClient_LockAll() {
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locks := distlock.New(rdb)
	defer locks.Close()
	ctx := context.Background()

	// A transfer locks both accounts; another transfer asking for them in
	// the other order waits instead of deadlocking.
	both, err := locks.LockAll(ctx, []string{"account:9", "account:3"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer both.Release(ctx)
	for _, l := range both.Locks() {
		fmt.Println(l.Key())
	}
	// Output:
	// account:3
	// account:9
}

func ExampleClient_NewElection() {
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locks := distlock.New(rdb)
	defer locks.Close()
	ctx := context.Background()

	election, _ := locks.NewElection("scheduler")
	lead, err := election.Campaign(ctx, "host-a:8080")
	if err != nil {
		fmt.Println(err)
		return
	}
	// Do the leader's work under lead.Context: it is cancelled if the
	// leadership is lost, before any other candidate can win.
	work, stop := lead.Context(ctx)
	defer stop()

	leader, _ := election.Leader(ctx)
	fmt.Println(leader.Value, leader.Fence == lead.Fence(), work.Err())
	lead.Resign(ctx)
	_, err = election.Leader(ctx)
	fmt.Println(err)
	// Output:
	// host-a:8080 true <nil>
	// distlock: no leader
}

func ExampleElection_Observe() {
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locks := distlock.New(rdb)
	defer locks.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	election, _ := locks.NewElection("observed")
	changes := election.Observe(ctx)
	fmt.Println((<-changes).Elected()) // nobody leads yet

	lead, _ := election.Campaign(ctx, "v1")
	fmt.Println((<-changes).Value)
	lead.Proclaim(ctx, "v2")
	fmt.Println((<-changes).Value)
	lead.Resign(ctx)
	fmt.Println((<-changes).Elected())
	// Output:
	// false
	// v1
	// v2
	// false
}
