package distlock_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/distlock/distlock"
	"github.com/redis/go-redis/v9"
)

// runHelper is the body of a helper process; its environment says what to do.
func runHelper(mode string) int {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("DISTLOCK_ADDR"), ContextTimeoutEnabled: true})
	defer rdb.Close()
	c := distlock.New(rdb)
	defer c.Close()
	var err error
	switch mode {
	case "inventory":
		err = helperInventory(c, rdb)
	case "hold":
		err = helperHold(c)
	case "fairwait":
		_, err = c.Lock(context.Background(), os.Getenv("DISTLOCK_KEY"), distlock.WithFair())
		fmt.Println("got")
		time.Sleep(time.Hour) // until the test kills this process
	case "semwait":
		s, _ := c.NewSemaphore(os.Getenv("DISTLOCK_KEY"), 1)
		_, err = s.Acquire(context.Background())
		fmt.Println("got")
		time.Sleep(time.Hour) // until the test kills this process
	case "fences":
		err = helperFences(c)
	case "pausedwriter":
		err = helperPausedWriter(c, rdb)
	case "reentrant":
		err = helperReentrant(c)
	case "rw":
		err = helperRW(c)
	case "sem":
		err = helperSem(c)
	case "multi":
		err = helperMulti(c)
	case "elect":
		err = helperElect(c, rdb)
	default:
		err = fmt.Errorf("unknown helper mode %q", mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	return 0
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return n
	}
	return def
}

func envDuration(name string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(name)); err == nil {
		return d
	}
	return def
}

// helperInventory buys units from "stock" until it is empty, with workers
// goroutines, each purchase a non-atomic read-modify-write under the lock.
func helperInventory(c *distlock.Client, rdb *redis.Client) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for range envInt("DISTLOCK_WORKERS", 4) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := buyUntilSoldOut(ctx, c, rdb); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func buyUntilSoldOut(ctx context.Context, c *distlock.Client, rdb *redis.Client) error {
	for {
		l, err := c.Lock(ctx, "inventory")
		if err != nil {
			return err
		}
		stock, err := rdb.Get(ctx, "stock").Int()
		if err != nil {
			return err
		}
		if stock <= 0 {
			return l.Release(ctx)
		}
		time.Sleep(200 * time.Microsecond) // the work that widens the race window
		rdb.Set(ctx, "stock", stock-1, 0)
		rdb.Incr(ctx, "sold")
		if err := l.Release(ctx); err != nil {
			return err
		}
	}
}

// helperHold takes DISTLOCK_KEY, prints its fence and holds it until killed.
func helperHold(c *distlock.Client) error {
	ctx := context.Background()
	opts := []distlock.Option{distlock.WithTTL(envDuration("DISTLOCK_TTL", time.Second))}
	if owner := os.Getenv("DISTLOCK_OWNER"); owner != "" {
		opts = append(opts, distlock.WithOwner(owner))
	}
	l, err := c.Lock(ctx, os.Getenv("DISTLOCK_KEY"), opts...)
	if err != nil {
		return err
	}
	fmt.Printf("fence=%d\n", l.Fence())
	<-l.Lost()
	fmt.Printf("lost=%v\n", l.Err())
	time.Sleep(time.Hour) // until the test kills this process
	return nil
}

// helperFences takes and releases DISTLOCK_KEY DISTLOCK_N times, printing
// each fence.
func helperFences(c *distlock.Client) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for range envInt("DISTLOCK_N", 10) {
		l, err := c.Lock(ctx, os.Getenv("DISTLOCK_KEY"))
		if err != nil {
			return err
		}
		fmt.Printf("fence=%d\n", l.Fence())
		if err := l.Release(ctx); err != nil {
			return err
		}
	}
	return nil
}
