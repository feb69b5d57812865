package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/internal/testenv"
	natsjs "github.com/mediaworker/mediaworker/jetstream"
	"github.com/mediaworker/mediaworker/pipeline"
	"github.com/nats-io/nats.go/jetstream"
)

// Triage routes each request once, and a lane job runs in its own lane only.
func TestTriageRoutesEachRequestToItsLane(t *testing.T) {
	r := newRig(t, nil, func(ctx context.Context, req contracts.Request, call int) pipeline.Outcome { return success(req) })
	r.start()
	photo, clip := uuid.NewString(), uuid.NewString()
	r.publishKey(photo, "u/a.jpg")
	r.publishKey(clip, "u/b.mp4")
	r.awaitResponses(photo, 1)
	r.awaitResponses(clip, 1)
	r.awaitEmptyWorkQueue()
	if got := r.proc.lanesOf(photo); !slices.Equal(got, []pipeline.MediaKind{pipeline.Image}) {
		t.Errorf("photo ran in %v, want [image]", got)
	}
	if got := r.proc.lanesOf(clip); !slices.Equal(got, []pipeline.MediaKind{pipeline.Video}) {
		t.Errorf("clip ran in %v, want [video]", got)
	}
	if n := r.streamMsgs(r.cfg.ResponsesStream()); n != 2 {
		t.Errorf("%d responses stored, want 2", n)
	}
}

// A lane job that finds the other kind after the download is re-routed, never finished in the wrong pool.
func TestLaneMismatchIsReroutedOnce(t *testing.T) {
	r := newRig(t, nil, func(ctx context.Context, req contracts.Request, call int) pipeline.Outcome {
		if call == 1 {
			return pipeline.Routed(pipeline.Video, "video/quicktime") // triage said image; the file says video
		}
		return success(req)
	})
	r.start()
	id := uuid.NewString()
	r.publishKey(id, "u/looks-like.jpg")
	if got := r.awaitResponses(id, 1); !got[0].Success {
		t.Fatalf("%+v", got[0])
	}
	r.awaitEmptyWorkQueue()
	if got := r.proc.lanesOf(id); !slices.Equal(got, []pipeline.MediaKind{pipeline.Image, pipeline.Video}) {
		t.Fatalf("ran in %v, want [image video]", got)
	}
}

// An instance serving only the video lane triages everything but runs only videos; the image waits in
// its lane for an instance that serves it.
func TestInstanceServesOnlyItsLanes(t *testing.T) {
	r := newRig(t, func(_ *natsjs.Config, w *natsjs.WorkerConfig) {
		w.Lanes = map[pipeline.MediaKind]int{pipeline.Video: 1}
	}, func(ctx context.Context, req contracts.Request, call int) pipeline.Outcome { return success(req) })
	stop := r.start()
	photo, clip := uuid.NewString(), uuid.NewString()
	r.publishKey(photo, "u/a.jpg")
	r.publishKey(clip, "u/b.mp4")
	r.awaitResponses(clip, 1)
	testenv.Eventually(t, 10*time.Second, func() error {
		info := r.consumerInfo(r.cfg.Lane(pipeline.Image).Durable())
		if info.NumPending != 1 || info.Delivered.Consumer != 0 {
			return fmt.Errorf("image lane: %d pending, %d delivered; want 1 and 0", info.NumPending, info.Delivered.Consumer)
		}
		return nil
	})
	if n := r.proc.callsOf(photo); n != 0 {
		t.Fatalf("a video-only instance ran the photo %d times", n)
	}
	stop()
	// An instance with the image lane picks it up.
	r.wcfg.Lanes = map[pipeline.MediaKind]int{pipeline.Image: 1}
	r.start()
	if got := r.awaitResponses(photo, 1); !got[0].Success || !slices.Equal(r.proc.lanesOf(photo), []pipeline.MediaKind{pipeline.Image}) {
		t.Fatalf("photo: %+v in %v", got[0], r.proc.lanesOf(photo))
	}
}

