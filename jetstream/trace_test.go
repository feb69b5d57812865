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
	m.Data, _ = json.Marshal(contracts.Request{S3Key: "a.jpg", S3Bucket: "media", MediaID: id, MediaURL: "https://a/1"})
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

	// One "process event" span per delivery: triage's, parented by the API's context, and the lane's,
	// parented by triage's publish to the lane. Each ends after its ack, a moment after its publish.
	var spans tracetest.SpanStubs
	var events []tracetest.SpanStub
	testenv.Eventually(t, 5*time.Second, func() error {
		spans, events = exp.GetSpans(), nil
		for _, s := range spans {
			if s.Name == "process event" {
				events = append(events, s)
			}
		}
		if len(events) < 2 {
			return fmt.Errorf("%d spans, %d of them process event; want triage's and the lane's", len(spans), len(events))
		}
		return nil
	})
	bySpan := map[trace.SpanID]tracetest.SpanStub{}
	traces := map[trace.TraceID]bool{}
	for _, s := range spans {
		bySpan[s.SpanContext.SpanID()] = s
		traces[s.SpanContext.TraceID()] = true
	}
	if len(traces) != 1 {
		t.Fatalf("spans of one request spread over %d traces", len(traces))
	}
	triage, lane := events[0], events[1]
	if triage.Parent.SpanID().String() != parentID {
		triage, lane = lane, triage
	}
	if triage.Parent.SpanID().String() != parentID || triage.SpanContext.TraceID().String() != traceID {
		t.Fatalf("triage's process event span: trace %s parent %s; want %s and %s", triage.SpanContext.TraceID(), triage.Parent.SpanID(), traceID, parentID)
	}
	route, ok := bySpan[lane.Parent.SpanID()]
	if !ok || route.Name != "publish "+r.cfg.Lane(pipeline.Image).WorkSubject() || route.Parent.SpanID() != triage.SpanContext.SpanID() {
		t.Fatalf("the lane's process event is not a child of triage's publish to the lane: parent %q", route.Name)
	}
	for _, name := range []string{"transforming", "publish " + r.cfg.Subjects().Response} {
		found := false
		for _, s := range spans {
			found = found || s.Name == name && s.Parent.SpanID() == lane.SpanContext.SpanID()
		}
		if !found {
			t.Errorf("span %q missing or not a child of the lane's process event", name)
		}
	}
}
