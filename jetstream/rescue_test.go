package jetstream_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/internal/testenv"
	natsjs "github.com/mediaworker/mediaworker/jetstream"
	"github.com/mediaworker/mediaworker/pipeline"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// Stranded work (rescue.go): messages still stored that their consumer will never deliver again are
// planted here the way the server leaves them, and a worker started afterwards settles each once.

// rescues records what the worker told its Observer about rescues.
type rescues struct {
	mu      sync.Mutex
	actions []string // lane/action
	done    chan struct{}
	once    sync.Once
}

func newRescues() *rescues { return &rescues{done: make(chan struct{})} }

func (o *rescues) Settled(string, pipeline.MediaKind, uint64) {}
func (o *rescues) Published(string, time.Duration)            {}
func (o *rescues) PublishFailed(string)                       {}
func (o *rescues) Rescued(lane pipeline.MediaKind, action string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.actions = append(o.actions, string(lane)+"/"+action)
	o.once.Do(func() { close(o.done) })
}

func (o *rescues) list() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.actions...)
}

// startObserved runs a worker with obs until the test ends.
func (r *rig) startObserved(obs natsjs.Observer) {
	r.t.Helper()
	w, err := natsjs.NewWorker(r.js, r.cfg, r.wcfg, r.proc, obs, zerolog.New(io.MultiWriter(zerolog.NewTestWriter(r.t), r)))
	if err != nil {
		r.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = w.Run(ctx); close(done) }()
	r.t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			r.t.Error("worker did not stop")
		}
	})
}

// triageByHand does what triage does to a request, without a worker: it takes the request from
// triage's consumer, stores its copy for lane and acks the request (unless ack is false). It returns
// the request's and the copy's stream sequences.
func (r *rig) triageByHand(id, key string, lane pipeline.MediaKind, ack bool) (reqSeq, copySeq uint64) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r.publishKey(id, key)
	msg := r.fetchOne(r.cfg.Durable)
	meta, err := msg.Metadata()
	if err != nil {
		r.t.Fatal(err)
	}
	m := nats.NewMsg(r.cfg.Lane(lane).WorkSubject())
	m.Data = msg.Data()
	m.Header.Set(natsjs.HeaderRequestSeq, strconv.FormatUint(meta.Sequence.Stream, 10))
	m.Header.Set(natsjs.HeaderPublishedAt, meta.Timestamp.UTC().Format(time.RFC3339Nano))
	pa, err := r.js.PublishMsg(ctx, m)
	if err != nil {
		r.t.Fatal(err)
	}
	if ack {
		if err := msg.DoubleAck(ctx); err != nil {
			r.t.Fatal(err)
		}
	}
	return meta.Sequence.Stream, pa.Sequence
}

// fetchOne takes one message from durable and leaves it unacked.
func (r *rig) fetchOne(durable string) jetstream.Msg {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := r.js.Consumer(ctx, r.cfg.RequestsStream(), durable)
	if err != nil {
		r.t.Fatal(err)
	}
	msg, err := cons.Next(jetstream.FetchContext(ctx))
	if err != nil {
		r.t.Fatalf("fetching from %s: %v", durable, err)
	}
	return msg
}

// skipPast resets durable to start after seq (nats-server's consumer reset): what it had delivered
// and not settled is forgotten, as by a consumer whose state lost its pending entries in a crash.
func (r *rig) skipPast(durable string, seq uint64) {
	r.t.Helper()
	req, _ := json.Marshal(map[string]uint64{"seq": seq + 1})
	reply, err := r.nc.Request(fmt.Sprintf("$JS.API.CONSUMER.RESET.%s.%s", r.cfg.RequestsStream(), durable), req, 10*time.Second)
	if err != nil {
		r.t.Fatal(err)
	}
	var resp struct {
		Error *struct{ Description string } `json:"error"`
	}
	if err := json.Unmarshal(reply.Data, &resp); err != nil || resp.Error != nil {
		r.t.Fatalf("resetting %s: %s %v", durable, reply.Data, err)
	}
}

// awaitStranded waits until durable has nothing pending and has delivered past seq while the stream
// still holds seq: the state of issue 25.
func (r *rig) awaitStranded(durable string, seq uint64) {
	r.t.Helper()
	testenv.Eventually(r.t, 20*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		cons, err := r.js.Consumer(ctx, r.cfg.RequestsStream(), durable)
		if err != nil {
			return err
		}
		info, err := cons.Info(ctx)
		if err != nil {
			return err
		}
		if info.NumAckPending != 0 || info.Delivered.Stream < seq {
			return fmt.Errorf("%s: delivered stream %d, ack pending %d", durable, info.Delivered.Stream, info.NumAckPending)
		}
		s, err := r.js.Stream(ctx, r.cfg.RequestsStream())
		if err != nil {
			return err
		}
		if _, err := s.GetMsg(ctx, seq); err != nil {
			r.t.Fatalf("message %d is gone: %v", seq, err)
		}
		return nil
	})
}

func (r *rig) dlqMsgs() uint64 { return r.streamMsgs(r.cfg.DLQStream()) }

