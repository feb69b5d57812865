package jetstream_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/internal/testenv"
	natsjs "github.com/mediaworker/mediaworker/jetstream"
	"github.com/mediaworker/mediaworker/pipeline"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestDLQListShowReplayPurge(t *testing.T) {
	var fail atomic.Bool
	fail.Store(true)
	r := newRig(t, func(c *natsjs.Config, _ *natsjs.WorkerConfig) { c.MaxDeliver = 1 },
		func(ctx context.Context, req contracts.Request, call int) pipeline.Outcome {
			if fail.Load() {
				return failure(req, pipeline.Retry, "uploading: store down")
			}
			return success(req)
		})
	stop := r.start()
	a, b := uuid.NewString(), uuid.NewString()
	r.publish(a)
	r.publish(b)
	r.awaitResponses(a, 1)
	r.awaitResponses(b, 1)
	stop()

	ctx := context.Background()
	d := natsjs.NewDLQ(r.js, r.cfg)
	list, err := d.List(ctx, 0)
	if err != nil || len(list) != 2 {
		t.Fatalf("list: %v, %d entries", err, len(list))
	}
	if list[0].MediaID != a { // the two jobs ran side by side: either may have been dead-lettered first
		list[0], list[1] = list[1], list[0]
	}
	if list[0].MediaID != a || list[0].Reason != "max-deliveries" || list[0].Deliveries != 1 || list[0].LastError != "uploading: store down" {
		t.Fatalf("entry: %+v", list[0])
	}

	// Replay after the cause is gone: the request runs again and succeeds; the entry is gone.
	fail.Store(false)
	r.start()
	if err := d.Replay(ctx, list[0].Seq); err != nil {
		t.Fatal(err)
	}
	got := r.awaitResponses(a, 2)
	if !got[1].Success {
		t.Fatalf("replayed request: %+v", got[1])
	}
	if _, err := d.Get(ctx, list[0].Seq); !errors.Is(err, natsjs.ErrNoSuchEntry) {
		t.Fatalf("replayed entry still there: %v", err)
	}
	n, err := d.Purge(ctx)
	if err != nil || n != 1 {
		t.Fatalf("purge: %d, %v", n, err)
	}
	if list, _ := d.List(ctx, 0); len(list) != 0 {
		t.Fatalf("after purge: %d entries", len(list))
	}
}

// A request whose worker died on its last delivery is moved by the advisory safety net.
func TestMaxDeliveriesAdvisoryMovesOrphanToDLQ(t *testing.T) {
	r := newRig(t, func(c *natsjs.Config, _ *natsjs.WorkerConfig) {
		c.MaxDeliver = 2
		c.AckWait = time.Second
	}, func(ctx context.Context, req contracts.Request, call int) pipeline.Outcome {
		t.Error("the worker must not process an exhausted request")
		return success(req)
	})
	id := uuid.NewString()
	r.publish(id)
	// Two "workers" take the request and die without a word.
	ctx := context.Background()
	r.deliverUnacked(2)
	r.start()
	got := r.awaitResponses(id, 1)
	if got[0].Success || !strings.Contains(got[0].Error, "gave up after 2 deliveries") {
		t.Fatalf("response: %+v", got[0])
	}
	r.awaitEmptyWorkQueue()
	list, err := natsjs.NewDLQ(r.js, r.cfg).List(ctx, 0)
	if err != nil || len(list) != 1 {
		t.Fatalf("dlq: %v %d", err, len(list))
	}
	var req contracts.Request
	if json.Unmarshal(list[0].Payload, &req) != nil || req.MediaID != id || list[0].Reason != "max-deliveries" {
		t.Fatalf("dead letter: %+v", list[0])
	}
}

// A request settled on its last delivery whose ack was lost (here: triage routed it, then two
// deliveries went unacknowledged) must not be given up by the advisory path: that would answer the API a
// second time, the opposite way. The settled-requests memory says it is done; it is only removed.
func TestMaxDeliveriesAdvisoryLeavesASettledRequestAlone(t *testing.T) {
	r := newRig(t, func(c *natsjs.Config, _ *natsjs.WorkerConfig) {
		c.MaxDeliver = 2
		c.AckWait = time.Second
	}, func(ctx context.Context, req contracts.Request, call int) pipeline.Outcome {
		t.Error("the worker must not process an exhausted request")
		return success(req)
	})
	id := uuid.NewString()
	r.publish(id)
	ctx := context.Background()
	kv, err := r.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: r.cfg.Buckets().Settled()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "1", []byte("routed")); err != nil { // request stream sequence 1
		t.Fatal(err)
	}
	r.deliverUnacked(2)
	r.start()
	r.awaitEmptyWorkQueue()
	if n := r.streamMsgs(r.cfg.ResponsesStream()); n != 0 {
		t.Fatalf("%d responses for a request that was settled already", n)
	}
	if n := r.streamMsgs(r.cfg.DLQStream()); n != 0 {
		t.Fatalf("%d dead letters for a request that was settled already", n)
	}
}

// deliverUnacked takes the oldest request from triage's consumer n times and never answers: workers
// that die without a word, until MaxDeliver is spent.
func (r *rig) deliverUnacked(n int) {
	r.t.Helper()
	cons, err := r.js.Consumer(context.Background(), r.cfg.RequestsStream(), r.cfg.Durable)
	if err != nil {
		r.t.Fatal(err)
	}
	for i := range n {
		if _, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second)); err != nil {
			r.t.Fatalf("delivery %d: %v", i+1, err)
		}
	}
}

