package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// The service runs against its own redis-server, and a scrape of its
// endpoint shows every distlock metric it exercises: handoffs, waits,
// holds, renewals and (with -flush-every) losses. Its spans and log lines
// come out too.
func TestServiceExposesMetrics(t *testing.T) {
	var traces, logs safeBuffer
	cfg := config{listen: "127.0.0.1:0", workers: 3, flushEvery: 300 * time.Millisecond, sample: 1, traces: &traces, logs: &logs}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	urls, done := make(chan string, 1), make(chan error, 1)
	go func() { done <- run(ctx, cfg, func(url string) { urls <- url }) }()
	var url string
	select {
	case url = <-urls:
	case err := <-done:
		t.Fatalf("run: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("no metrics endpoint within 30s")
	}

	want := []string{
		`distlock_acquire_duration_seconds_bucket{how="handed_over",lock="orders:*",outcome="acquired",`,
		`distlock_acquire_duration_seconds_count{lock="orders:*",outcome="not_obtained"}`,
		`distlock_wait_duration_seconds_count{how="handed_over",lock="orders:*"}`,
		`distlock_hold_duration_seconds_count{cause="released",lock="orders:*"}`,
		`distlock_locks_held{lock="orders:*"}`,
		`distlock_handoffs_total{lock="orders:*"}`,
		`distlock_losses_total{cause="expired",lock="leader:*"}`,
		`distlock_renewals_sent_total`,
		`distlock_renewal_lag_seconds_count`,
		`distlock_renewal_batch_size_count`,
	}
	var scrape string
	deadline := time.Now().Add(15 * time.Second)
	for missing := want; len(missing) > 0; {
		if time.Now().After(deadline) {
			t.Fatalf("after 15s the scrape lacks %q:\n%s", missing, scrape)
		}
		time.Sleep(50 * time.Millisecond) // polling the endpoint
		scrape = get(t, url)
		missing = missing[:0:0]
		for _, w := range want {
			if !strings.Contains(scrape, w) {
				missing = append(missing, w)
			}
		}
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("run did not stop within 15s of its context ending")
	}
	for _, w := range []string{`"Name":"distlock.Lock"`, `"Name":"handed_over"`, `"Name":"distlock.Release"`, `"Name":"job"`} {
		if !strings.Contains(traces.String(), w) {
			t.Errorf("traces lack %s", w)
		}
	}
	if !strings.Contains(logs.String(), `msg="distlock: lock lost" key=leader:reports`) {
		t.Errorf("logs lack the loss:\n%s", logs.String())
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

type safeBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *safeBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *safeBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
