// Command observability is a small service that takes contended distlock
// locks and reports them through OpenTelemetry: metrics on a Prometheus
// endpoint, spans on stdout (one JSON object per span), and distlock's
// log lines (slog) on stderr.
//
// Its workers share one hot lock, "orders:42", through two Clients, so that
// releases hand the lock to waiters; a prober TryLocks it and mostly finds
// it busy; a leader holds "leader:reports" for as long as it can, so its
// lease is renewed. With -flush-every, Redis is emptied now and then and
// the leader's lock is lost (cause expired).
//
//	go run .                                  # from examples/observability
//	curl -s localhost:9464/metrics | grep ^distlock
//	go run . -redis localhost:6379 -sample 0.1 -flush-every 5s
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"time"
)

func main() {
	cfg := config{traces: os.Stdout, logs: os.Stderr}
	flag.StringVar(&cfg.redisAddr, "redis", "", "Redis address; empty starts a throwaway redis-server")
	flag.StringVar(&cfg.listen, "listen", "127.0.0.1:9464", "address of the Prometheus endpoint /metrics")
	flag.IntVar(&cfg.workers, "workers", 4, "goroutines contending for orders:42")
	flag.DurationVar(&cfg.duration, "duration", 0, "stop after this long; 0 runs until interrupted")
	flag.DurationVar(&cfg.flushEvery, "flush-every", 0, "FLUSHALL this often, to show lost locks; 0 never")
	flag.Float64Var(&cfg.sample, "sample", 1, "fraction of jobs whose spans are printed")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	err := run(ctx, cfg, func(url string) {
		fmt.Fprintln(os.Stderr, "observability: metrics on", url)
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "observability:", err)
		os.Exit(1)
	}
}

// config is what the service runs with.
type config struct {
	redisAddr  string
	listen     string
	workers    int
	duration   time.Duration
	flushEvery time.Duration
	sample     float64
	traces     io.Writer // spans, one JSON object each
	logs       io.Writer // distlock's and the service's slog lines
}

func (c config) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(c.logs, nil))
}
