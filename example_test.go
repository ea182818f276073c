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
