package distlockotel_test

import (
	"context"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redistest"
	distlockotel "github.com/distlock/distlock/otel"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fixture is a real redis-server and an Observer recording into the SDK's
// in-memory metric reader and span recorder.
type fixture struct {
	srv    *redistest.Server
	rdb    *redis.Client
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
	obs    *distlockotel.Observer
}

func newFixture(t *testing.T, opts ...distlockotel.Option) *fixture {
	t.Helper()
	f := &fixture{srv: redistest.Start(t), reader: sdkmetric.NewManualReader(), spans: tracetest.NewSpanRecorder()}
	f.rdb = f.srv.Client(t)
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(f.reader))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(f.spans))
	t.Cleanup(func() {
		_ = mp.Shutdown(context.Background())
		_ = tp.Shutdown(context.Background())
	})
	obs, err := distlockotel.NewObserver(append([]distlockotel.Option{
		distlockotel.WithMeterProvider(mp), distlockotel.WithTracerProvider(tp)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	f.obs = obs
	return f
}

// client returns a Client on the fixture's server observed by its
// Observer, closed at cleanup.
func (f *fixture) client(t *testing.T) *distlock.Client {
	c := distlock.New(f.rdb, distlock.WithObserver(f.obs))
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// metrics is one collection of the fixture's metrics.
type metrics struct{ rm metricdata.ResourceMetrics }

func (f *fixture) collect(t *testing.T) metrics {
	t.Helper()
	var m metrics
	if err := f.reader.Collect(context.Background(), &m.rm); err != nil {
		t.Fatal(err)
	}
	return m
}

func (m metrics) find(name string) (metricdata.Metrics, bool) {
	for _, sm := range m.rm.ScopeMetrics {
		for _, x := range sm.Metrics {
			if x.Name == name {
				return x, true
			}
		}
	}
	return metricdata.Metrics{}, false
}

// sum is the value of counter or up-down counter name with exactly attrs,
// 0 when it has no such data point.
func (m metrics) sum(name string, attrs ...attribute.KeyValue) int64 {
	x, _ := m.find(name)
	s, _ := x.Data.(metricdata.Sum[int64])
	want := attribute.NewSet(attrs...)
	for _, dp := range s.DataPoints {
		if dp.Attributes.Equals(&want) {
			return dp.Value
		}
	}
	return 0
}

// hist is the count and sum of float histogram name with exactly attrs.
func (m metrics) hist(name string, attrs ...attribute.KeyValue) (uint64, float64) {
	x, _ := m.find(name)
	h, _ := x.Data.(metricdata.Histogram[float64])
	want := attribute.NewSet(attrs...)
	for _, dp := range h.DataPoints {
		if dp.Attributes.Equals(&want) {
			return dp.Count, dp.Sum
		}
	}
	return 0, 0
}

// intHist is the count and sum of int histogram name, over all attributes.
func (m metrics) intHist(name string) (uint64, int64) {
	x, _ := m.find(name)
	h, _ := x.Data.(metricdata.Histogram[int64])
	var n uint64
	var s int64
	for _, dp := range h.DataPoints {
		n, s = n+dp.Count, s+dp.Sum
	}
	return n, s
}

// attrValues returns every attribute value of every data point.
func (m metrics) attrValues() []string {
	var vals []string
	add := func(set attribute.Set) {
		for _, kv := range set.ToSlice() {
			vals = append(vals, kv.Value.Emit())
		}
	}
	for _, sm := range m.rm.ScopeMetrics {
		for _, x := range sm.Metrics {
			switch d := x.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					add(dp.Attributes)
				}
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					add(dp.Attributes)
				}
			case metricdata.Histogram[int64]:
				for _, dp := range d.DataPoints {
					add(dp.Attributes)
				}
			}
		}
	}
	return vals
}

// ended returns the ended spans called name.
func (f *fixture) ended(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range f.spans.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// startedWithEvent reports whether a span that has not necessarily ended
// has an event called event.
func (f *fixture) startedWithEvent(name, event string) bool {
	for _, s := range f.spans.Started() {
		if s.Name() != name {
			continue
		}
		for _, e := range s.Events() {
			if e.Name == event {
				return true
			}
		}
	}
	return false
}

func spanAttr(s sdktrace.ReadOnlySpan, key attribute.Key) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

func hasEvent(s sdktrace.ReadOnlySpan, name string) bool {
	for _, e := range s.Events() {
		if e.Name == name {
			return true
		}
	}
	return false
}

// waitFor polls cond until it holds, failing the test after within.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(5 * time.Millisecond) // polling state we do not own
	}
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
