package distlock_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// BenchmarkHold100kLocks holds 100,000 locks with a 3s lease in one process
// and measures what renewing them costs: goroutines, renewal commands per
// second at the server, and Redis memory per held lock. It sets up once
// whatever b.N is; run it as
//
//	go test -run '^$' -bench BenchmarkHold100kLocks -benchtime 1x -v .
func BenchmarkHold100kLocks(b *testing.B) {
	const (
		n       = 100_000
		ttl     = 3 * time.Second
		window  = 2 * ttl // six renewal periods of every lock
		workers = 16
	)
	srv := redistest.Start(b)
	rdb := srv.Client(b)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	memBefore := infoInt(b, rdb, "memory", "used_memory")
	goBefore := runtime.NumGoroutine()

	c := distlock.New(redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, PoolSize: workers * 2}))
	defer c.Close()
	locks := make([]*distlock.Lock, n)
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				l, err := c.TryLock(ctx, "bench:"+strconv.Itoa(i), distlock.WithTTL(ttl))
				if err != nil {
					errs <- err
					return
				}
				locks[i] = l
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	b.Logf("acquired %d locks in %v", n, time.Since(start).Round(time.Millisecond))

	b.ResetTimer()
	calls0 := commandStats(b, rdb)["evalsha"]
	cpu0 := redisCPU(b, rdb)
	t0 := time.Now()
	time.Sleep(window) // the measurement window: renewal runs on its own
	calls1 := commandStats(b, rdb)["evalsha"]
	elapsed := time.Since(t0)
	cpu := (redisCPU(b, rdb) - cpu0) / elapsed.Seconds()
	b.StopTimer()

	goroutines := runtime.NumGoroutine() - goBefore
	memAfter := infoInt(b, rdb, "memory", "used_memory")
	var lost int
	for _, l := range locks {
		if l.Err() != nil {
			lost++
		}
	}
	perSec := float64(calls1-calls0) / elapsed.Seconds()
	perLock := float64(memAfter-memBefore) / n
	b.ReportMetric(float64(goroutines), "goroutines")
	b.ReportMetric(perSec, "renewals/s")
	b.ReportMetric(perLock, "bytes/lock")
	b.ReportMetric(float64(lost), "lost")
	b.ReportMetric(cpu*100, "redis-cpu-%")
	b.Logf("%d locks, ttl %v: %d goroutines added by the client (incl. go-redis), %.0f renewal commands/s (ideal %.0f), "+
		"%.0f bytes of Redis memory per held lock (the grant string and its TTL), %d lost, redis-server at %.0f%% of a core",
		n, ttl, goroutines, perSec, n/(ttl.Seconds()/3), perLock, lost, cpu*100)
	if lost != 0 {
		b.Fatalf("%d of %d locks lost while renewed", lost, n)
	}
}

// infoInt reads one integer field of an INFO section.
func infoInt(tb testing.TB, rdb *redis.Client, section, field string) int64 {
	tb.Helper()
	info, err := rdb.Info(context.Background(), section).Result()
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				tb.Fatal(err)
			}
			return n
		}
	}
	tb.Fatal(fmt.Sprintf("INFO %s has no %s", section, field))
	return 0
}

// redisCPU is the CPU time redis-server has used, in seconds.
func redisCPU(tb testing.TB, rdb *redis.Client) float64 {
	tb.Helper()
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		tb.Fatal(err)
	}
	var sum float64
	for _, line := range strings.Split(info, "\n") {
		for _, f := range []string{"used_cpu_sys:", "used_cpu_user:"} {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), f); ok {
				x, _ := strconv.ParseFloat(v, 64)
				sum += x
			}
		}
	}
	return sum
}
