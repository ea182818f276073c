package distlock

import (
	"context"
	"errors"
	"log/slog"
	"time"
)

// Observer is told what a Client's locks do, for metrics, traces and logs;
// package distlock/otel implements it with OpenTelemetry, and WithLogger
// with log/slog. The core depends on no telemetry library: an Observer is
// the seam.
//
// Its methods are called synchronously on the lock's path, some while a
// Lock's state is locked: they must be quick, must not block and must not
// call back into distlock. A Client without an Observer does no work for
// observation and allocates nothing for it.
type Observer interface {
	// Start is called when a Lock, TryLock, Release or Extend call begins
	// (kind EventAcquire, EventRelease or EventExtend). The context it
	// returns, which may carry a span, is the one the call runs under and
	// the one its later events are observed with.
	Start(ctx context.Context, kind EventKind, key string) context.Context
	// Observe reports an event; ctx is the call's context from Start, or
	// context.Background() for events no call made (renewals, losses).
	Observe(ctx context.Context, e Event)
	// Link returns a short string that identifies ctx's span (a W3C
	// traceparent, say), or "". A release carries it to the waiter it
	// hands the lock to, whose acquire event gets it as Event.Link.
	Link(ctx context.Context) string
}

// EventKind says what an Event reports.
type EventKind uint8

const (
	// EventAcquire: a Lock or TryLock call returned. Err is nil when the
	// lock was obtained (Fence, How, Wait, Link set), matches
	// ErrNotObtained when it was not, and is another error on a failure.
	// Duration is the call's.
	EventAcquire EventKind = iota + 1
	// EventQueued: a Lock call lined up to wait.
	EventQueued
	// EventRelease: a Release call returned (Err as it returned).
	EventRelease
	// EventHandoff: a Release handed the lock straight to a waiter.
	EventHandoff
	// EventExtend: an Extend call returned (Err as it returned).
	EventExtend
	// EventHoldEnded: a hold ended, by Release (Err is ErrReleased) or by
	// a loss (Err matches ErrLost: ErrExpired, ErrTaken, ErrUnreachable,
	// ErrNotReplicated, ErrClosed). Duration is how long it was held.
	EventHoldEnded
	// EventRenewal: a batch of leases was renewed. Batch is its size,
	// Failed how many got no answer, Lag how late the batch went out after
	// its first lock was due.
	EventRenewal
	// EventNodeError: quorum node Node failed (Err) and is now suspect:
	// it is not waited for until it answers again.
	EventNodeError
	// EventResubscribed: the pub/sub connection through which waiters hear
	// of releases, and holders of restarts, broke (Err) and is being made
	// again (then every lock the Client holds is renewed), or was left on a
	// node that is no longer the master (Err: errPassedOver) and is moved.
	EventResubscribed
)

var eventNames = [...]string{"", "acquire", "queued", "release", "handoff", "extend", "hold_ended", "renewal", "node_error", "resubscribed"}

// String returns the kind's name, in snake case.
func (k EventKind) String() string {
	if int(k) < len(eventNames) {
		return eventNames[k]
	}
	return "unknown"
}

// How says how an acquired lock was obtained.
type How uint8

const (
	// HowFree: the lock was free (or this owner's, when reentrant) when
	// first asked for.
	HowFree How = iota + 1
	// HowHandedOver: a release handed it to the waiting caller.
	HowHandedOver
	// HowAfterWait: the caller waited and took it when it asked again
	// (the holder's lease ran out, or a quorum waiter's turn came).
	HowAfterWait
)

var howNames = [...]string{"", "free", "handed_over", "after_wait"}

// String returns the name, in snake case.
func (h How) String() string {
	if int(h) < len(howNames) {
		return howNames[h]
	}
	return "unknown"
}

// Event is one thing a Client did; which fields are set depends on Kind.
type Event struct {
	Kind     EventKind
	Key      string        // the lock's name; "" for renewal batches and node errors
	Fence    int64         // the grant's fence, when there is one
	Err      error         // why a call failed, or why a hold ended
	How      How           // EventAcquire: how the lock was obtained
	Duration time.Duration // the call's duration; EventHoldEnded: the hold's
	Wait     time.Duration // EventAcquire: time spent in line
	Batch    int           // EventRenewal: leases in the batch
	Failed   int           // EventRenewal: leases that got no answer
	Lag      time.Duration // EventRenewal: how late the batch went out
	Node     int           // EventNodeError: index of the quorum node
	Link     string        // EventAcquire: Link of the release that handed it over
}

// WithObserver adds o to the Client's observers (see Observer). It may be
// given several times. A nil o is ignored, also a nil pointer in the
// interface: the *Observer of a constructor that failed (such as
// distlockotel.NewObserver) would otherwise panic in every lock call.
func WithObserver(o Observer) ClientOption {
	return func(c *clientConfig) {
		if !isNil(o) {
			c.observers = append(c.observers, o)
		}
	}
}

// WithLogger logs, to l, what an operator must know: a lost lock (Warn,
// with key, fence and cause), renewals that got no answer (Warn), a quorum
// node turning suspect (Warn) and a broken subscription (Info). Without it
// distlock logs nothing.
func WithLogger(l *slog.Logger) ClientOption {
	if l == nil {
		return nil
	}
	return WithObserver(logObserver{l})
}

// observers fans events out to several Observers.
type observers []Observer

func (os observers) Start(ctx context.Context, kind EventKind, key string) context.Context {
	for _, o := range os {
		ctx = o.Start(ctx, kind, key)
	}
	return ctx
}

func (os observers) Observe(ctx context.Context, e Event) {
	for _, o := range os {
		o.Observe(ctx, e)
	}
}

func (os observers) Link(ctx context.Context) string {
	for _, o := range os {
		if l := o.Link(ctx); l != "" {
			return l
		}
	}
	return ""
}

// observer returns the configured observers as one, or nil.
func (cfg clientConfig) observer() Observer {
	switch len(cfg.observers) {
	case 0:
		return nil
	case 1:
		return cfg.observers[0]
	}
	return observers(cfg.observers)
}

// observe reports e if the Client has an observer.
func (c *Client) observe(ctx context.Context, e Event) {
	if c.obs != nil {
		c.obs.Observe(ctx, e)
	}
}

// logObserver is WithLogger's Observer.
type logObserver struct{ l *slog.Logger }

func (logObserver) Start(ctx context.Context, _ EventKind, _ string) context.Context { return ctx }
func (logObserver) Link(context.Context) string                                      { return "" }

func (o logObserver) Observe(ctx context.Context, e Event) {
	switch {
	case e.Kind == EventHoldEnded && errors.Is(e.Err, ErrLost):
		o.l.LogAttrs(ctx, slog.LevelWarn, "distlock: lock lost", slog.String("key", e.Key),
			slog.Int64("fence", e.Fence), slog.String("cause", e.Err.Error()), slog.Duration("held", e.Duration))
	case e.Kind == EventRenewal && e.Failed > 0:
		o.l.LogAttrs(ctx, slog.LevelWarn, "distlock: renewal failed", slog.Int("failed", e.Failed),
			slog.Int("batch", e.Batch), slog.String("error", errString(e.Err)))
	case e.Kind == EventNodeError:
		o.l.LogAttrs(ctx, slog.LevelWarn, "distlock: quorum node suspect", slog.Int("node", e.Node),
			slog.String("error", errString(e.Err)))
	case e.Kind == EventResubscribed:
		o.l.LogAttrs(ctx, slog.LevelInfo, "distlock: subscription reconnecting", slog.String("error", errString(e.Err)))
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