func TestMaxQueuedRefusesPublishes(t *testing.T) {
	r := newRig(t, func(c *natsjs.Config, _ *natsjs.WorkerConfig) { c.MaxQueued = 2 }, nil)
	r.publish(uuid.NewString())
	r.publish(uuid.NewString())
	data, _ := json.Marshal(contracts.Request{S3Key: "a.jpg", S3Bucket: "media", MediaID: uuid.NewString(), MediaURL: "https://a/1"})
	if _, err := r.js.Publish(context.Background(), r.cfg.Subjects().Request, data); err == nil {
		t.Fatal("a third request was accepted by a queue capped at 2")
	}
}

// publishGuarded publishes a request the way a careful API does: with Nats-Expected-Stream, a trace
// context and its own Nats-Msg-Id. None of the Nats-* headers may reach the DLQ copy (the DLQ stream
// would refuse it for ever); the trace context and the original msg id (as Mw-Msg-Id) do.
func (r *rig) publishGuarded(id string) {
	r.t.Helper()
	req := contracts.Request{S3Key: "u/a.jpg", S3Bucket: "media", MediaID: id, MediaURL: "https://api.example/m/" + id}
	data, _ := json.Marshal(req)
	m := nats.NewMsg(r.cfg.Subjects().Request)
	m.Data = data
	m.Header.Set("Traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	m.Header.Set("X-Internal", "not copied")
	if _, err := r.js.PublishMsg(context.Background(), m, jetstream.WithMsgID(id), jetstream.WithExpectStream(r.cfg.RequestsStream())); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rig) checkGuardedDeadLetter(id string) {
	r.t.Helper()
	r.awaitEmptyWorkQueue()
	got := r.awaitResponses(id, 1)
	if got[0].Success || !strings.Contains(got[0].Error, "gave up after") {
		r.t.Fatalf("response: %+v", got[0])
	}
	list, err := natsjs.NewDLQ(r.js, r.cfg).List(context.Background(), 0)
	if err != nil || len(list) != 1 {
		r.t.Fatalf("dlq: %v, %d entries, want 1", err, len(list))
	}
	h := list[0].Header
	if list[0].MediaID != id || h.Get(natsjs.HeaderMsgID) != id || h.Get("Traceparent") == "" {
		r.t.Fatalf("dead letter: %+v", list[0])
	}
	for k := range h {
		if strings.HasPrefix(strings.ToLower(k), "nats-expected") || k == "X-Internal" {
			r.t.Fatalf("dead letter carries %s: %v", k, h)
		}
	}
	// Exactly one answer: both were published before the request left the work queue.
	if n := len(r.awaitResponses(id, 1)); n != 1 {
		r.t.Fatalf("%d responses published, want 1", n)
	}
	if n := r.streamMsgs(r.cfg.ResponsesStream()); n != 1 {
		r.t.Fatalf("%d responses stored, want 1", n)
	}
}

// Issue 10: a request published with Nats-Expected-Stream whose last delivery fails is answered once
// and copied once to the DLQ, by the worker itself ...
func TestGuardedRequestGivesUpIntoDLQ(t *testing.T) {
	r := newRig(t, func(c *natsjs.Config, _ *natsjs.WorkerConfig) { c.MaxDeliver = 2 },
		func(ctx context.Context, req contracts.Request, call int) pipeline.Outcome {
			return failure(req, pipeline.Retry, "scanning: clamd down")
		})
	r.start()
	id := uuid.NewString()
	r.publishGuarded(id)
	r.checkGuardedDeadLetter(id)
}

// ... and by the max-deliveries advisory when the worker died on the last delivery.
func TestGuardedOrphanGivesUpIntoDLQ(t *testing.T) {
	r := newRig(t, func(c *natsjs.Config, _ *natsjs.WorkerConfig) {
		c.MaxDeliver = 1
		c.AckWait = time.Second
	}, func(ctx context.Context, req contracts.Request, call int) pipeline.Outcome {
		t.Error("the worker must not process an exhausted request")
		return success(req)
	})
	id := uuid.NewString()
	r.publishGuarded(id)
	cons, err := r.js.Consumer(context.Background(), r.cfg.RequestsStream(), r.cfg.Durable)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second)); err != nil {
		t.Fatal(err) // the "worker" dies without a word
	}
	r.start()
	r.checkGuardedDeadLetter(id)
}

// A webhook delivery that outlived its retries is in the DLQ too, but its payload is an answer: replay
// refuses it rather than publishing an answer as a request.
func TestDLQReplayRefusesWebhookEntries(t *testing.T) {
	js, err := jetstream.New(testenv.Connect(t, testenv.StartNATS(t)))
	if err != nil {
		t.Fatal(err)
	}
	cfg := natsjs.DefaultConfig()
	ctx := context.Background()
	if err := natsjs.Provision(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg(cfg.Subjects().DLQ)
	m.Data = []byte(`{"mediaId":"00000000-0000-4000-8000-000000000000","success":true}`)
	m.Header.Set(contracts.HeaderWebhookEndpoint, "api")
	ack, err := js.PublishMsg(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	d := natsjs.NewDLQ(js, cfg)
	if err := d.Replay(ctx, ack.Sequence); !errors.Is(err, natsjs.ErrNotReplayable) {
		t.Fatalf("replay of a webhook entry: %v", err)
	}
	if _, err := d.Get(ctx, ack.Sequence); err != nil {
		t.Fatalf("the entry should still be there: %v", err)
	}
}
