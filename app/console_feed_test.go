package app

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/console"
	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/internal/testenv"
	natsjs "github.com/mediaworker/mediaworker/jetstream"
	"github.com/mediaworker/mediaworker/pipeline"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// TestConsoleFeedSurvivesRestarts: the outcomes are on the responses stream before the console starts
// (as after a restart); a fresh console lists the newest 50 and counts the whole hour, then follows
// what comes next.
func TestConsoleFeedSurvivesRestarts(t *testing.T) {
	srv := testenv.StartNATS(t)
	js, err := jetstream.New(testenv.Connect(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := natsjs.DefaultConfig()
	if err := natsjs.Provision(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	subj := cfg.Subjects()
	publish := func(subject string, v any) {
		data, _ := json.Marshal(v)
		if _, err := js.Publish(ctx, subject, data); err != nil {
			t.Fatal(err)
		}
	}
	// 117 responses and one virus event: more messages than the console reads back by count alone.
	for i := range 115 {
		r := contracts.Response{MediaID: fmt.Sprintf("ok-%03d", i), Success: true, Processed: []contracts.Variant{
			{Quality: contracts.QualityLow, Format: contracts.FormatWebP, URL: fmt.Sprintf("http://127.0.0.1:8080/objects/media/u/images/ok-%03d/p_low.webp", i)}}}
		if i%2 == 1 {
			r = contracts.Response{MediaID: fmt.Sprintf("bad-%03d", i), Error: "gave up after 5 deliveries: clamd unavailable"}
		}
		publish(subj.Response, r)
	}
	publish(subj.Virus, contracts.VirusEvent{MediaID: "evil", VirusName: "Eicar-Test-Signature", ActionTaken: contracts.ActionDeleted})
	publish(subj.Response, contracts.Response{MediaID: "evil", Error: "virus detected: Eicar-Test-Signature"})
	publish(subj.Response, contracts.Response{MediaID: "pdf", Error: "detecting: unsupported media type: application/pdf"})

	st := newConsoleState(cfg, zerolog.Nop())
	st.start(js)
	defer st.stop()
	totals := func() (n [4]int) {
		_, ring := st.outcomes()
		for _, m := range ring.Series(time.Now()) {
			for k, c := range m.Counts {
				n[k] += c
			}
		}
		return n
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		if got, want := totals(), [4]int{58, 1, 1, 57}; got != want {
			return fmt.Errorf("throughput totals %v, want %v (success, failed, infected, gave up)", got, want)
		}
		return nil
	})
	recent, _ := st.outcomes()
	if len(recent) != recentOutcomes || recent[0].MediaID != "pdf" || recent[0].Result != console.ResultFailed {
		t.Fatalf("recent: %d, newest %+v", len(recent), recent[0])
	}
	if v := recent[1]; v.MediaID != "evil" || v.Result != console.ResultInfected || v.Virus != "Eicar-Test-Signature" || v.Action != contracts.ActionDeleted {
		t.Fatalf("virus outcome: %+v", v)
	}
	if o := recent[2]; o.Result != console.ResultSuccess || o.Kind != "image" || o.PreviewURL == "" {
		t.Fatalf("success outcome: %+v", o)
	}
	if o := recent[3]; o.Result != console.ResultGaveUp {
		t.Fatalf("gave-up outcome: %+v", o)
	}

	// And it follows: a new response is listed first.
	publish(subj.Response, contracts.Response{MediaID: "late", Success: true})
	testenv.Eventually(t, 30*time.Second, func() error {
		if recent, _ := st.outcomes(); recent[0].MediaID != "late" {
			return fmt.Errorf("newest is %s, want late", recent[0].MediaID)
		}
		return nil
	})
	st.stop()
	st.stop() // idempotent
}

// blockingProcessor holds each job until release is closed.
type blockingProcessor struct{ release chan struct{} }

func (p blockingProcessor) Triage(ctx context.Context, req contracts.Request) pipeline.Outcome {
	return pipeline.Routed(pipeline.Video, "video/mp4")
}

func (p blockingProcessor) Process(ctx context.Context, req contracts.Request, lane pipeline.MediaKind) pipeline.Outcome {
	<-p.release
	return pipeline.Outcome{Kind: pipeline.Success, MediaKind: pipeline.Video}
}

// TestConsoleTracksJobsInFlight: a job in hand is listed with its start; the progress a video publishes
// on NATS fills its bar; once settled it is gone and its duration is kept for its response.
func TestConsoleTracksJobsInFlight(t *testing.T) {
	srv := testenv.StartNATS(t)
	nc := testenv.Connect(t, srv)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	cfg := natsjs.DefaultConfig()
	if err := natsjs.Provision(context.Background(), js, cfg); err != nil {
		t.Fatal(err)
	}
	st := newConsoleState(cfg, zerolog.Nop())
	st.start(js)
	defer st.stop()

	p := blockingProcessor{release: make(chan struct{})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		st.track(p).Process(context.Background(), contracts.Request{MediaID: "clip-1"}, pipeline.Video)
	}()
	testenv.Eventually(t, 10*time.Second, func() error {
		if jobs := st.inFlight(); len(jobs) != 1 || jobs[0].MediaID != "clip-1" || jobs[0].Progress >= 0 {
			return fmt.Errorf("in flight: %+v", jobs)
		}
		return nil
	})
	data, _ := json.Marshal(contracts.Progress{MediaID: "clip-1", Percent: 42, Stage: "transcoding"})
	testenv.Eventually(t, 10*time.Second, func() error {
		if err := nc.Publish(cfg.Subjects().ProgressSubject("clip-1"), data); err != nil {
			return err
		}
		if jobs := st.inFlight(); len(jobs) != 1 || jobs[0].Progress != 0.42 || jobs[0].Kind != "video" {
			return fmt.Errorf("in flight: %+v", jobs)
		}
		return nil
	})
	close(p.release)
	<-done
	if jobs := st.inFlight(); len(jobs) != 0 {
		t.Fatalf("settled job still in flight: %+v", jobs)
	}
	if _, err := js.Publish(context.Background(), cfg.Subjects().Response, []byte(`{"mediaId":"clip-1","success":true}`)); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		recent, _ := st.outcomes()
		if len(recent) != 1 || recent[0].Duration <= 0 || recent[0].Kind != "video" {
			return fmt.Errorf("the response did not get the job's duration and kind: %+v", recent)
		}
		return nil
	})
}