// The state, made by the server itself: a lane copy delivered on its only delivery (MaxDeliver
// 1) whose worker went silent, while the advisory capture was missing, so the consumer gave it up
// without anyone hearing. A worker started later gives it up once (response and dead letter) within
// its start-up look and the confirmation; a job in flight on the other lane meanwhile is left alone.
func TestStrandedLaneCopyIsGivenUpOnce(t *testing.T) {
	t.Parallel()
	stranded, busy := uuid.NewString(), uuid.NewString()
	obs := newRescues()
	r := newRig(t, func(c *natsjs.Config, w *natsjs.WorkerConfig) {
		c.MaxDeliver, c.AckWait = 1, time.Second
		w.RescueEvery = time.Second
	}, func(ctx context.Context, req contracts.Request, call int) pipeline.Outcome {
		if req.MediaID == busy {
			// In flight through the rescue: a message pending on its consumer is never taken.
			select {
			case <-obs.done:
			case <-ctx.Done():
			}
		}
		return success(req)
	})
	ctx := context.Background()
	if err := r.js.DeleteStream(ctx, r.cfg.AdvisoryCapture().Stream()); err != nil {
		t.Fatal(err)
	}
	_, seq := r.triageByHand(stranded, "u/v.mp4", pipeline.Video, true)
	_ = r.fetchOne(r.cfg.Lane(pipeline.Video).Durable()) // its worker dies: never acked
	r.awaitStranded(r.cfg.Lane(pipeline.Video).Durable(), seq)
	if err := natsjs.Provision(ctx, r.js, r.cfg); err != nil { // the advisory capture is back: too late
		t.Fatal(err)
	}

	r.publish(busy)
	began := time.Now()
	r.startObserved(obs)
	got := r.awaitResponses(stranded, 1)
	if got[0].Success || !strings.Contains(got[0].Error, "stranded") {
		t.Fatalf("response %+v, want a failure saying it gave up a stranded request", got[0])
	}
	t.Logf("answered %s after the start", time.Since(began).Round(100*time.Millisecond))
	if got := r.awaitResponses(busy, 1); !got[0].Success {
		t.Fatalf("the job in flight: %+v", got[0])
	}
	r.awaitEmptyWorkQueue()
	if n := r.dlqMsgs(); n != 1 {
		t.Errorf("%d dead letters, want 1", n)
	}
	if got := obs.list(); len(got) != 1 || got[0] != "video/gave_up" {
		t.Errorf("rescues %v, want [video/gave_up]", got)
	}
	if n := r.streamMsgs(r.cfg.ResponsesStream()); n != 2 {
		t.Errorf("%d responses stored, want one each", n)
	}
}

// With deliveries left, a stranded lane copy is handed back: a copy is stored and run, and the request
// is answered once by its job. Two instances find it at the same moment; one of them rescues it.
func TestStrandedLaneCopyWithDeliveriesLeftIsRetried(t *testing.T) {
	t.Parallel()
	id := uuid.NewString()
	obs := newRescues()
	r := newRig(t, func(c *natsjs.Config, w *natsjs.WorkerConfig) { w.RescueEvery = time.Second },
		func(ctx context.Context, req contracts.Request, call int) pipeline.Outcome { return success(req) })
	_, seq := r.triageByHand(id, "u/a.jpg", pipeline.Image, true)
	_ = r.fetchOne(r.cfg.Lane(pipeline.Image).Durable())
	r.skipPast(r.cfg.Lane(pipeline.Image).Durable(), seq)
	r.awaitStranded(r.cfg.Lane(pipeline.Image).Durable(), seq)

	r.startObserved(obs)
	r.startObserved(obs)
	if got := r.awaitResponses(id, 1); !got[0].Success {
		t.Fatalf("response %+v, want the job's success", got[0])
	}
	r.awaitEmptyWorkQueue()
	// The rescuer reports after publishing the copy and removing the original, and the copy's job can
	// finish first.
	select {
	case <-obs.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the rescue was not reported within 10s of the job's answer")
	}
	if got := obs.list(); len(got) != 1 || got[0] != "image/retried" {
		t.Errorf("rescues %v, want [image/retried]", got)
	}
	if n := r.proc.callsOf(id); n != 1 {
		t.Errorf("the job ran %d times, want 1", n)
	}
	if n := r.dlqMsgs(); n != 0 {
		t.Errorf("%d dead letters, want none", n)
	}
	if n := r.streamMsgs(r.cfg.ResponsesStream()); n != 1 {
		t.Errorf("%d responses stored, want 1", n)
	}
}

// A stranded request whose lane copy is stored (triage routed it and died before its ack) is only
// removed: its lane answers it, once.
func TestStrandedRoutedRequestIsOnlyRemoved(t *testing.T) {
	t.Parallel()
	id := uuid.NewString()
	obs := newRescues()
	release := make(chan struct{})
	r := newRig(t, func(c *natsjs.Config, w *natsjs.WorkerConfig) { w.RescueEvery = time.Second },
		func(ctx context.Context, req contracts.Request, call int) pipeline.Outcome {
			select { // the lane copy is still stored when the rescue looks
			case <-release:
			case <-ctx.Done():
			}
			return success(req)
		})
	reqSeq, _ := r.triageByHand(id, "u/a.jpg", pipeline.Image, false)
	r.skipPast(r.cfg.Durable, reqSeq)
	r.awaitStranded(r.cfg.Durable, reqSeq)

	r.startObserved(obs)
	select {
	case <-obs.done:
	case <-time.After(60 * time.Second):
		t.Fatal("the stranded request was not rescued within a minute")
	}
	close(release)
	if got := r.awaitResponses(id, 1); !got[0].Success {
		t.Fatalf("response %+v, want the lane's success", got[0])
	}
	r.awaitEmptyWorkQueue()
	if got := obs.list(); len(got) != 1 || got[0] != "/removed" {
		t.Errorf("rescues %v, want [/removed]", got)
	}
	if n := r.streamMsgs(r.cfg.ResponsesStream()); n != 1 {
		t.Errorf("%d responses stored, want 1", n)
	}
}
