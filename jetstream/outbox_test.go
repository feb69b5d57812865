package jetstream_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

// Issue 10 item 4, the gap the 10-minute accounting run found: a worker that dies after publishing an
// outcome and before recording it settled. Its redelivery comes past the duplicate window; the outbox
// it recorded before publishing says what it owed, and the stored response says it was paid. The job
// must not run again and no second response may be stored.
func TestInterruptedSettlementIsFinishedNotRunAgain(t *testing.T) {
	r := newRig(t, func(c *natsjs.Config, _ *natsjs.WorkerConfig) { c.DuplicateWindow = time.Second },
		func(ctx context.Context, req contracts.Request, call int) pipeline.Outcome { return success(req) })
	r.start()
	id := uuid.NewString()
	r.publish(id)
	r.awaitResponses(id, 1)
	r.awaitEmptyWorkQueue()

	// The memory as the dead worker left it: its outbox, listing the response that reached the stream.
	stored := r.lastMsg(r.cfg.ResponsesStream())
	reqSeq := r.lastSeq(r.cfg.RequestsStream()) - 1 // request 1, its route 2
	r.putOutbox(reqSeq, stored.Time, "", outboxEvent{Subject: stored.Subject, Data: stored.Data, ID: stored.Header.Get(jetstream.MsgIDHeader)})

	r.publishLateRoute(id, reqSeq)
	r.awaitEmptyWorkQueue()
	if n := r.proc.callsOf(id); n != 1 {
		t.Fatalf("the redelivery ran the job again: %d runs", n)
	}
	if n := r.streamMsgs(r.cfg.ResponsesStream()); n != 1 {
		t.Fatalf("%d responses stored, want 1", n)
	}
	r.awaitSettled(reqSeq, "final")
}

// The same worker died after recording its outbox and before its first publish got through: the next
// delivery publishes what the outbox owed (the job's work is done: variants uploaded, an infected
// upload deleted) instead of running the job again.
func TestInterruptedSettlementPublishesWhatItOwed(t *testing.T) {
	r := newRig(t, nil, func(ctx context.Context, req contracts.Request, call int) pipeline.Outcome {
		t.Error("the job ran again although its outcome was in the outbox")
		return success(req)
	})
	id := uuid.NewString()
	r.publish(id)
	owed := contracts.Response{MediaID: id, Success: true, OriginalURL: "https://api.example/m/" + id,
		Processed: []contracts.Variant{{Quality: "high", URL: "http://127.0.0.1:1/objects/media/x.webp", Format: "webp", Width: 4, Height: 3, Size: 10}}}
	data, _ := json.Marshal(owed)
	respID := fmt.Sprintf("%s/1/success", id)
	r.putOutbox(1, time.Now().Add(-10*time.Minute), "", outboxEvent{Subject: r.cfg.Subjects().Response, Data: data, ID: respID})
	r.deliverUnacked(1) // the delivery that died
	r.start()
	got := r.awaitResponses(id, 1)
	r.awaitEmptyWorkQueue()
	if !got[0].Success || len(got[0].Processed) != 1 || got[0].Processed[0].Quality != "high" {
		t.Fatalf("published %+v, want the outbox's response", got[0])
	}
	if m := r.lastMsg(r.cfg.ResponsesStream()); m.Header.Get(jetstream.MsgIDHeader) != respID {
		t.Fatalf("stored under id %q, want %q (the outcome's own id)", m.Header.Get(jetstream.MsgIDHeader), respID)
	}
	r.awaitSettled(1, "final")
}

// The max-deliveries advisory of a request whose last delivery died mid-settlement: it must finish that
// settlement (a failure that was already on its way to the API) rather than dead-letter the request and
// answer a second time, the opposite way.
func TestAdvisoryFinishesAnInterruptedSettlement(t *testing.T) {
	r := newRig(t, func(c *natsjs.Config, _ *natsjs.WorkerConfig) {
		c.MaxDeliver = 2
		c.AckWait = time.Second
	}, func(ctx context.Context, req contracts.Request, call int) pipeline.Outcome {
		t.Error("the worker must not process an exhausted request")
		return success(req)
	})
	id := uuid.NewString()
	r.publish(id)
	data, _ := json.Marshal(contracts.Response{MediaID: id, Success: false, Error: "unsupported media type: application/pdf",
		OriginalURL: "https://api.example/m/" + id})
	r.putOutbox(1, time.Now().Add(-time.Minute), "unsupported media type: application/pdf",
		outboxEvent{Subject: r.cfg.Subjects().Response, Data: data, ID: id + "/1/failed"})
	r.deliverUnacked(2)
	r.start()
	got := r.awaitResponses(id, 1)
	r.awaitEmptyWorkQueue()
	if got[0].Success || got[0].Error != "unsupported media type: application/pdf" {
		t.Fatalf("published %+v, want the outbox's failure", got[0])
	}
	if n := r.streamMsgs(r.cfg.DLQStream()); n != 0 {
		t.Fatalf("%d dead letters for a request whose failure was being published", n)
	}
	if n := r.streamMsgs(r.cfg.ResponsesStream()); n != 1 {
		t.Fatalf("%d responses stored, want 1", n)
	}
	r.awaitSettled(1, "final")
}

