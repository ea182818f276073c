package distlockotel_test

import (
	"context"
	"testing"
	"time"

	"github.com/distlock/distlock"
	distlockotel "github.com/distlock/distlock/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// events are the metric-only events of a lock's life, as the core reports
// them with context.Background().
var events = []distlock.Event{
	{Kind: distlock.EventHoldEnded, Key: "orders:1", Fence: 7, Err: distlock.ErrReleased, Duration: time.Second},
	{Kind: distlock.EventHoldEnded, Key: "orders:1", Fence: 7, Err: distlock.ErrExpired, Duration: time.Second},
	{Kind: distlock.EventRenewal, Batch: 3, Failed: 1, Lag: time.Millisecond},
	{Kind: distlock.EventHandoff, Key: "orders:1", Fence: 7},
}

func newSDKObserver(tb testing.TB, opts ...distlockotel.Option) *distlockotel.Observer {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	tp := sdktrace.NewTracerProvider()
	tb.Cleanup(func() {
		_ = mp.Shutdown(context.Background())
		_ = tp.Shutdown(context.Background())
	})
	obs, err := distlockotel.NewObserver(append([]distlockotel.Option{
		distlockotel.WithMeterProvider(mp), distlockotel.WithTracerProvider(tp)}, opts...)...)
	if err != nil {
		tb.Fatal(err)
	}
	return obs
}

// Recording the events that carry no span allocates nothing, with and
// without a key label, once each label has been seen.
func TestObserveAllocatesNothing(t *testing.T) {
	for name, opts := range map[string][]distlockotel.Option{
		"plain":     nil,
		"key label": {distlockotel.WithKeyLabel(func(string) string { return "orders:*" })},
	} {
		obs := newSDKObserver(t, opts...)
		ctx := context.Background()
		for _, e := range events {
			obs.Observe(ctx, e) // first sight of each attribute set
		}
		allocs := testing.AllocsPerRun(100, func() {
			for _, e := range events {
				obs.Observe(ctx, e)
			}
		})
		if allocs != 0 {
			t.Errorf("%s: %v allocations per round of events, want 0", name, allocs)
		}
	}
}

// A span-less acquire and hold, as with an unsampled trace.
func BenchmarkObserveMetrics(b *testing.B) {
	obs := newSDKObserver(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		for _, e := range events {
			obs.Observe(ctx, e)
		}
	}
}

// A whole Lock call and its Release as the Observer sees them, with spans
// recorded by the SDK.
func BenchmarkObserveCall(b *testing.B) {
	obs := newSDKObserver(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		c := obs.Start(ctx, distlock.EventAcquire, "orders:1")
		obs.Observe(c, distlock.Event{Kind: distlock.EventAcquire, Key: "orders:1", Fence: 7, How: distlock.HowFree, Duration: time.Millisecond})
		c = obs.Start(ctx, distlock.EventRelease, "orders:1")
		obs.Observe(c, distlock.Event{Kind: distlock.EventRelease, Key: "orders:1", Fence: 7})
		obs.Observe(ctx, distlock.Event{Kind: distlock.EventHoldEnded, Key: "orders:1", Fence: 7, Err: distlock.ErrReleased})
	}
}