// Issue 12 item 6: requests queued by the previous version (one durable on the request subject, the
// stream holding only that subject) are processed after an upgrade, the one a dead worker held too.
func TestUpgradeFromTheSingleConsumerLayout(t *testing.T) {
	r := newRig(t, func(c *natsjs.Config, _ *natsjs.WorkerConfig) { c.AckWait = 2 * time.Second }, func(ctx context.Context, req contracts.Request, call int) pipeline.Outcome {
		return success(req)
	})
	ctx := context.Background()
	// The rig provisioned the new layout; put the old one in its place, as the previous version left it.
	for _, name := range []string{r.cfg.RequestsStream(), r.cfg.AdvisoryCapture().Stream()} {
		if err := r.js.DeleteStream(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	old := r.cfg.StreamConfigs()[0]
	old.Subjects = []string{r.cfg.Subjects().Request}
	if _, err := r.js.CreateStream(ctx, old); err != nil {
		t.Fatal(err)
	}
	oldAdv := r.cfg.StreamConfigs()[3]
	oldAdv.Subjects = []string{fmt.Sprintf("$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.%s.%s", r.cfg.RequestsStream(), r.cfg.Durable)}
	if _, err := r.js.CreateStream(ctx, oldAdv); err != nil {
		t.Fatal(err)
	}
	oldCons := jetstream.ConsumerConfig{Durable: r.cfg.Durable, AckPolicy: jetstream.AckExplicitPolicy, AckWait: 2 * time.Second,
		MaxDeliver: 5, MaxAckPending: 64, FilterSubject: r.cfg.Subjects().Request, DeliverPolicy: jetstream.DeliverAllPolicy}
	cons, err := r.js.CreateConsumer(ctx, r.cfg.RequestsStream(), oldCons)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for range 3 {
		id := uuid.NewString()
		ids = append(ids, id)
		r.publish(id)
	}
	// The old worker took the first one and died with it.
	if _, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second)); err != nil {
		t.Fatal(err)
	}

	// The new version starts: it provisions (in place) and runs.
	if err := natsjs.Provision(ctx, r.js, r.cfg); err != nil {
		t.Fatalf("provisioning over the old layout: %v", err)
	}
	r.start()
	for _, id := range ids {
		if got := r.awaitResponses(id, 1); !got[0].Success {
			t.Fatalf("%s: %+v", id, got[0])
		}
	}
	r.awaitEmptyWorkQueue()
	for _, id := range ids {
		if n := r.proc.callsOf(id); n != 1 {
			t.Errorf("%s ran %d times, want 1", id, n)
		}
	}
	if n := r.streamMsgs(r.cfg.ResponsesStream()); n != 3 {
		t.Errorf("%d responses stored, want 3", n)
	}
}

func (r *rig) consumerInfo(durable string) *jetstream.ConsumerInfo {
	r.t.Helper()
	c, err := r.js.Consumer(context.Background(), r.cfg.RequestsStream(), durable)
	if err != nil {
		r.t.Fatal(err)
	}
	info, err := c.Info(context.Background())
	if err != nil {
		r.t.Fatal(err)
	}
	return info
}

// Issue 10 item 4: at most one outcome per request, also after the duplicate window. The request is
// settled; then, past the (short) window, a second copy of its lane message arrives, as when triage's
// ack was lost and the request was routed again. It is acked without running; one response is stored.
func TestLateDuplicateIsAckedWithoutRunning(t *testing.T) {
	r := newRig(t, func(c *natsjs.Config, _ *natsjs.WorkerConfig) { c.DuplicateWindow = time.Second },
		func(ctx context.Context, req contracts.Request, call int) pipeline.Outcome { return success(req) })
	r.start()
	id := uuid.NewString()
	r.publish(id)
	r.awaitResponses(id, 1)
	r.awaitEmptyWorkQueue()

	// The copy triage published, as it is stored: same request sequence and headers.
	reqSeq := r.lastSeq(r.cfg.RequestsStream()) - 1 // request 1, its route 2
	r.publishLateRoute(id, reqSeq)
	r.awaitEmptyWorkQueue()
	if n := r.proc.callsOf(id); n != 1 {
		t.Fatalf("the late duplicate ran the job again: %d runs", n)
	}
	if n := r.streamMsgs(r.cfg.ResponsesStream()); n != 1 {
		t.Fatalf("%d responses stored, want 1", n)
	}
	if info := r.consumerInfo(r.cfg.Lane(pipeline.Image).Durable()); info.Delivered.Consumer != 2 || info.NumAckPending != 0 {
		t.Fatalf("image lane delivered %d (ack pending %d); want both copies delivered and acked", info.Delivered.Consumer, info.NumAckPending)
	}
}

