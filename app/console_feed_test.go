package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/console"
	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/internal/testenv"
	natsjs "github.com/mediaworker/mediaworker/jetstream"
	"github.com/mediaworker/mediaworker/pipeline"
	"github.com/mediaworker/mediaworker/scanner"
	"github.com/nats-io/nats.go"
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
	// 117 responses and one virus event: more messages than the console reads back by count alone. They
	// carry no Mw-Outcome, as an older worker's: read by their words (TestConsoleReadsOutcomeHeader).
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
		st.track(p).Process(context.Background(), contracts.Request{MediaID: "clip-1", S3Key: "u/7/holiday clip.mov"}, pipeline.Video)
	}()
	testenv.Eventually(t, 10*time.Second, func() error {
		if jobs := st.inFlight(); len(jobs) != 1 || jobs[0].MediaID != "clip-1" || jobs[0].File != "holiday clip.mov" || jobs[0].State != "" || jobs[0].Progress >= 0 {
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
		if len(recent) != 1 || recent[0].Duration <= 0 || recent[0].Kind != "video" || recent[0].File != "holiday clip.mov" {
			return fmt.Errorf("the response did not get the job's duration, kind and file name: %+v", recent)
		}
		return nil
	})
}

// retryingProcessor fails every job for a transient cause, as a job does while clamd is down.
type retryingProcessor struct{}

func (retryingProcessor) Triage(ctx context.Context, req contracts.Request) pipeline.Outcome {
	return pipeline.Routed(pipeline.Image, "image/jpeg")
}

func (retryingProcessor) Process(ctx context.Context, req contracts.Request, lane pipeline.MediaKind) pipeline.Outcome {
	return pipeline.Outcome{Kind: pipeline.Retry, MediaKind: lane, Err: errors.New("scanning: clamd unavailable")}
}

// retryingTriage hands every request back from triage, as it does while the object store is down.
type retryingTriage struct{ retryingProcessor }

func (retryingTriage) Triage(ctx context.Context, req contracts.Request) pipeline.Outcome {
	return pipeline.Outcome{Kind: pipeline.Retry, Err: errors.New("checking: object store unavailable")}
}

// TestConsoleKeepsRetryingJobsInFlight: a job handed back for another delivery (by triage or by its
// lane) is still owed an answer: it stays in flight, marked retrying, once however often it is delivered, until its response is on
// the stream; the answer then carries its file name.
func TestConsoleKeepsRetryingJobsInFlight(t *testing.T) {
	srv := testenv.StartNATS(t)
	js, err := jetstream.New(testenv.Connect(t, srv))
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

	req := contracts.Request{MediaID: "photo-1", S3Bucket: "media", S3Key: "u/1/beach.jpg"}
	// Triage hands it back, then routes it; then its lane hands it back, three times.
	if out := st.track(retryingTriage{}).Triage(context.Background(), req); out.Kind != pipeline.Retry {
		t.Fatalf("triage: %+v", out)
	}
	if jobs := st.inFlight(); len(jobs) != 1 || jobs[0].File != "beach.jpg" || jobs[0].State != "retrying" {
		t.Fatalf("a request triage handed back is not listed as retrying: %+v", jobs)
	}
	st.track(retryingProcessor{}).Triage(context.Background(), req)
	if jobs := st.inFlight(); len(jobs) != 0 {
		t.Fatalf("a triaged request is still listed as retrying: %+v", jobs)
	}
	for range 3 {
		st.track(retryingProcessor{}).Process(context.Background(), req, pipeline.Image)
		if jobs := st.inFlight(); len(jobs) != 1 || jobs[0].MediaID != "photo-1" || jobs[0].File != "beach.jpg" || jobs[0].State != "retrying" {
			t.Fatalf("a handed-back job is not listed once as retrying: %+v", jobs)
		}
	}
	if _, err := js.Publish(context.Background(), cfg.Subjects().Response, []byte(`{"mediaId":"photo-1","success":false,"error":"gave up after 5 deliveries: scanning: clamd unavailable"}`)); err != nil {
		t.Fatal(err)
	}
	// The follower reads the responses stream through an ordered consumer; on a busy machine (CI beside
	// CPU hogs) its start and a re-start after an error take seconds.
	testenv.Eventually(t, 45*time.Second, func() error {
		if jobs := st.inFlight(); len(jobs) != 0 {
			return fmt.Errorf("the answered job is still in flight: %+v", jobs)
		}
		if recent, _ := st.outcomes(); len(recent) != 1 || recent[0].File != "beach.jpg" {
			return fmt.Errorf("the answer lacks the job's file name: %+v", recent)
		}
		return nil
	})

	// Bounded: the oldest retrying entries go first.
	for i := range rememberedJobs + 5 {
		st.track(retryingProcessor{}).Process(context.Background(), contracts.Request{MediaID: fmt.Sprintf("m-%d", i), S3Key: "k.jpg"}, pipeline.Image)
	}
	jobs := st.inFlight()
	listed := map[string]bool{}
	for _, j := range jobs {
		listed[j.MediaID] = true
	}
	if len(jobs) != rememberedJobs || listed["m-4"] || !listed["m-5"] {
		t.Fatalf("retrying entries: %d, m-4 (oldest, dropped) %v, m-5 (kept) %v", len(jobs), listed["m-4"], listed["m-5"])
	}
}

