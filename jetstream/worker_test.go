package jetstream_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
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
	"github.com/rs/zerolog"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// nats.go and the in-process server keep a few process-wide goroutines.
		goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*Server).startGoRoutine.func1"),
		goleak.IgnoreTopFunction("time.Sleep"),
		goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*ipQueue[...]).push"),
		testenv.UpstreamLeaks()[0],
	)
}

// scripted is a Processor whose outcome per call is decided by the test. The ack layer is pure logic
// over a real JetStream server; the real pipeline is exercised end to end in package app. Triage
// routes a key ending in .mp4 to the video lane and everything else to the image lane.
type scripted struct {
	mu     sync.Mutex
	calls  map[string]int
	lanes  map[string][]pipeline.MediaKind // the lanes each request ran in
	fn     func(ctx context.Context, req contracts.Request, call int) pipeline.Outcome
	triage func(req contracts.Request) pipeline.Outcome // nil: by the key's extension
}

func (s *scripted) Triage(ctx context.Context, req contracts.Request) pipeline.Outcome {
	if s.triage != nil {
		return s.triage(req)
	}
	if strings.HasSuffix(req.S3Key, ".mp4") {
		return pipeline.Routed(pipeline.Video, "video/mp4")
	}
	return pipeline.Routed(pipeline.Image, "image/jpeg")
}

func (s *scripted) Process(ctx context.Context, req contracts.Request, lane pipeline.MediaKind) pipeline.Outcome {
	s.mu.Lock()
	s.calls[req.MediaID]++
	s.lanes[req.MediaID] = append(s.lanes[req.MediaID], lane)
	n := s.calls[req.MediaID]
	s.mu.Unlock()
	return s.fn(ctx, req, n)
}

func (s *scripted) lanesOf(id string) []pipeline.MediaKind {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]pipeline.MediaKind(nil), s.lanes[id]...)
}

func (s *scripted) callsOf(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[id]
}

type rig struct {
	t    *testing.T
	js   jetstream.JetStream
	nc   *nats.Conn
	cfg  natsjs.Config
	wcfg natsjs.WorkerConfig
	proc *scripted

	mu        sync.Mutex
	responses map[string][]contracts.Response
	logs      strings.Builder // the worker's log lines, for tests that wait for one
}

// logged reports whether the worker logged a line containing s.
func (r *rig) logged(s string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Contains(r.logs.String(), s)
}

// Write keeps the worker's log lines (rig is the worker's second log writer).
func (r *rig) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.logs.Write(p)
}

func newRig(t *testing.T, tweak func(*natsjs.Config, *natsjs.WorkerConfig), fn func(ctx context.Context, req contracts.Request, call int) pipeline.Outcome) *rig {
	t.Helper()
	srv := testenv.StartNATS(t)
	nc := testenv.Connect(t, srv)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	cfg, wcfg := natsjs.DefaultConfig(), natsjs.DefaultWorkerConfig()
	wcfg.Words = pipeline.Words
	cfg.AckWait = 2 * time.Second
	wcfg.BackoffBase, wcfg.BackoffMax = 100*time.Millisecond, 400*time.Millisecond
	wcfg.PullWait = time.Second
	if tweak != nil {
		tweak(&cfg, &wcfg)
	}
	if err := natsjs.Provision(context.Background(), js, cfg); err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, js: js, nc: nc, cfg: cfg, wcfg: wcfg, proc: &scripted{calls: map[string]int{}, lanes: map[string][]pipeline.MediaKind{}, fn: fn},
		responses: map[string][]contracts.Response{}}
	sub, err := nc.Subscribe(cfg.Subjects().Response, func(m *nats.Msg) {
		if err := contracts.ValidateJSON(contracts.SchemaResponse, m.Data); err != nil {
			t.Errorf("response does not match the schema: %v", err)
		}
		var resp contracts.Response
		_ = json.Unmarshal(m.Data, &resp)
		r.mu.Lock()
		r.responses[resp.MediaID] = append(r.responses[resp.MediaID], resp)
		r.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return r
}

// start runs a worker until the returned stop is called (or the test ends).
func (r *rig) start() (stop func()) {
	r.t.Helper()
	w, err := natsjs.NewWorker(r.js, r.cfg, r.wcfg, r.proc, nil, zerolog.New(io.MultiWriter(zerolog.NewTestWriter(r.t), r)))
	if err != nil {
		r.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = w.Run(ctx); close(done) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				r.t.Error("worker did not stop")
			}
		})
	}
	r.t.Cleanup(stop)
	return stop
}

