package distlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/distlock/distlock"
	"github.com/redis/go-redis/v9"
)

func ExampleClient_Lock() {
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locks := distlock.New(rdb)
	defer locks.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	lock, err := locks.Lock(ctx, "report:daily", distlock.WithTTL(10*time.Second))
	if err != nil {
		fmt.Println("not obtained:", err)
		return
	}
	defer lock.Release(ctx)

	// Work under lock.Context: it is cancelled if the lock is lost.
	work, stop := lock.Context(ctx)
	defer stop()
	fmt.Println("holding", lock.Key(), "work ok:", work.Err() == nil)
	// Output: holding report:daily work ok: true
}

func ExampleClient_TryLock() {
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locks := distlock.New(rdb)
	defer locks.Close()
	ctx := context.Background()

	first, _ := locks.TryLock(ctx, "cron:cleanup")
	defer first.Release(ctx)

	_, err := locks.TryLock(ctx, "cron:cleanup")
	fmt.Println(errors.Is(err, distlock.ErrNotObtained))
	// Output: true
}

func ExampleLock_Fence() {
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locks := distlock.New(rdb)
	defer locks.Close()
	ctx := context.Background()

	a, _ := locks.TryLock(ctx, "account:7")
	a.Release(ctx)
	b, _ := locks.TryLock(ctx, "account:7")
	defer b.Release(ctx)
	fmt.Println(b.Fence() > a.Fence())
	// Output: true
}

func ExampleLock_Release() {
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locks := distlock.New(rdb)
	defer locks.Close()
	ctx := context.Background()

	lock, _ := locks.TryLock(ctx, "order:1001")
	fmt.Println(lock.Release(ctx))
	fmt.Println(errors.Is(lock.Release(ctx), distlock.ErrNotHeld))
	// Output:
	// <nil>
	// true
}

func ExampleClient_NewMutex() {
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locks := distlock.New(rdb)
	defer locks.Close()

	mu, err := locks.NewMutex("balance:42")
	if err != nil {
		fmt.Println(err)
		return
	}
	mu.Lock()
	fmt.Println("debiting under the lock")
	mu.Unlock()
	// Output: debiting under the lock
}

func ExampleNewQuorum() {
	// Five independent Redis servers, no replication between them.
	var nodes []redis.UniversalClient
	for _, addr := range []string{"r1:6379", "r2:6379", "r3:6379", "r4:6379", "r5:6379"} {
		nodes = append(nodes, redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true}))
	}
	locks := distlock.NewQuorum(nodes)
	defer locks.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	lock, err := locks.Lock(ctx, "invoice:77")
	var qe *distlock.QuorumError
	if errors.As(err, &qe) {
		fmt.Println("no majority:", qe) // lists every node's answer
		return
	}
	if err != nil {
		return
	}
	defer lock.Release(ctx)
	fmt.Println("held by a majority, fence", lock.Fence())
}

func ExampleWithFair() {
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locks := distlock.New(rdb)
	defer locks.Close()
	ctx := context.Background()

	// Waiters get the lock in arrival order; a newcomer never jumps the line.
	lock, err := locks.Lock(ctx, "printer", distlock.WithFair())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lock.Release(ctx)
	fmt.Println("my turn")
	// Output: my turn
}
