package main

import (
	"context"
	"io"
	"testing"
	"time"
)

// A negative -workers (a typo, say) is refused with an error; it panicked
// with "makeslice: len out of range" in service.run.
func TestNegativeWorkersIsRefused(t *testing.T) {
	cfg := config{listen: "127.0.0.1:0", workers: -5, duration: 300 * time.Millisecond, sample: 1, traces: io.Discard, logs: io.Discard}
	done := make(chan any, 1)
	go func() {
		defer func() { done <- recover() }()
		if err := run(context.Background(), cfg, func(string) {}); err == nil {
			t.Error("run with -workers -5: no error")
		}
	}()
	select {
	case p := <-done:
		if p != nil {
			t.Fatalf("run with -workers -5 panicked: %v", p)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not return within 30s")
	}
}