func (r *rig) publish(id string) {
	r.t.Helper()
	r.publishKey(id, "u/a.jpg")
}

// publishKey publishes a request for key; the scripted triage routes a .mp4 key to the video lane.
func (r *rig) publishKey(id, key string) {
	r.t.Helper()
	testenv.PublishRequest(r.t, r.js, r.cfg.Subjects().Request,
		contracts.Request{S3Key: key, S3Bucket: "media", MediaID: id, MediaURL: "https://api.example/m/" + id})
}

func (r *rig) awaitResponses(id string, n int) []contracts.Response {
	r.t.Helper()
	var got []contracts.Response
	testenv.Eventually(r.t, 20*time.Second, func() error {
		r.mu.Lock()
		defer r.mu.Unlock()
		got = append([]contracts.Response(nil), r.responses[id]...)
		if len(got) < n {
			return fmt.Errorf("%d of %d responses for %s", len(got), n, id)
		}
		return nil
	})
	return got
}

func (r *rig) streamMsgs(name string) uint64 {
	r.t.Helper()
	s, err := r.js.Stream(context.Background(), name)
	if err != nil {
		r.t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		r.t.Fatal(err)
	}
	return info.State.Msgs
}

// subjectMsgs counts the messages of the requests stream on one subject.
func (r *rig) subjectMsgs(subject string) uint64 {
	r.t.Helper()
	s, err := r.js.Stream(context.Background(), r.cfg.RequestsStream())
	if err != nil {
		r.t.Fatal(err)
	}
	info, err := s.Info(context.Background(), jetstream.WithSubjectFilter(subject))
	if err != nil {
		r.t.Fatal(err)
	}
	return info.State.Subjects[subject]
}

func (r *rig) awaitEmptyWorkQueue() {
	r.t.Helper()
	testenv.Eventually(r.t, 10*time.Second, func() error {
		if n := r.streamMsgs(r.cfg.RequestsStream()); n != 0 {
			return fmt.Errorf("work queue holds %d", n)
		}
		return nil
	})
}

func success(req contracts.Request) pipeline.Outcome {
	return pipeline.Outcome{Kind: pipeline.Success, Response: contracts.Response{MediaID: req.MediaID, OriginalURL: req.MediaURL, Success: true,
		Processed: []contracts.Variant{{Quality: "high", Format: "webp", URL: "https://cdn.example/x.webp", Size: 1}}}}
}

func failure(req contracts.Request, kind pipeline.Kind, msg string) pipeline.Outcome {
	return pipeline.Outcome{Kind: kind, Err: errors.New(msg), Response: contracts.Response{MediaID: req.MediaID, OriginalURL: req.MediaURL, Error: msg}}
}

func TestOutcomesSettleOnceEach(t *testing.T) {
	ids := map[string]pipeline.Kind{uuid.NewString(): pipeline.Success, uuid.NewString(): pipeline.Failed}
	r := newRig(t, nil, func(ctx context.Context, req contracts.Request, call int) pipeline.Outcome {
		if ids[req.MediaID] == pipeline.Success {
			return success(req)
		}
		return failure(req, pipeline.Failed, "unsupported media type: application/pdf")
	})
	r.start()
	for id := range ids {
		r.publish(id)
	}
	for id, kind := range ids {
		got := r.awaitResponses(id, 1)
		if got[0].Success != (kind == pipeline.Success) {
			t.Errorf("%s: %+v", kind, got[0])
		}
	}
	r.awaitEmptyWorkQueue()
	for id := range ids {
		if n := r.proc.callsOf(id); n != 1 {
			t.Errorf("processed %d times, want once", n)
		}
	}
}

