// Package distlockotel reports what distlock locks do through OpenTelemetry:
// metrics (acquire, wait and hold times, locks held, losses by cause,
// renewals, handoffs, quorum node errors) and spans for Lock, TryLock,
// Release and Extend, with a span link from a lock that was handed over to
// the Release that handed it over.
//
// It is its own module, github.com/distlock/distlock/otel, so that the core
// module does not depend on OpenTelemetry. It uses only the OpenTelemetry
// API; the application chooses the SDK and exporters:
//
//	obs, err := distlockotel.NewObserver(
//		distlockotel.WithKeyLabel(func(key string) string { // optional, bounded
//			prefix, _, _ := strings.Cut(key, ":")
//			return prefix + ":*"
//		}),
//	)
//	if err != nil {
//		return err
//	}
//	locks := distlock.New(rdb, distlock.WithObserver(obs))
//
// Lock names are unbounded, so no metric carries them unless WithKeyLabel
// maps them to a bounded label; spans carry the name as distlock.key.
// See docs/observability.md for the instruments and spans.
package distlockotel
