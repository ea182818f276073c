package distlockotel

import (
	"errors"

	"go.opentelemetry.io/otel/metric"
)

// instruments are the Observer's metrics; docs/observability.md lists them.
type instruments struct {
	acquire, wait, hold, lag metric.Float64Histogram
	batch                    metric.Int64Histogram
	held                     metric.Int64UpDownCounter
	losses, handoffs         metric.Int64Counter
	renewed, renewFailed     metric.Int64Counter
	nodeErrors, resubscribed metric.Int64Counter
}

// durationBuckets are the histogram boundaries in seconds, from a
// sub-millisecond acquire to a hold of half an hour.
var durationBuckets = []float64{
	0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
	1, 2.5, 5, 10, 30, 60, 300, 1800,
}

// batchBuckets are the boundaries of the renewal batch size.
var batchBuckets = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}

// init creates the instruments on m; it returns the errors of those the
// meter refused.
func (in *instruments) init(m metric.Meter) error {
	var errs []error
	seconds := func(name, desc string) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(durationBuckets...))
		errs = append(errs, err)
		return h
	}
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	in.acquire = seconds("distlock.acquire.duration", "Duration of Lock and TryLock calls, by outcome and how the lock was obtained.")
	in.wait = seconds("distlock.wait.duration", "Time that acquired locks spent waiting in line.")
	in.hold = seconds("distlock.hold.duration", "How long locks were held, by why the hold ended.")
	in.lag = seconds("distlock.renewal.lag", "How late renewal batches went out after their first lease was due.")
	var err error
	in.batch, err = m.Int64Histogram("distlock.renewal.batch.size", metric.WithUnit("{lease}"),
		metric.WithDescription("Leases renewed per round trip."), metric.WithExplicitBucketBoundaries(batchBuckets...))
	errs = append(errs, err)
	in.held, err = m.Int64UpDownCounter("distlock.locks.held", metric.WithUnit("{lock}"),
		metric.WithDescription("Locks held now by this process."))
	errs = append(errs, err)
	in.losses = counter("distlock.losses", "{loss}", "Held locks lost, by cause (expired, taken, unreachable, not_replicated, closed).")
	in.handoffs = counter("distlock.handoffs", "{handoff}", "Releases that handed the lock straight to a waiter.")
	in.renewed = counter("distlock.renewals.sent", "{lease}", "Lease renewals sent.")
	in.renewFailed = counter("distlock.renewals.failed", "{lease}", "Lease renewals that got no answer.")
	in.nodeErrors = counter("distlock.node.errors", "{error}", "Quorum node failures that made the node suspect, by node index.")
	in.resubscribed = counter("distlock.resubscriptions", "{reconnect}", "Times the pub/sub connection waiters listen on broke and was made again, or was moved to a new master after a failover.")
	return errors.Join(errs...)
}
