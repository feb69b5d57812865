// Package tracing sets up OpenTelemetry from the standard OTEL_* environment variables and carries W3C
// trace context through NATS headers. It is off unless OTEL_TRACES_EXPORTER=otlp or an OTLP endpoint is
// configured; off, every span is the no-op one of the global default provider, which costs next to
// nothing.
package tracing

import (
	"context"
	"fmt"
	"os"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
)

// Name is the instrumentation name of mediaworker's spans.
const Name = "github.com/mediaworker/mediaworker"

// Enabled reports whether the environment asks for traces: OTEL_TRACES_EXPORTER=otlp, or an OTLP
// endpoint set without OTEL_TRACES_EXPORTER=none.
func Enabled() bool {
	switch os.Getenv("OTEL_TRACES_EXPORTER") {
	case "none":
		return false
	case "otlp":
		return true
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Setup installs an OTLP/HTTP (JSON) trace exporter configured by the OTEL_* variables (endpoint,
// headers, timeout, OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER) when Enabled, and
// the W3C propagator always. The returned shutdown flushes what is buffered.
func Setup(ctx context.Context, version string) (shutdown func(context.Context) error, err error) {
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	if !Enabled() {
		return func(context.Context) error { return nil }, nil
	}
	exp, err := newOTLPJSON()
	if err != nil {
		return nil, fmt.Errorf("creating OTLP trace exporter: %w", err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewWithAttributes(semconv.SchemaURL,
		semconv.ServiceName(serviceName()), semconv.ServiceVersion(version)))
	if err != nil {
		res = resource.Default()
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	return tp.Shutdown, nil
}

func serviceName() string {
	if s := os.Getenv("OTEL_SERVICE_NAME"); s != "" {
		return s
	}
	return "mediaworker"
}

// Tracer is mediaworker's tracer from the global provider.
func Tracer() trace.Tracer { return otel.Tracer(Name) }

// Extract returns ctx carrying the trace context found in NATS headers (traceparent, tracestate).
func Extract(ctx context.Context, h nats.Header) context.Context {
	if h == nil {
		return ctx
	}
	return otel.GetTextMapPropagator().Extract(ctx, headerCarrier(h))
}

// Inject writes ctx's trace context into NATS headers.
func Inject(ctx context.Context, h nats.Header) {
	otel.GetTextMapPropagator().Inject(ctx, headerCarrier(h))
}

// headerCarrier adapts nats.Header to the propagator's carrier. NATS headers are case-sensitive on
// the wire; W3C names are lower case, so use them as they are.
type headerCarrier nats.Header

func (c headerCarrier) Get(key string) string {
	if v := c[key]; len(v) > 0 {
		return v[0]
	}
	return nats.Header(c).Get(key)
}

func (c headerCarrier) Set(key, value string) { c[key] = []string{value} }

func (c headerCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