// TestConsoleShowsRescues: the worker reports each stranded message it settles to its Observer, the
// app's metrics; they count it as outcome "rescued" and the console's snapshot puts it on the row of
// the consumer that stranded it (triage's for lane ""), with the last rescue's action and time, which
// the page shows.
func TestConsoleShowsRescues(t *testing.T) {
	srv := testenv.StartNATS(t)
	nc := testenv.Connect(t, srv)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Pipeline.TmpDir = t.TempDir()
	cfg.Scanner.Addr = "tcp://127.0.0.1:1" // no clamd: the snapshot shows it down, the queues regardless
	if err := natsjs.Provision(context.Background(), js, cfg.Streams); err != nil {
		t.Fatal(err)
	}
	sc, err := scanner.New(cfg.Scanner)
	if err != nil {
		t.Fatal(err)
	}
	a := &App{cfg: cfg, log: zerolog.Nop(), nc: nc, js: js, scanner: sc, metrics: newMetrics()}
	var obs natsjs.Observer = a.metrics // what app.New hands the worker
	before := time.Now()
	obs.Rescued(pipeline.Image, "retried")
	obs.Rescued(pipeline.Image, "gave_up")
	obs.Rescued("", "removed")

	src := &consoleSource{a: a, st: newConsoleState(cfg.Streams, zerolog.Nop())}
	rows := map[string]console.Queue{}
	for _, q := range src.Snapshot(context.Background()).Queues {
		rows[q.Consumer] = q
	}
	for consumer, want := range map[string]struct {
		n      int
		action string
	}{cfg.Streams.Durable: {1, "removed"}, cfg.Streams.Lane(pipeline.Image).Durable(): {2, "gave_up"}, cfg.Streams.Lane(pipeline.Video).Durable(): {0, ""}} {
		q, ok := rows[consumer]
		switch {
		case !ok:
			t.Errorf("no row for consumer %s among %v", consumer, rows)
		case q.Rescued != want.n || q.LastRescueAction != want.action:
			t.Errorf("%s: %d rescued, last %q; want %d, %q", consumer, q.Rescued, q.LastRescueAction, want.n, want.action)
		case want.n > 0 && q.LastRescue.Before(before), want.n == 0 && !q.LastRescue.IsZero():
			t.Errorf("%s: last rescue at %s (test began %s)", consumer, q.LastRescue, before)
		}
	}

	// The metric: outcome "rescued", kind the lane (unknown for triage).
	families, err := a.metrics.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "mediaworker_jobs_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["outcome"] == "rescued" {
				got[labels["kind"]] = m.GetCounter().GetValue()
			}
		}
	}
	if want := map[string]float64{"image": 2, "unknown": 1}; !maps.Equal(got, want) {
		t.Errorf("mediaworker_jobs_total{outcome=\"rescued\"} by kind: %v, want %v", got, want)
	}

	// And the page shows them.
	h, err := console.New(src, console.Config{Open: true})
	if err != nil {
		t.Fatal(err)
	}
	web := httptest.NewServer(h)
	defer web.Close()
	resp, err := http.Get(web.URL + "/console/live")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	row := regexp.MustCompile(`(?s)q-name">` + regexp.QuoteMeta(cfg.Streams.Lane(pipeline.Image).Durable()) + `</div>.*?<td class="num">2<div[^>]*>gave up \d+s ago</div></td>`)
	if resp.StatusCode != 200 || !row.Match(body) {
		t.Errorf("GET /console/live: %d; the image lane's row lacks its 2 rescues and the last one:\n%s", resp.StatusCode, body)
	}
}

