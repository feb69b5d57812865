package jetstream_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/pipeline"
)

// Issue 24 item 4: a response that cannot be published (larger than the server's max payload) is
// answered with a short failure, not handed back to be redone on every delivery and end as "stopped
// answering". The job runs once; the API hears one failure naming the size.
func TestUnpublishableResponseIsAnsweredShortNotRedone(t *testing.T) {
	huge := strings.Repeat("x", 1<<20)
	r := newRig(t, nil, func(ctx context.Context, req contracts.Request, call int) pipeline.Outcome {
		out := success(req)
		out.Response.OriginalURL += "?" + huge // as a success's answer echoes a long mediaUrl
		return out
	})
	r.start()
	id := uuid.NewString()
	r.publish(id)
	got := r.awaitResponses(id, 1)
	r.awaitEmptyWorkQueue()
	if got[0].Success || !strings.Contains(got[0].Error, "over the NATS server's limit") || len(got[0].OriginalURL) > 100 {
		t.Fatalf("answer: success=%v error=%q originalUrl %d bytes; want a short failure naming the limit", got[0].Success, got[0].Error, len(got[0].OriginalURL))
	}
	r.proc.mu.Lock()
	n := r.proc.calls[id]
	r.proc.mu.Unlock()
	if n != 1 {
		t.Errorf("the job ran %d times, want once", n)
	}
	if n := r.streamMsgs(r.cfg.ResponsesStream()); n != 1 {
		t.Errorf("%d responses stored, want 1", n)
	}
}
