package main

import (
	"context"
	"errors"
	"net/http"
	"strings"

	distlockotel "github.com/distlock/distlock/otel"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// telemetry is the service's OpenTelemetry SDK: a meter provider read by
// the Prometheus exporter, a tracer provider printing spans, and the
// distlock Observer recording into both.
type telemetry struct {
	mp      *sdkmetric.MeterProvider
	tp      *sdktrace.TracerProvider
	obs     *distlockotel.Observer
	metrics http.Handler
}

// newTelemetry sets the SDK up; it returns an error if an exporter or the
// Observer cannot be made.
func newTelemetry(cfg config) (*telemetry, error) {
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg),
		// Classic Prometheus names (distlock_acquire_duration_seconds), and
		// no otel_scope_* labels: the distlock_ prefix says where they come from.
		otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes),
		otelprom.WithoutScopeInfo())
	if err != nil {
		return nil, err
	}
	spans, err := stdouttrace.New(stdouttrace.WithWriter(cfg.traces))
	if err != nil {
		return nil, err
	}
	res := resource.NewSchemaless(attribute.String("service.name", "distlock-observability-example"))
	t := &telemetry{
		mp: sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp), sdkmetric.WithResource(res)),
		tp: sdktrace.NewTracerProvider(sdktrace.WithBatcher(spans), sdktrace.WithResource(res),
			sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.sample)))),
		metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
	}
	t.obs, err = distlockotel.NewObserver(
		distlockotel.WithMeterProvider(t.mp),
		distlockotel.WithTracerProvider(t.tp),
		distlockotel.WithKeyLabel(keyLabel),
	)
	if err != nil {
		return nil, errors.Join(err, t.shutdown(context.Background()))
	}
	return t, nil
}

// keyLabel maps a lock name to its family: "orders:42" to "orders:*".
func keyLabel(key string) string {
	family, _, _ := strings.Cut(key, ":")
	return family + ":*"
}

// shutdown flushes the spans still batched and stops both providers.
func (t *telemetry) shutdown(ctx context.Context) error {
	return errors.Join(t.tp.Shutdown(ctx), t.mp.Shutdown(ctx))
}