// TestConsoleReadsOutcomeHeader: a response's Mw-Outcome header says how its request ended, whatever its
// error's words; only a response without the header (stored by a worker from before it) is read by them.
// The messages are on the responses stream, and the console follows it.
func TestConsoleReadsOutcomeHeader(t *testing.T) {
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
	n := 0
	feed := func(subject, outcome string, v any) {
		m := nats.NewMsg(subject)
		m.Data, _ = json.Marshal(v)
		if outcome != "" {
			m.Header.Set(natsjs.HeaderOutcome, outcome)
		}
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
		if subject == subj.Response {
			n++
		}
	}
	// With the header.
	feed(subj.Response, natsjs.OutcomeFailed, contracts.Response{MediaID: "h-failed", Error: "gave up after reading the file: it is not an image"})
	feed(subj.Response, natsjs.OutcomeFailed, contracts.Response{MediaID: "h-failed-2", Error: "virus detected in the filename is not a virus"})
	feed(subj.Response, natsjs.OutcomeGaveUp, contracts.Response{MediaID: "h-gaveup", Error: "scanning: clamd unavailable"})
	feed(subj.Virus, "", contracts.VirusEvent{MediaID: "h-virus", VirusName: "Eicar-Test-Signature", ActionTaken: contracts.ActionDeleted})
	feed(subj.Response, natsjs.OutcomeVirus, contracts.Response{MediaID: "h-virus", Error: "the upload is infected"})
	feed(subj.Response, natsjs.OutcomeVirus, contracts.Response{MediaID: "h-virus-alone", Error: "the upload is infected"})
	feed(subj.Response, natsjs.OutcomeSuccess, contracts.Response{MediaID: "h-success", Success: true})
	feed(subj.Response, "some-later-kind", contracts.Response{MediaID: "h-unknown", Error: "gave up after 3 deliveries: x"})
	// Without it: an older worker's, read by its words.
	feed(subj.Response, "", contracts.Response{MediaID: "old-gaveup", Error: "gave up after 5 deliveries: clamd unavailable"})
	feed(subj.Response, "", contracts.Response{MediaID: "old-virus", Error: "virus detected: Eicar-Test-Signature"})
	feed(subj.Response, "", contracts.Response{MediaID: "old-failed", Error: "detecting: unsupported media type: application/pdf"})
	feed(subj.Response, "", contracts.Response{MediaID: "old-success", Success: true})

	type want struct{ result, virus string }
	wants := map[string]want{
		"h-failed":      {console.ResultFailed, ""},
		"h-failed-2":    {console.ResultFailed, ""},
		"h-gaveup":      {console.ResultGaveUp, ""},
		"h-virus":       {console.ResultInfected, "Eicar-Test-Signature"}, // from the virus event
		"h-virus-alone": {console.ResultInfected, ""},                     // its error is shown as it is
		"h-success":     {console.ResultSuccess, ""},
		"h-unknown":     {console.ResultFailed, ""},
		"old-gaveup":    {console.ResultGaveUp, ""},
		"old-virus":     {console.ResultInfected, "Eicar-Test-Signature"},
		"old-failed":    {console.ResultFailed, ""},
		"old-success":   {console.ResultSuccess, ""},
	}
	st := newConsoleState(cfg, zerolog.Nop())
	st.start(js)
	defer st.stop()
	testenv.Eventually(t, 30*time.Second, func() error {
		if recent, _ := st.outcomes(); len(recent) != n {
			return fmt.Errorf("%d outcomes listed, want %d", len(recent), n)
		}
		return nil
	})
	recent, ring := st.outcomes()
	if len(recent) != len(wants) {
		t.Fatalf("%d outcomes listed, want %d: %+v", len(recent), len(wants), recent)
	}
	for _, o := range recent {
		if w := wants[o.MediaID]; o.Result != w.result || o.Virus != w.virus {
			t.Errorf("%s: result %q, virus %q; want %q, %q", o.MediaID, o.Result, o.Virus, w.result, w.virus)
		}
	}
	var totals [4]int
	for _, m := range ring.Series(time.Now()) {
		for k, c := range m.Counts {
			totals[k] += c
		}
	}
	if want := [4]int{2, 4, 3, 2}; totals != want {
		t.Errorf("throughput totals %v, want %v (success, failed, infected, gave up)", totals, want)
	}
}

// TestConsoleFeedCarriesAssetFacts: an outcome carries its response's thumbhash, dominant colour and
// reuse as the response has them (the console checks them before it draws them); a response without
// metadata has none.
func TestConsoleFeedCarriesAssetFacts(t *testing.T) {
	r := contracts.Response{MediaID: "m-1", Success: true,
		Processed: []contracts.Variant{{Quality: contracts.QualityLow, Format: contracts.FormatWebP, URL: "http://127.0.0.1:8080/objects/media/m-1/p_low.webp"}},
		Metadata: &contracts.Metadata{MIME: "image/jpeg", ThumbHash: "mmkOLY5JZ3ZgjIaIdYmHc2h/hvaI", DominantColor: "#8b2401",
			Palette: []string{"#8b2401", "#f9f9f9"}, Reused: true}}
	o := outcomeOf(r, natsjs.OutcomeSuccess, time.Now())
	if o.ThumbHash != r.Metadata.ThumbHash || o.DominantColor != "#8b2401" || !o.Reused || o.Kind != "image" || o.PreviewURL == "" {
		t.Errorf("outcome %+v lacks the response's facts", o)
	}
	o = outcomeOf(contracts.Response{MediaID: "m-2", Error: "boom"}, natsjs.OutcomeFailed, time.Now())
	if o.ThumbHash != "" || o.DominantColor != "" || o.Reused {
		t.Errorf("outcome %+v has facts its response does not", o)
	}
}
