package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redistest"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"
)

// run serves metrics, calls ready with their URL, and takes locks until ctx
// ends (or cfg.duration passes). It returns an error if Redis, the
// endpoint or the telemetry cannot be set up, or if a worker failed for a
// reason other than the run ending.
func run(ctx context.Context, cfg config, ready func(metricsURL string)) error {
	if cfg.workers < 0 {
		return fmt.Errorf("-workers %d: want 0 or more", cfg.workers)
	}
	if cfg.duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.duration)
		defer cancel()
	}
	if cfg.redisAddr == "" {
		dir, err := os.MkdirTemp("", "observability")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		srv, err := redistest.Launch(dir)
		if err != nil {
			return err
		}
		defer srv.Kill()
		cfg.redisAddr = srv.Addr
	}
	tel, err := newTelemetry(cfg)
	if err != nil {
		return err
	}
	defer tel.shutdown(context.Background())

	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", tel.metrics)
	server := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = server.Serve(ln) }()
	defer server.Close()
	ready("http://" + ln.Addr().String() + "/metrics")

	log := cfg.logger()
	s := &service{log: log, tracer: tel.tp.Tracer("github.com/distlock/distlock/examples/observability")}
	// Two Clients, as two processes would have, each on its own connection
	// pool; both report to the same Observer and logger.
	for range 2 {
		rdb := redis.NewClient(&redis.Options{Addr: cfg.redisAddr, ContextTimeoutEnabled: true})
		defer rdb.Close()
		c := distlock.New(rdb, distlock.WithObserver(tel.obs), distlock.WithLogger(log))
		defer c.Close()
		s.clients = append(s.clients, c)
		s.rdb = rdb
	}
	return s.run(ctx, cfg)
}

// service is the lock-taking part of the example.
type service struct {
	clients []*distlock.Client
	rdb     *redis.Client
	tracer  trace.Tracer
	log     *slog.Logger
}

func (s *service) run(ctx context.Context, cfg config) error {
	var wg sync.WaitGroup
	errs := make([]error, cfg.workers+3)
	spawn := func(i int, f func(context.Context) error) {
		wg.Go(func() {
			if err := f(ctx); err != nil && ctx.Err() == nil {
				errs[i] = err
			}
		})
	}
	for i := range cfg.workers {
		c := s.clients[i%len(s.clients)]
		spawn(i, func(ctx context.Context) error { return s.worker(ctx, c) })
	}
	spawn(cfg.workers, s.prober)
	spawn(cfg.workers+1, s.leader)
	if cfg.flushEvery > 0 {
		spawn(cfg.workers+2, func(ctx context.Context) error { return s.flusher(ctx, cfg.flushEvery) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// worker does jobs under orders:42 until ctx ends.
func (s *service) worker(ctx context.Context, c *distlock.Client) error {
	for ctx.Err() == nil {
		if err := s.job(ctx, c); err != nil && ctx.Err() == nil {
			return err
		}
	}
	return nil
}

// job is one unit of work: lock orders:42, work 5-25ms, release; all in a
// "job" span, the parent of distlock's spans.
func (s *service) job(ctx context.Context, c *distlock.Client) error {
	ctx, span := s.tracer.Start(ctx, "job")
	defer span.End()
	l, err := c.Lock(ctx, "orders:42", distlock.WithTTL(2*time.Second))
	if err != nil {
		return err
	}
	work(ctx, 5*time.Millisecond+rand.N(20*time.Millisecond))
	if err := l.Release(context.WithoutCancel(ctx)); err != nil && !errors.Is(err, distlock.ErrNotHeld) {
		return err
	}
	return nil
}

// prober TryLocks orders:42 every 50ms; it mostly finds it busy.
func (s *service) prober(ctx context.Context) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		l, err := s.clients[0].TryLock(ctx, "orders:42")
		switch {
		case err == nil:
			_ = l.Release(context.WithoutCancel(ctx))
		case !errors.Is(err, distlock.ErrNotObtained):
			return err
		}
	}
}

// leader holds leader:reports (a 900ms lease, renewed every 300ms) for as
// long as it can, and takes it again when it is lost.
func (s *service) leader(ctx context.Context) error {
	for ctx.Err() == nil {
		l, err := s.clients[1].Lock(ctx, "leader:reports", distlock.WithTTL(900*time.Millisecond))
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		select {
		case <-ctx.Done():
			_ = l.Release(context.WithoutCancel(ctx))
		case <-l.Lost():
			s.log.Info("leader: lost leadership, taking it again", "cause", l.Err())
		}
	}
	return nil
}

// flusher empties Redis every period, which makes held locks lost.
func (s *service) flusher(ctx context.Context, period time.Duration) error {
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			s.log.Info("flusher: FLUSHALL")
			if err := s.rdb.FlushAll(ctx).Err(); err != nil && ctx.Err() == nil {
				return err
			}
		}
	}
}

// work stands for the job's real work: it takes d, or until ctx ends.
func work(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