func TestTransientRetriesThenDeadLetters(t *testing.T) {
	r := newRig(t, func(c *natsjs.Config, _ *natsjs.WorkerConfig) { c.MaxDeliver = 3 },
		func(ctx context.Context, req contracts.Request, call int) pipeline.Outcome {
			return failure(req, pipeline.Retry, "downloading: connection refused")
		})
	r.start()
	id := uuid.NewString()
	r.publish(id)
	got := r.awaitResponses(id, 1)
	if got[0].Success || got[0].Error != "gave up after 3 deliveries: downloading: connection refused" {
		t.Fatalf("gave-up response: %+v", got[0])
	}
	if n := r.proc.callsOf(id); n != 3 {
		t.Errorf("processed %d times, want 3 (MaxDeliver)", n)
	}
	r.awaitEmptyWorkQueue()
	dlq, _ := r.js.Stream(context.Background(), r.cfg.DLQStream())
	m, err := dlq.GetMsg(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	var req contracts.Request
	if json.Unmarshal(m.Data, &req) != nil || req.MediaID != id {
		t.Fatalf("dead letter is not the original request: %s", m.Data)
	}
	for h, want := range map[string]string{natsjs.HeaderReason: "max-deliveries", natsjs.HeaderDeliveries: "3",
		natsjs.HeaderLastError: "downloading: connection refused", natsjs.HeaderStreamSeq: "1", natsjs.HeaderStream: r.cfg.RequestsStream(),
		natsjs.HeaderConsumer: r.cfg.Lane(pipeline.Image).Durable()} {
		if got := m.Header.Get(h); got != want {
			t.Errorf("header %s = %q, want %q", h, got, want)
		}
	}
	time.Sleep(300 * time.Millisecond) // a bounded look for a stray second response
	if n := len(r.awaitResponses(id, 1)); n != 1 {
		t.Errorf("%d responses, want 1", n)
	}
}

func TestLongJobIsDeliveredOnce(t *testing.T) {
	r := newRig(t, func(c *natsjs.Config, _ *natsjs.WorkerConfig) { c.AckWait = time.Second },
		func(ctx context.Context, req contracts.Request, call int) pipeline.Outcome {
			time.Sleep(4 * time.Second) // four AckWaits
			return success(req)
		})
	r.start()
	id := uuid.NewString()
	r.publish(id)
	r.awaitResponses(id, 1)
	if n := r.proc.callsOf(id); n != 1 {
		t.Fatalf("a 4 s job with AckWait 1 s ran %d times; InProgress should keep it at 1", n)
	}
	cons, _ := r.js.Consumer(context.Background(), r.cfg.RequestsStream(), r.cfg.Durable)
	info, _ := cons.Info(context.Background())
	if info.NumRedelivered != 0 || info.Delivered.Consumer != 1 {
		t.Fatalf("consumer delivered %d, redelivered %d; want 1 and 0", info.Delivered.Consumer, info.NumRedelivered)
	}
}

func TestPullsOnlyForFreeSlots(t *testing.T) {
	release := make(chan struct{})
	var running atomic.Int32
	r := newRig(t, func(_ *natsjs.Config, w *natsjs.WorkerConfig) {
		w.Lanes = map[pipeline.MediaKind]int{pipeline.Image: 2}
	},
		func(ctx context.Context, req contracts.Request, call int) pipeline.Outcome {
			running.Add(1)
			<-release
			return success(req)
		})
	r.start()
	var ids []string
	for range 6 {
		id := uuid.NewString()
		ids = append(ids, id)
		r.publish(id)
	}
	testenv.Eventually(t, 5*time.Second, func() error {
		if running.Load() != 2 {
			return fmt.Errorf("%d running", running.Load())
		}
		return nil
	})
	// Triage moves every request to the image lane, which holds only what its slots run.
	testenv.Eventually(t, 5*time.Second, func() error {
		cons, _ := r.js.Consumer(context.Background(), r.cfg.RequestsStream(), r.cfg.Lane(pipeline.Image).Durable())
		info, err := cons.Info(context.Background())
		if err != nil {
			return err
		}
		if info.NumAckPending != 2 || info.NumPending != 4 {
			return fmt.Errorf("with 2 slots busy: ack pending %d, pending %d; want 2 and 4 (no pre-buffering)", info.NumAckPending, info.NumPending)
		}
		return nil
	})
	close(release)
	for _, id := range ids {
		r.awaitResponses(id, 1)
	}
}

func TestDrainHandsBackUnfinishedJobs(t *testing.T) {
	var first atomic.Bool
	first.Store(true)
	r := newRig(t, func(_ *natsjs.Config, w *natsjs.WorkerConfig) { w.DrainTimeout = 300 * time.Millisecond },
		func(ctx context.Context, req contracts.Request, call int) pipeline.Outcome {
			if first.CompareAndSwap(true, false) {
				<-ctx.Done() // a job that only ends when the drain gives up on it
				return failure(req, pipeline.Retry, "job stopped: "+context.Cause(ctx).Error())
			}
			return success(req)
		})
	stop := r.start()
	id := uuid.NewString()
	r.publish(id)
	testenv.Eventually(t, 5*time.Second, func() error {
		if r.proc.callsOf(id) != 1 {
			return errors.New("not started")
		}
		return nil
	})
	began := time.Now()
	stop()
	if d := time.Since(began); d > 5*time.Second {
		t.Fatalf("drain took %s with a 300ms drain timeout", d)
	}
	r.mu.Lock()
	n := len(r.responses[id])
	r.mu.Unlock()
	if n != 0 {
		t.Fatalf("a job stopped by shutdown was answered")
	}
	// The handed-back job is redelivered promptly (Nak without delay) to the next instance.
	r.start()
	got := r.awaitResponses(id, 1)
	if !got[0].Success || r.proc.callsOf(id) != 2 {
		t.Fatalf("after restart: %+v, %d calls", got[0], r.proc.callsOf(id))
	}
}

func TestInvalidRequestIsAnsweredAndTerminated(t *testing.T) {
	r := newRig(t, nil, func(ctx context.Context, req contracts.Request, call int) pipeline.Outcome {
		t.Error("an invalid request reached the pipeline")
		return success(req)
	})
	r.start()
	id := uuid.NewString()
	data := []byte(`{"s3Key":"../../etc/passwd","s3Bucket":"media","mediaId":"` + id + `","mediaUrl":"https://a/1"}`)
	if _, err := r.js.Publish(context.Background(), r.cfg.Subjects().Request, data); err != nil {
		t.Fatal(err)
	}
	got := r.awaitResponses(id, 1)
	if got[0].Success || got[0].Error != `invalid request: s3Key has a ".." path segment` {
		t.Fatalf("response: %+v", got[0])
	}
	r.awaitEmptyWorkQueue()
	if n := r.streamMsgs(r.cfg.DLQStream()); n != 0 {
		t.Fatalf("an answerable refusal went to the DLQ")
	}
}

func TestProvisionIsIdempotent(t *testing.T) {
	r := newRig(t, nil, nil)
	for range 2 {
		if err := natsjs.Provision(context.Background(), r.js, r.cfg); err != nil {
			t.Fatal(err)
		}
	}
	cons, err := r.js.Consumer(context.Background(), r.cfg.RequestsStream(), r.cfg.Durable)
	if err != nil {
		t.Fatal(err)
	}
	info, _ := cons.Info(context.Background())
	if info.Config.InactiveThreshold != 0 || info.Config.MaxDeliver != r.cfg.MaxDeliver || info.Config.AckPolicy != jetstream.AckExplicitPolicy {
		t.Fatalf("consumer config: %+v", info.Config)
	}
	s, _ := r.js.Stream(context.Background(), r.cfg.RequestsStream())
	sinfo, _ := s.Info(context.Background())
	if sinfo.Config.Retention != jetstream.WorkQueuePolicy || !sinfo.Config.AllowDirect || sinfo.Config.Duplicates != 2*time.Minute {
		t.Fatalf("requests stream config: %+v", sinfo.Config)
	}
}

// gate is an Admission the test opens and closes.
type gate struct {
	entered chan struct{}
	open    chan struct{}
}

func (g *gate) Wait(ctx context.Context) error {
	select {
	case g.entered <- struct{}{}:
	default:
	}
	select {
	case <-g.open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// While the admission hook says a dependency is down, the worker takes nothing from the queue (no
// delivery is used up); once it admits, the queued request runs.
func TestAdmissionHoldsPulls(t *testing.T) {
	g := &gate{entered: make(chan struct{}, 1), open: make(chan struct{})}
	r := newRig(t, func(_ *natsjs.Config, w *natsjs.WorkerConfig) { w.Admission = g },
		func(ctx context.Context, req contracts.Request, call int) pipeline.Outcome { return success(req) })
	id := uuid.NewString()
	r.publish(id)
	r.start()
	<-g.entered
	cons, err := r.js.Consumer(context.Background(), r.cfg.RequestsStream(), r.cfg.Durable)
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.NumAckPending != 0 || info.Delivered.Consumer != 0 || info.NumPending != 1 {
		t.Fatalf("while not admitted: %d delivered, %d ack pending, %d pending; want 0, 0, 1", info.Delivered.Consumer, info.NumAckPending, info.NumPending)
	}
	close(g.open)
	if got := r.awaitResponses(id, 1); !got[0].Success || r.proc.callsOf(id) != 1 {
		t.Fatalf("after admission: %+v, %d runs", got, r.proc.callsOf(id))
	}
}
