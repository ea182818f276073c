package distlockotel_test

import (
	"context"
	"testing"
	"time"

	"github.com/distlock/distlock"
	distlockotel "github.com/distlock/distlock/otel"
	"go.opentelemetry.io/otel/trace"
)

// Link is the W3C traceparent of the call's span, and "" outside a span.
func TestLinkIsTraceparent(t *testing.T) {
	obs := newSDKObserver(t)
	if l := obs.Link(context.Background()); l != "" {
		t.Errorf("Link outside a span = %q, want empty", l)
	}
	ctx := obs.Start(context.Background(), distlock.EventRelease, "k")
	sc := trace.SpanContextFromContext(ctx)
	want := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"
	if l := obs.Link(ctx); l != want {
		t.Errorf("Link = %q, want %q", l, want)
	}
	obs.Observe(ctx, distlock.Event{Kind: distlock.EventRelease, Key: "k"})
}

// With the global providers left at their no-op defaults the Observer
// works, makes no valid spans and so passes no links.
func TestGlobalNoopProviders(t *testing.T) {
	obs, err := distlockotel.NewObserver()
	if err != nil {
		t.Fatal(err)
	}
	ctx := obs.Start(context.Background(), distlock.EventAcquire, "k")
	if l := obs.Link(ctx); l != "" {
		t.Errorf("Link with a no-op tracer = %q, want empty", l)
	}
	obs.Observe(ctx, distlock.Event{Kind: distlock.EventAcquire, Key: "k", How: distlock.HowHandedOver,
		Link: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", Wait: time.Millisecond})
	for _, e := range events {
		obs.Observe(context.Background(), e)
	}
}