// outboxEvent and the record below are the settled-requests memory's stored form (jetstream/outbox.go):
// records written by one version are read by the next, so the test writes them as bytes.
type outboxEvent struct {
	Subject string      `json:"subject"`
	Header  nats.Header `json:"header,omitempty"`
	Data    []byte      `json:"data"`
	ID      string      `json:"id"`
}

func (r *rig) putOutbox(reqSeq uint64, at time.Time, term string, evs ...outboxEvent) {
	r.t.Helper()
	v, _ := json.Marshal(struct {
		At     time.Time     `json:"at"`
		Events []outboxEvent `json:"events"`
		Term   string        `json:"term,omitempty"`
	}{at, evs, term})
	kv, err := r.js.CreateOrUpdateKeyValue(context.Background(), jetstream.KeyValueConfig{Bucket: r.cfg.Buckets().Settled()})
	if err != nil {
		r.t.Fatal(err)
	}
	if _, err := kv.Put(context.Background(), fmt.Sprint(reqSeq), v); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rig) awaitSettled(reqSeq uint64, want string) {
	r.t.Helper()
	kv, err := r.js.KeyValue(context.Background(), r.cfg.Buckets().Settled())
	if err != nil {
		r.t.Fatal(err)
	}
	testenv.Eventually(r.t, 10*time.Second, func() error {
		e, err := kv.Get(context.Background(), fmt.Sprint(reqSeq))
		if err != nil {
			return err
		}
		if string(e.Value()) != want {
			return fmt.Errorf("request %d recorded as %.60q, want %q", reqSeq, e.Value(), want)
		}
		return nil
	})
}

func (r *rig) lastSeq(stream string) uint64 {
	r.t.Helper()
	s, err := r.js.Stream(context.Background(), stream)
	if err != nil {
		r.t.Fatal(err)
	}
	return s.CachedInfo().State.LastSeq
}

func (r *rig) lastMsg(stream string) *jetstream.RawStreamMsg {
	r.t.Helper()
	s, err := r.js.Stream(context.Background(), stream)
	if err != nil {
		r.t.Fatal(err)
	}
	m, err := s.GetMsg(context.Background(), s.CachedInfo().State.LastSeq)
	if err != nil {
		r.t.Fatal(err)
	}
	return m
}

// publishLateRoute stores a second copy of triage's route of request reqSeq once the duplicate window
// has passed, as when triage's ack was lost and the request was routed again.
func (r *rig) publishLateRoute(id string, reqSeq uint64) {
	r.t.Helper()
	m := nats.NewMsg(r.cfg.Lane(pipeline.Image).WorkSubject())
	m.Data, _ = json.Marshal(contracts.Request{S3Key: "u/a.jpg", S3Bucket: "media", MediaID: id, MediaURL: "https://api.example/m/" + id})
	m.Header.Set(natsjs.HeaderRequestSeq, fmt.Sprint(reqSeq))
	// Triage's own id ends in a digest of the request's stored time (routeID); any id past the window
	// stands for it: what counts is that the stream stores the second copy.
	routeID := fmt.Sprintf("route/%s/%d/image/late", r.cfg.RequestsStream(), reqSeq)
	testenv.Eventually(r.t, 10*time.Second, func() error {
		ack, err := r.js.PublishMsg(context.Background(), m, jetstream.WithMsgID(routeID))
		if err != nil {
			return err
		}
		if ack.Duplicate {
			return errors.New("still inside the duplicate window")
		}
		return nil
	})
}

// The 10-minute run found this one: a refused request (here an s3Key with "..") whose worker died after
// publishing the refusal. Its redelivery, past the duplicate window, must find the outbox before it is
// refused again.
func TestInterruptedRefusalIsNotAnsweredTwice(t *testing.T) {
	r := newRig(t, func(c *natsjs.Config, _ *natsjs.WorkerConfig) { c.DuplicateWindow = time.Second },
		func(ctx context.Context, req contracts.Request, call int) pipeline.Outcome {
			t.Error("a refused request reached the pipeline")
			return success(req)
		})
	id := uuid.NewString()
	testenv.PublishRequest(t, r.js, r.cfg.Subjects().Request,
		contracts.Request{S3Key: "u/../a.jpg", S3Bucket: "media", MediaID: id, MediaURL: "https://api.example/m/" + id})
	// What the dead worker recorded and published before it died.
	refusal, _ := json.Marshal(contracts.Response{MediaID: id, OriginalURL: "https://api.example/m/" + id,
		Error: `invalid request: s3Key has a ".." path segment`})
	ev := outboxEvent{Subject: r.cfg.Subjects().Response, Data: refusal, ID: id + "/1/failed"}
	r.putOutbox(1, time.Now(), `invalid request: s3Key has a ".." path segment`, ev)
	m := nats.NewMsg(ev.Subject)
	m.Data = ev.Data
	if _, err := r.js.PublishMsg(context.Background(), m, jetstream.WithMsgID(ev.ID)); err != nil {
		t.Fatal(err)
	}
	r.deliverUnacked(1) // its delivery; the redelivery comes an AckWait (2 s) later, past the 1 s window
	r.start()
	r.awaitEmptyWorkQueue()
	r.awaitSettled(1, "final")
	if n := r.streamMsgs(r.cfg.ResponsesStream()); n != 1 {
		t.Fatalf("%d responses stored for one refused request, want 1", n)
	}
}
