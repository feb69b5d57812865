package tracing

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// otlpJSON exports spans as OTLP/HTTP with JSON encoding. It exists instead of the upstream OTLP
// exporter because that one links gRPC and protobuf (12 MB more binary for a worker meant for small
// edge machines) even when only HTTP is used; the OTel Collector and most backends accept OTLP/JSON.
type otlpJSON struct {
	endpoint string
	headers  map[string]string
	client   *http.Client

	mu     sync.Mutex
	closed bool
}

// newOTLPJSON reads the standard variables: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (the full URL) or
// OTEL_EXPORTER_OTLP_ENDPOINT (+ /v1/traces), OTEL_EXPORTER_OTLP[_TRACES]_HEADERS, _TIMEOUT (ms), and
// OTEL_EXPORTER_OTLP[_TRACES]_PROTOCOL, which must be http/json when set.
func newOTLPJSON() (*otlpJSON, error) {
	if p := firstEnv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"); p != "" && p != "http/json" {
		return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=%s is not supported: mediaworker exports OTLP as http/json (port 4318 of an OTel Collector)", p)
	}
	endpoint := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	if endpoint == "" {
		base := os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
		if base == "" {
			base = "http://localhost:4318"
		}
		endpoint = strings.TrimSuffix(base, "/") + "/v1/traces"
	}
	if u, err := url.Parse(endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("OTLP endpoint %q must be an http or https URL", endpoint)
	}
	timeout := 10 * time.Second
	if ms, err := strconv.Atoi(firstEnv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT")); err == nil && ms > 0 {
		timeout = time.Duration(ms) * time.Millisecond
	}
	headers := map[string]string{}
	for _, kv := range strings.Split(firstEnv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS"), ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		k, _ = url.QueryUnescape(strings.TrimSpace(k))
		v, _ = url.QueryUnescape(strings.TrimSpace(v))
		headers[k] = v
	}
	return &otlpJSON{endpoint: endpoint, headers: headers, client: &http.Client{Timeout: timeout}}, nil
}

func firstEnv(names ...string) string {
	for _, n := range names {
		if v := os.Getenv(n); v != "" {
			return v
		}
	}
	return ""
}

// ExportSpans implements sdktrace.SpanExporter.
func (e *otlpJSON) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	e.mu.Lock()
	closed := e.closed
	e.mu.Unlock()
	if closed || len(spans) == 0 {
		return nil
	}
	body, err := json.Marshal(encodeSpans(spans))
	if err != nil {
		return fmt.Errorf("encoding spans: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.endpoint, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range e.headers {
		req.Header.Set(k, v)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return fmt.Errorf("exporting spans to %s: %w", e.endpoint, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("exporting spans to %s: %s", e.endpoint, resp.Status)
	}
	return nil
}

// Shutdown implements sdktrace.SpanExporter.
func (e *otlpJSON) Shutdown(context.Context) error {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	return nil
}

// The OTLP/JSON shapes (protobuf JSON mapping: ids in hex, 64-bit integers as strings, enums as
// numbers).
type (
	exportRequest struct {
		ResourceSpans []resourceSpans `json:"resourceSpans"`
	}
	resourceSpans struct {
		Resource   resourceJSON `json:"resource"`
		ScopeSpans []scopeSpans `json:"scopeSpans"`
	}
	resourceJSON struct {
		Attributes []keyValue `json:"attributes"`
	}
	scopeSpans struct {
		Scope scopeJSON  `json:"scope"`
		Spans []spanJSON `json:"spans"`
	}
	scopeJSON struct {
		Name    string `json:"name"`
		Version string `json:"version,omitempty"`
	}
	spanJSON struct {
		TraceID           string     `json:"traceId"`
		SpanID            string     `json:"spanId"`
		ParentSpanID      string     `json:"parentSpanId,omitempty"`
		Name              string     `json:"name"`
		Kind              int        `json:"kind"`
		StartTimeUnixNano string     `json:"startTimeUnixNano"`
		EndTimeUnixNano   string     `json:"endTimeUnixNano"`
		Attributes        []keyValue `json:"attributes,omitempty"`
		Status            statusJSON `json:"status"`
	}
	statusJSON struct {
		Code    int    `json:"code,omitempty"`
		Message string `json:"message,omitempty"`
	}
	keyValue struct {
		Key   string   `json:"key"`
		Value anyValue `json:"value"`
	}
	anyValue struct {
		StringValue *string  `json:"stringValue,omitempty"`
		BoolValue   *bool    `json:"boolValue,omitempty"`
		IntValue    *string  `json:"intValue,omitempty"`
		DoubleValue *float64 `json:"doubleValue,omitempty"`
	}
)

func encodeSpans(spans []sdktrace.ReadOnlySpan) exportRequest {
	type key struct {
		res   string
		scope string
	}
	groups := map[key]*resourceSpans{}
	var order []key
	for _, s := range spans {
		k := key{s.Resource().String(), s.InstrumentationScope().Name}
		g, ok := groups[k]
		if !ok {
			g = &resourceSpans{
				Resource:   resourceJSON{Attributes: encodeAttrs(s.Resource().Attributes())},
				ScopeSpans: []scopeSpans{{Scope: scopeJSON{Name: s.InstrumentationScope().Name, Version: s.InstrumentationScope().Version}}},
			}
			groups[k] = g
			order = append(order, k)
		}
		sp := spanJSON{
			TraceID:           s.SpanContext().TraceID().String(),
			SpanID:            s.SpanContext().SpanID().String(),
			Name:              s.Name(),
			Kind:              int(s.SpanKind()), // the SDK's numbering matches OTLP's
			StartTimeUnixNano: strconv.FormatInt(s.StartTime().UnixNano(), 10),
			EndTimeUnixNano:   strconv.FormatInt(s.EndTime().UnixNano(), 10),
			Attributes:        encodeAttrs(s.Attributes()),
		}
		if s.Parent().SpanID().IsValid() {
			sp.ParentSpanID = s.Parent().SpanID().String()
		}
		switch s.Status().Code {
		case codes.Ok:
			sp.Status = statusJSON{Code: 1}
		case codes.Error:
			sp.Status = statusJSON{Code: 2, Message: s.Status().Description}
		}
		g.ScopeSpans[0].Spans = append(g.ScopeSpans[0].Spans, sp)
	}
	out := exportRequest{}
	for _, k := range order {
		out.ResourceSpans = append(out.ResourceSpans, *groups[k])
	}
	return out
}

func encodeAttrs(attrs []attribute.KeyValue) []keyValue {
	out := make([]keyValue, 0, len(attrs))
	for _, a := range attrs {
		var v anyValue
		switch a.Value.Type() {
		case attribute.BOOL:
			b := a.Value.AsBool()
			v.BoolValue = &b
		case attribute.INT64:
			i := strconv.FormatInt(a.Value.AsInt64(), 10)
			v.IntValue = &i
		case attribute.FLOAT64:
			f := a.Value.AsFloat64()
			v.DoubleValue = &f
		default:
			str := a.Value.Emit()
			v.StringValue = &str
		}
		out = append(out, keyValue{Key: string(a.Key), Value: v})
	}
	return out
}
