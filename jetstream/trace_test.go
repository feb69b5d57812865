package jetstream_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/pipeline"
	"github.com/mediaworker/mediaworker/tracing"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

func TestTraceContextFlowsFromRequestToResponse(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	if _, err := tracing.Setup(context.Background(), "test"); err != nil { // installs the W3C propagator
		t.Fatal(err)
	}
	t.Cleanup(func() { otel.SetTracerProvider(prev); _ = tp.Shutdown(context.Background()) })

	r := newRig(t, nil, func(ctx context.Context, req contracts.Request, call int) pipeline.Outcome {
		_, span := tracing.Tracer().Start(ctx, "transforming") // as the pipeline's steps do
		span.End()
		return success(req)
	})
	traced := make(chan *nats.Msg, 1)
	sub, err := r.nc.Subscribe(r.cfg.Subjects().Response, func(m *nats.Msg) { traced <- m })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	r.start()

	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	id := uuid.NewString()
	m := nats.NewMsg(r.cfg.Subjects().Request)
	m.Header.Set("traceparent", "00-"+traceID+"-"+parentID+"-01")
	m.Data, _ = json.Marshal(contracts.Request{S3Key: "a.jpg", S3Bucket: "m", MediaID: id, MediaURL: "https://a/1"})
	if _, err := r.js.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	var resp *nats.Msg
	select {
	case resp = <-traced:
	case <-time.After(20 * time.Second):
		t.Fatal("no response")
	}
	if tp := resp.Header.Get("traceparent"); !strings.HasPrefix(tp, "00-"+traceID+"-") {
		t.Fatalf("response traceparent %q does not continue trace %s", tp, traceID)
	}

	// The delivery's span ends after the ack, a moment after the response is out.
	var spans tracetest.SpanStubs
	testenv.Eventually(t, 5*time.Second, func() error {
		spans = exp.GetSpans()
		for _, s := range spans {
			if s.Name == "process event" {
				return nil
			}
		}
		return fmt.Errorf("%d spans, none of them process event", len(spans))
	})
	byName := map[string]tracetest.SpanStub{}
	traces := map[trace.TraceID]bool{}
	for _, s := range spans {
		byName[s.Name] = s
		traces[s.SpanContext.TraceID()] = true
	}
	root, ok := byName["process event"]
	if !ok {
		t.Fatalf("no process event span among %d spans", len(spans))
	}
	if root.Parent.SpanID().String() != parentID || root.SpanContext.TraceID().String() != traceID {
		t.Fatalf("process event span: trace %s parent %s; want %s and %s", root.SpanContext.TraceID(), root.Parent.SpanID(), traceID, parentID)
	}
	if len(traces) != 1 {
		t.Fatalf("spans of one request spread over %d traces", len(traces))
	}
	for _, name := range []string{"transforming", "publish " + r.cfg.Subjects().Response} {
		s, ok := byName[name]
		if !ok || s.Parent.SpanID() != root.SpanContext.SpanID() {
			t.Errorf("span %q missing or not a child of process event", name)
		}
	}
}
