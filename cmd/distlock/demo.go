package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redisproc"
	"github.com/redis/go-redis/v9"
)

const demoUsage = `usage: distlock demo [--workers N] [--stock N]

Starts a throwaway redis-server, then runs worker processes that buy from one
shared inventory: first without a lock (they oversell), then with distlock
(exactly the stock is sold). Prints a table and stops everything it started.
`

// runDemo is `distlock demo`.
func runDemo(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("demo")
	workers := fs.Int("workers", 4, "")
	stock := fs.Int("stock", 100, "")
	pos, rest, err := parseInterspersed(fs, args, nil)
	switch {
	case errors.Is(err, errHelp):
		fmt.Fprint(stdout, demoUsage)
		return exitOK
	case err != nil:
		return fail(stderr, "demo", err, exitUsage)
	case len(pos)+len(rest) > 0:
		return fail(stderr, "demo", usagef("unexpected argument %q", append(pos, rest...)[0]), exitUsage)
	case *workers < 1 || *stock < 1:
		return fail(stderr, "demo", usagef("--workers and --stock must be at least 1"), exitUsage)
	}
	// A signal (Ctrl-C) must end the rounds, not the process: Go's default
	// exit would skip the deferred cleanup and leave the directory behind,
	// and a SIGTERM to distlock alone would leave its workers running.
	ctx, stop := demoSignals()
	defer stop()
	dir, err := os.MkdirTemp("", "distlock-demo")
	if err != nil {
		fmt.Fprintln(stderr, "distlock demo:", err)
		return exitRedis
	}
	defer os.RemoveAll(dir)
	srv, err := redisproc.Launch(dir)
	if err != nil {
		fmt.Fprintln(stderr, "distlock demo:", err)
		return exitRedis
	}
	defer srv.Kill()
	fmt.Fprintf(stdout, "redis-server on %s; %d worker processes buy %d units\n\n", srv.Addr, *workers, *stock)
	fmt.Fprintf(stdout, "%-9s %6s %9s %9s  %s\n", "mode", "sold", "oversold", "time", "purchases per worker")
	for _, locked := range []bool{false, true} {
		row, err := demoRound(ctx, srv.Addr, *workers, *stock, locked)
		var sig errDemoSignal
		if errors.As(context.Cause(ctx), &sig) {
			fmt.Fprintln(stderr, "distlock demo:", sig)
			return 128 + int(sig.sig)
		}
		if err != nil {
			fmt.Fprintln(stderr, "distlock demo:", err)
			return exitRedis
		}
		fmt.Fprintln(stdout, row)
	}
	return 0
}

// errDemoSignal is the cause of a demo ended by a signal.
type errDemoSignal struct{ sig syscall.Signal }

func (e errDemoSignal) Error() string { return "interrupted by " + e.sig.String() }

// demoSignals returns a context cancelled, with an errDemoSignal cause,
// by the first SIGINT, SIGTERM or SIGHUP, and the function that stops
// catching them.
func demoSignals() (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, catchable(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)...)
	go func() {
		select {
		case s := <-sigs:
			cancel(errDemoSignal{s.(syscall.Signal)})
		case <-ctx.Done():
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		cancel(nil)
	}
}

// demoRound fills the inventory, runs the workers and returns a table row.
// The workers are killed when ctx ends.
func demoRound(parent context.Context, addr string, workers, stock int, locked bool) (string, error) {
	ctx, cancel := context.WithTimeout(parent, 40*time.Second)
	defer cancel()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		return "", err
	}
	rdb.Set(ctx, "demo:stock", stock, 0)
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for i := 1; i <= workers; i++ {
		cmd := exec.CommandContext(ctx, self, "demo-worker", addr, "w"+strconv.Itoa(i), strconv.FormatBool(locked))
		cmd.Stderr = os.Stderr
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := cmd.Run(); err != nil {
				errs <- fmt.Errorf("worker: %w", err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return "", err
	}
	sold, _ := rdb.Get(ctx, "demo:sold").Int()
	per, _ := rdb.HGetAll(ctx, "demo:by-worker").Result()
	mode := "no lock"
	if locked {
		mode = "distlock"
	}
	return fmt.Sprintf("%-9s %6d %9d %9s  %s", mode, sold, max(sold-stock, 0),
		time.Since(start).Round(time.Millisecond), formatCounts(per)), nil
}

func formatCounts(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + m[k]
	}
	return strings.Join(parts, " ")
}

// runDemoWorker is one worker process: it buys until the stock is gone.
func runDemoWorker(args []string) int {
	if len(args) != 3 {
		return exitUsage
	}
	addr, name, locked := args[0], args[1], args[2] == "true"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	locks := distlock.New(rdb)
	defer locks.Close()
	for {
		var l *distlock.Lock
		if locked {
			var err error
			if l, err = locks.Lock(ctx, "demo:inventory"); err != nil {
				fmt.Fprintln(os.Stderr, "demo worker:", err)
				return exitRedis
			}
		}
		left, err := rdb.Get(ctx, "demo:stock").Int()
		if err != nil {
			return exitRedis
		}
		if left > 0 {
			time.Sleep(time.Millisecond) // checking payment: the race window
			rdb.Set(ctx, "demo:stock", left-1, 0)
			rdb.Incr(ctx, "demo:sold")
			rdb.HIncrBy(ctx, "demo:by-worker", name, 1)
		}
		if l != nil {
			_ = l.Release(ctx)
		}
		if left <= 0 {
			return 0
		}
	}
}
