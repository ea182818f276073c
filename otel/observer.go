package distlockotel

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"sync"

	"github.com/distlock/distlock"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the Observer's meter and
// tracer; its version is this module's, from the program's build info.
const ScopeName = "github.com/distlock/distlock/otel"

// Observer is a distlock.Observer that records metrics and spans through
// OpenTelemetry. Give it to a Client with distlock.WithObserver; one
// Observer may serve several Clients, whose metrics then add up. It is safe
// for concurrent use.
type Observer struct {
	tracer   trace.Tracer
	keyLabel func(string) string
	inst     instruments

	plain  *labelAttrs // measurement options when there is no key label
	mu     sync.RWMutex
	labels map[string]*labelAttrs // by key label
	nodes  [][]metric.AddOption   // by quorum node index
}

var _ distlock.Observer = (*Observer)(nil)

// Option configures an Observer.
type Option func(*config)

type config struct {
	mp       metric.MeterProvider
	tp       trace.TracerProvider
	keyLabel func(string) string
}

// WithMeterProvider records metrics with mp instead of the global
// MeterProvider (otel.GetMeterProvider()). A nil mp is ignored.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) {
		if mp != nil {
			c.mp = mp
		}
	}
}

// WithTracerProvider makes spans with tp instead of the global
// TracerProvider (otel.GetTracerProvider()). A nil tp is ignored.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) {
		if tp != nil {
			c.tp = tp
		}
	}
}

// WithKeyLabel adds the attribute lock = label(key) to the metrics that
// concern one lock (acquire, wait and hold durations, locks held, losses,
// handoffs). label must map the unbounded set of lock names onto a small
// one ("order:42" to "order:*", say): every distinct label is a time series
// per instrument and attribute combination, kept for the process's life.
// It is called on every such event, so it must be quick and must not block.
// Without it, metrics carry no lock name.
func WithKeyLabel(label func(key string) string) Option {
	return func(c *config) { c.keyLabel = label }
}

// NewObserver returns an Observer that records with the providers given by
// options, or else the global ones (which forward to providers installed
// later with otel.SetMeterProvider and otel.SetTracerProvider). It returns
// an error, and no Observer, if the meter refuses to create an instrument.
func NewObserver(opts ...Option) (*Observer, error) {
	cfg := config{}
	for _, opt := range opts {
		if opt != nil {
			opt(&cfg)
		}
	}
	if cfg.mp == nil {
		cfg.mp = otel.GetMeterProvider()
	}
	if cfg.tp == nil {
		cfg.tp = otel.GetTracerProvider()
	}
	version := moduleVersion()
	o := &Observer{
		tracer:   cfg.tp.Tracer(ScopeName, trace.WithInstrumentationVersion(version)),
		keyLabel: cfg.keyLabel,
		labels:   map[string]*labelAttrs{},
	}
	if err := o.inst.init(cfg.mp.Meter(ScopeName, metric.WithInstrumentationVersion(version))); err != nil {
		return nil, fmt.Errorf("distlockotel: %w", err)
	}
	o.plain = newLabelAttrs("", false)
	return o, nil
}

// moduleVersion is this module's version from the program's build info,
// reported as the instrumentation scope's version; "" when unknown.
func moduleVersion() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	if info.Main.Path == modulePath {
		return strings.TrimPrefix(info.Main.Version, "(devel)")
	}
	for _, d := range info.Deps {
		if d.Path == modulePath {
			return d.Version
		}
	}
	return ""
}

const modulePath = ScopeName