// --max-queued caps each subject of the requests stream, the lanes' too. A lane that is full refuses
// triage's copy: that is load, and the request must be neither dead-lettered once its deliveries run
// out nor held in triage, where it would keep a slot every lane needs (issue 22 item 2). MaxDeliver 2
// here: one hand-back, then on the last delivery its copy goes into the lane past the cap; and a video
// published while the image lane stays full is answered meanwhile.
func TestFullLaneNeitherDeadLettersNorHoldsTriage(t *testing.T) {
	release := make(chan struct{})
	r := newRig(t, func(c *natsjs.Config, w *natsjs.WorkerConfig) {
		c.MaxQueued, c.MaxDeliver = 1, 2
		w.TriageSlots = 1 // a held request would stop triage for every lane
	}, func(ctx context.Context, req contracts.Request, call int) pipeline.Outcome {
		if strings.HasSuffix(req.S3Key, ".mp4") {
			return success(req)
		}
		select { // image jobs keep the image lane full until the test lets them finish
		case <-release:
		case <-ctx.Done():
		}
		return success(req)
	})
	r.start()
	first, second, video := uuid.NewString(), uuid.NewString(), uuid.NewString()
	r.publish(first)
	testenv.Eventually(t, 10*time.Second, func() error {
		if n := r.proc.callsOf(first); n != 1 {
			return fmt.Errorf("first job started %d times", n)
		}
		return nil
	})
	r.publish(second)
	testenv.Eventually(t, 20*time.Second, func() error {
		if !r.logged("routing it past the cap") {
			return errors.New("the request meeting the full lane is not routed past the cap yet")
		}
		return nil
	})
	// The request that met the full lane leaves the request subject when its routing is acked, which
	// can come after the log line on a busy machine; with MaxQueued 1 a publish before that is refused
	// (503, maximum messages per subject), as an API's would be until it retries.
	testenv.Eventually(t, 20*time.Second, func() error {
		if n := r.subjectMsgs(r.cfg.Subjects().Request); n != 0 {
			return fmt.Errorf("%d request(s) still on the request subject", n)
		}
		return nil
	})
	r.publishKey(video, "u/clip.mp4")
	if got := r.awaitResponses(video, 1); !got[0].Success {
		t.Fatalf("a video while the image lane is full: %+v", got[0])
	}
	close(release)
	r.awaitResponses(first, 1)
	got := r.awaitResponses(second, 1)
	if !got[0].Success {
		t.Fatalf("the request that met a full lane was answered %+v", got[0])
	}
	r.awaitEmptyWorkQueue()
	if n := r.streamMsgs(r.cfg.DLQStream()); n != 0 {
		t.Fatalf("%d dead letters: a full lane dead-lettered a valid request", n)
	}
	if n := r.proc.callsOf(second); n != 1 {
		t.Errorf("the request past the cap ran %d times, want once", n)
	}
}

