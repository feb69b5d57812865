package tracing

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// The exporter speaks OTLP/JSON: a collector receives the spans with hex ids, a parent link, string
// timestamps and typed attributes.
func TestOTLPJSONExport(t *testing.T) {
	got := make(chan exportRequest, 1)
	var auth string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var req exportRequest
		if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/json" || json.Unmarshal(b, &req) != nil {
			t.Errorf("bad export: %s %s %s", r.URL.Path, r.Header.Get("Content-Type"), b)
		}
		auth = r.Header.Get("Authorization")
		got <- req
	}))
	defer srv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "Authorization=Bearer%20abc")
	exp, err := newOTLPJSON()
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	ctx, parent := tp.Tracer("t").Start(context.Background(), "process event")
	_, child := tp.Tracer("t").Start(ctx, "scanning")
	child.SetAttributes(attribute.Int64("bytes", 42), attribute.String("media.id", "x"), attribute.Bool("ok", true))
	child.End()
	req := <-got
	parent.End()
	<-got
	if auth != "Bearer abc" {
		t.Errorf("headers not sent: %q", auth)
	}
	sp := req.ResourceSpans[0].ScopeSpans[0].Spans[0]
	if sp.Name != "scanning" || len(sp.TraceID) != 32 || len(sp.SpanID) != 16 || sp.ParentSpanID != parent.SpanContext().SpanID().String() || sp.StartTimeUnixNano == "" {
		t.Fatalf("span: %+v", sp)
	}
	if len(sp.Attributes) != 3 || *sp.Attributes[0].Value.IntValue != "42" {
		t.Fatalf("attributes: %+v", sp.Attributes)
	}
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	if _, err := newOTLPJSON(); err == nil {
		t.Fatal("grpc protocol accepted")
	}
}