// Observe records e: it moves the instruments of e's kind (see
// docs/observability.md) and, when e reports that a Lock, TryLock, Release
// or Extend call returned, ends the call's span from Start, with status
// Error if the call failed (ErrNotObtained is not a failure). It cannot
// fail: what the SDK does with the data is the SDK's business.
func (o *Observer) Observe(ctx context.Context, e distlock.Event) {
	switch e.Kind {
	case distlock.EventAcquire:
		o.acquired(ctx, e)
	case distlock.EventQueued:
		trace.SpanFromContext(ctx).AddEvent("queued")
	case distlock.EventRelease, distlock.EventExtend:
		endSpan(trace.SpanFromContext(ctx), e.Err, outcomeOf(e.Err, false))
	case distlock.EventHandoff:
		o.inst.handoffs.Add(ctx, 1, o.attrs(e.Key).plainAdd...)
		trace.SpanFromContext(ctx).AddEvent("handoff")
	case distlock.EventHoldEnded:
		a, c := o.attrs(e.Key), causeOf(e.Err)
		o.inst.held.Add(ctx, -1, a.plainAdd...)
		o.inst.hold.Record(ctx, e.Duration.Seconds(), a.hold[c]...)
		if c != causeReleased {
			o.inst.losses.Add(ctx, 1, a.loss[c]...)
		}
	case distlock.EventRenewal:
		o.inst.renewed.Add(ctx, int64(e.Batch))
		if e.Failed > 0 {
			o.inst.renewFailed.Add(ctx, int64(e.Failed))
		}
		o.inst.lag.Record(ctx, e.Lag.Seconds())
		o.inst.batch.Record(ctx, int64(e.Batch))
	case distlock.EventNodeError:
		o.inst.nodeErrors.Add(ctx, 1, o.node(e.Node)...)
	case distlock.EventResubscribed:
		o.inst.resubscribed.Add(ctx, 1)
	}
}

// acquired records a Lock or TryLock call that returned, and ends its span.
func (o *Observer) acquired(ctx context.Context, e distlock.Event) {
	a := o.attrs(e.Key)
	out := outcomeOf(e.Err, true)
	how := howIndex(e.How)
	if out != outcomeAcquired {
		how = 0
	}
	o.inst.acquire.Record(ctx, e.Duration.Seconds(), a.acquire[out][how]...)
	if out == outcomeAcquired {
		o.inst.held.Add(ctx, 1, a.plainAdd...)
		if e.Wait > 0 {
			o.inst.wait.Record(ctx, e.Wait.Seconds(), a.wait[how]...)
		}
	}
	span := trace.SpanFromContext(ctx)
	if span.IsRecording() {
		acquiredSpan(span, e, out)
	}
	endSpan(span, e.Err, out)
}

// Outcomes of a call, the values of the outcome attribute.
const (
	outcomeAcquired = iota // or, for Release and Extend, ok
	outcomeNotObtained
	outcomeError
	nOutcomes
)

var outcomeNames = [nOutcomes]string{"acquired", "not_obtained", "error"}

// outcomeOf classifies a call's error; acquire says whether ErrNotObtained
// is an outcome (for Lock and TryLock) rather than an error.
func outcomeOf(err error, acquire bool) int {
	switch {
	case err == nil:
		return outcomeAcquired
	case acquire && errors.Is(err, distlock.ErrNotObtained) && !errors.Is(err, distlock.ErrClosed):
		// (A Lock waiting when its Client closed is an error, as a
		// Lock after Close is, though it also matches ErrNotObtained.)
		return outcomeNotObtained
	}
	return outcomeError
}

// howIndex maps h to an index into howNames; 0 is unknown.
func howIndex(h distlock.How) int {
	switch h {
	case distlock.HowFree, distlock.HowHandedOver, distlock.HowAfterWait:
		return int(h)
	}
	return 0
}

// Causes of a hold's end, the values of the cause attribute.
const (
	causeReleased = iota
	causeExpired
	causeTaken
	causeUnreachable
	causeNotReplicated
	causeClosed
	causeOther
	nCauses
)

var causeNames = [nCauses]string{"released", "expired", "taken", "unreachable", "not_replicated", "closed", "other"}

// causeOf classifies why a hold ended (Event.Err of EventHoldEnded).
func causeOf(err error) int {
	switch {
	case err == nil || errors.Is(err, distlock.ErrReleased):
		return causeReleased
	case errors.Is(err, distlock.ErrExpired):
		return causeExpired
	case errors.Is(err, distlock.ErrTaken):
		return causeTaken
	case errors.Is(err, distlock.ErrUnreachable):
		return causeUnreachable
	case errors.Is(err, distlock.ErrNotReplicated):
		return causeNotReplicated
	case errors.Is(err, distlock.ErrClosed):
		return causeClosed
	}
	return causeOther
}