// Each lane's consumer has its own ack wait and max ack pending when set (zero: the shared ones), and
// InProgress keeps a job alive inside the shortest of them: a 4 s image job on a lane whose ack wait
// is 2 s (the shared one 30 s) runs once, not again every 2 s.
func TestLaneLimitsAreTheLanesOwn(t *testing.T) {
	r := newRig(t, func(c *natsjs.Config, _ *natsjs.WorkerConfig) {
		c.AckWait, c.MaxAckPending = 30*time.Second, 64
		c.Lanes[pipeline.Image] = &natsjs.LaneLimits{AckWait: 2 * time.Second}
		c.Lanes[pipeline.Video] = &natsjs.LaneLimits{MaxAckPending: 3}
	}, func(ctx context.Context, req contracts.Request, call int) pipeline.Outcome {
		select {
		case <-time.After(4 * time.Second):
		case <-ctx.Done():
		}
		return success(req)
	})
	img, vid := r.consumerInfo(r.cfg.Lane(pipeline.Image).Durable()).Config, r.consumerInfo(r.cfg.Lane(pipeline.Video).Durable()).Config
	if img.AckWait != 2*time.Second || img.MaxAckPending != 64 || vid.AckWait != 30*time.Second || vid.MaxAckPending != 3 {
		t.Fatalf("image lane: ack wait %s, max ack pending %d; video lane: %s, %d", img.AckWait, img.MaxAckPending, vid.AckWait, vid.MaxAckPending)
	}
	r.start()
	id := uuid.NewString()
	r.publish(id)
	if got := r.awaitResponses(id, 1); !got[0].Success {
		t.Fatalf("%+v", got[0])
	}
	r.awaitEmptyWorkQueue()
	if n := r.proc.callsOf(id); n != 1 {
		t.Fatalf("a 4 s job on a lane with a 2 s ack wait ran %d times: InProgress came too late", n)
	}
	if info := r.consumerInfo(r.cfg.Lane(pipeline.Image).Durable()); info.NumRedelivered != 0 || info.Delivered.Consumer != 1 {
		t.Fatalf("image lane delivered %d, redelivered %d; want 1 and 0", info.Delivered.Consumer, info.NumRedelivered)
	}

	bad := r.cfg
	bad.Lanes[pipeline.Video].MaxAckPending, bad.Lanes[pipeline.Image].AckWait = -1, 500*time.Millisecond
	err := bad.Validate()
	if err == nil || !strings.Contains(err.Error(), "Config.Lanes[video].MaxAckPending") || !strings.Contains(err.Error(), "Config.Lanes[image].AckWait") {
		t.Fatalf("bad lane limits: %v; want errors naming Config.Lanes[video].MaxAckPending and Config.Lanes[image].AckWait", err)
	}
}

// Issue 23 item 3: triage writes no record when it routes; its lane copy is the record. A request whose
// triage ack was lost (triage stored the copy and died; here by hand) is redelivered while its copy
// waits in the lane: it is acked without a second copy, and the request is answered once.
func TestRedeliveredRequestFindsItsLaneCopy(t *testing.T) {
	release := make(chan struct{})
	r := newRig(t, func(c *natsjs.Config, _ *natsjs.WorkerConfig) { c.AckWait = time.Second },
		func(ctx context.Context, req contracts.Request, call int) pipeline.Outcome {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return success(req)
		})
	id := uuid.NewString()
	reqSeq, _ := r.triageByHand(id, "u/a.jpg", pipeline.Image, false) // its ack lost
	r.start()
	testenv.Eventually(t, 30*time.Second, func() error {
		if !r.logged("request settled already") {
			return errors.New("the request has not been redelivered to triage yet")
		}
		return nil
	})
	close(release)
	r.awaitResponses(id, 1)
	r.awaitEmptyWorkQueue()
	if n := r.proc.callsOf(id); n != 1 {
		t.Fatalf("the job ran %d times, want once", n)
	}
	if n := r.streamMsgs(r.cfg.ResponsesStream()); n != 1 {
		t.Fatalf("%d responses stored, want 1", n)
	}
	if info := r.consumerInfo(r.cfg.Lane(pipeline.Image).Durable()); info.Delivered.Consumer != 1 {
		t.Fatalf("the image lane delivered %d copies; want the one triage stored before it died", info.Delivered.Consumer)
	}
	// Nothing was written for the route: the memory holds the lane's outbox only.
	kv, err := r.js.KeyValue(context.Background(), r.cfg.Buckets().Settled())
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(context.Background(), fmt.Sprint(reqSeq))
	if err != nil {
		t.Fatal(err)
	}
	if e.Revision() != 1 || !strings.HasPrefix(string(e.Value()), "{") {
		t.Fatalf("settled record of request %d: revision %d %.20q, want one write, the outbox", reqSeq, e.Revision(), e.Value())
	}
}
