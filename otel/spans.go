package distlockotel

import (
	"context"

	"github.com/distlock/distlock"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Span attribute keys.
const (
	spanKey     = attribute.Key("distlock.key")
	spanFence   = attribute.Key("distlock.fence")
	spanHow     = attribute.Key("distlock.how")
	spanOutcome = attribute.Key("distlock.outcome")
	spanWait    = attribute.Key("distlock.wait_seconds")
)

var (
	spanNames = [...]string{
		distlock.EventAcquire: "distlock.Lock",
		distlock.EventRelease: "distlock.Release",
		distlock.EventExtend:  "distlock.Extend",
	}
	spanStart = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal)}
)

// Start begins the span of a Lock or TryLock ("distlock.Lock"), Release
// ("distlock.Release") or Extend ("distlock.Extend") call, a child of ctx's
// span, with the lock's name as attribute distlock.key. Observe ends it
// when the call returns. Other kinds get no span.
func (o *Observer) Start(ctx context.Context, kind distlock.EventKind, key string) context.Context {
	if int(kind) >= len(spanNames) || spanNames[kind] == "" {
		return ctx
	}
	ctx, span := o.tracer.Start(ctx, spanNames[kind], spanStart...)
	if span.IsRecording() {
		span.SetAttributes(spanKey.String(key))
	}
	return ctx
}

// Link returns the W3C traceparent of ctx's span, or "" when ctx has no
// valid span context. A Release passes it to the waiter it hands the lock
// to, whose Lock span links back to the Release span.
func (o *Observer) Link(ctx context.Context) string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	var c traceparent
	propagation.TraceContext{}.Inject(ctx, &c)
	return c.value
}

// linked parses a Link string back into the span context it names; it is
// invalid when the string is not a traceparent.
func linked(link string) trace.SpanContext {
	c := traceparent{value: link}
	return trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), &c))
}

// traceparent is a propagation.TextMapCarrier holding only the traceparent
// header (a link carries no tracestate).
type traceparent struct{ value string }

const traceparentHeader = "traceparent"

func (c *traceparent) Get(key string) string {
	if key == traceparentHeader {
		return c.value
	}
	return ""
}

func (c *traceparent) Set(key, value string) {
	if key == traceparentHeader {
		c.value = value
	}
}

func (c *traceparent) Keys() []string { return []string{traceparentHeader} }

// acquiredSpan annotates the recording span of a Lock call that returned:
// its outcome, and for a granted lock its fence, how and wait, a
// "handed_over" event and a link to the Release that handed it over.
func acquiredSpan(span trace.Span, e distlock.Event, out int) {
	span.SetAttributes(spanOutcome.String(outcomeNames[out]))
	if out != outcomeAcquired {
		return
	}
	span.SetAttributes(spanFence.Int64(e.Fence), spanHow.String(howNames[howIndex(e.How)]))
	if e.Wait > 0 {
		span.SetAttributes(spanWait.Float64(e.Wait.Seconds()))
	}
	if e.How == distlock.HowHandedOver {
		span.AddEvent("handed_over", trace.WithAttributes(spanFence.Int64(e.Fence)))
		if sc := linked(e.Link); sc.IsValid() {
			span.AddLink(trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{attribute.String("distlock.link", "handed_over_by")}})
		}
	}
}

// endSpan ends a call's span, with status Error when out is outcomeError.
// A Lock or TryLock that did not obtain the lock (ErrNotObtained) is not an
// error: the lock being busy is an answer, not a failure.
func endSpan(span trace.Span, err error, out int) {
	if out == outcomeError && span.IsRecording() {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
