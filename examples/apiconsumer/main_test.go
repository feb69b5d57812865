package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/internal/testenv"
	natsjs "github.com/mediaworker/mediaworker/jetstream"
	"github.com/nats-io/nats.go/jetstream"
)

const (
	imageID  = "11111111-1111-4111-8111-111111111111"
	videoID  = "22222222-2222-4222-8222-222222222222"
	failedID = "33333333-3333-4333-8333-333333333333"
	virusID  = "44444444-4444-4444-8444-444444444444"
	lastID   = "55555555-5555-4555-8555-555555555555"
	laterID  = "66666666-6666-4666-8666-666666666666"
)

// TestExampleConsumer builds the example, runs it against a real JetStream server with the worker's
// streams, publishes the events a worker publishes (each validated against the contract's schemas), and
// checks the records it prints: the mapping of every outcome, that duplicates and late failures do not
// undo a success, that a virus verdict sticks, that a malformed message does not stop it, and that what
// is published while it is down arrives when it is back.
func TestExampleConsumer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	srv := testenv.StartNATS(t)
	js, err := jetstream.New(testenv.Connect(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	cfg := natsjs.DefaultConfig()
	if err := natsjs.Provision(ctx, js, cfg); err != nil {
		t.Fatalf("provisioning the worker's streams: %v", err)
	}
	subj := cfg.Subjects()
	bin := buildExample(t)

	pub := func(subject string, v any, msgID string) {
		t.Helper()
		schema := contracts.SchemaResponse
		if subject == subj.Virus {
			schema = contracts.SchemaVirusEvent
		}
		if err := contracts.Validate(schema, v); err != nil {
			t.Fatalf("test event is not valid per the contract: %v", err)
		}
		data, _ := json.Marshal(v)
		if _, err := js.Publish(ctx, subject, data, jetstream.WithMsgID(msgID)); err != nil {
			t.Fatalf("publishing to %s: %v", subject, err)
		}
	}

	p := startExample(t, bin, srv.ClientURL())
	pub(subj.Response, imageSuccess(imageID), imageID+"/1/success")
	pub(subj.Response, videoSuccess(videoID), videoID+"/2/success")
	pub(subj.Response, failure(failedID, "detecting: unsupported media type: application/pdf"), failedID+"/3/failed")
	// Infected: the worker publishes the virus event, then the failure response.
	pub(subj.Virus, virusEvent(virusID), virusID+"/4/virus-event")
	pub(subj.Response, failure(virusID, "virus detected: Eicar-Signature"), virusID+"/4/virus")
	// The same success again (a redelivery after the duplicate window), then a failure for the same media
	// (a replayed request whose upload is gone): neither may change the ready record.
	pub(subj.Response, imageSuccess(imageID), imageID+"/1/success-again")
	pub(subj.Response, failure(imageID, "downloading: object not found"), imageID+"/7/failed")
	// A dead-lettered request replayed by an operator succeeds after its failure response.
	pub(subj.Response, imageSuccess(failedID), failedID+"/8/success")
	// Junk on the subject must not stop the consumer.
	if _, err := js.Publish(ctx, subj.Response, []byte("not json"), jetstream.WithMsgID("junk")); err != nil {
		t.Fatal(err)
	}
	pub(subj.Response, imageSuccess(lastID), lastID+"/9/success")

	testenv.Eventually(t, 30*time.Second, func() error { return p.printed(lastID) })
	p.stop(t)

	rows := p.records(t)
	if n := len(rows[imageID]); n != 1 {
		t.Errorf("image record printed %d times, want once (duplicate and late failure must change nothing): %+v", n, rows[imageID])
	}
	img := last(t, rows, imageID)
	want := imageSuccess(imageID).Processed
	if img.Status != StatusReady || img.Kind != "image" || img.HighURL != want[0].URL || img.MediumURL != want[1].URL || img.LowURL != want[2].URL {
		t.Errorf("image record %+v does not carry the three WebP URLs of %+v", img, want)
	}
	vid := last(t, rows, videoID)
	wantV := videoSuccess(videoID).Processed
	if vid.Status != StatusReady || vid.Kind != "video" || vid.VideoURL != wantV[0].URL || vid.ThumbnailURL != wantV[1].URL || vid.HLSURL != wantV[2].URL {
		t.Errorf("video record %+v does not carry the MP4, poster and HLS URLs of %+v", vid, wantV)
	}
	if got := statuses(rows[failedID]); got != "failed,ready" {
		t.Errorf("failed-then-replayed record went %s, want failed,ready", got)
	}
	if f := rows[failedID][0]; !strings.Contains(f.Error, "unsupported media type") {
		t.Errorf("failure record error %q lost the worker's message", f.Error)
	}
	if v := last(t, rows, virusID); v.Status != StatusInfected || v.VirusName != "Eicar-Signature" || v.HighURL != "" {
		t.Errorf("virus record %+v, want infected by Eicar-Signature with no URLs", v)
	}
	if n := len(rows[virusID]); n != 1 {
		t.Errorf("virus record printed %d times; the failure response after the virus event must not change it", n)
	}
	if !strings.Contains(p.stderr.String(), "ignoring "+subj.Response) {
		t.Errorf("the malformed message was not reported on stderr:\n%s", p.stderr.String())
	}

	// Everything was acknowledged: nothing is pending or waiting for an ack.
	stream, err := js.StreamNameBySubject(ctx, subj.Response)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := js.Consumer(ctx, stream, "api")
	if err != nil {
		t.Fatalf("the example's durable consumer is gone: %v", err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.NumPending != 0 || info.NumAckPending != 0 {
		t.Errorf("after the run: %d pending, %d unacknowledged; want 0 and 0", info.NumPending, info.NumAckPending)
	}

	// While the API is down, responses wait in the stream; when it is back, it gets them and only them.
	pub(subj.Response, videoSuccess(laterID), laterID+"/10/success")
	p = startExample(t, bin, srv.ClientURL())
	testenv.Eventually(t, 30*time.Second, func() error { return p.printed(laterID) })
	p.stop(t)
	if rows := p.records(t); len(rows) != 1 {
		t.Errorf("after a restart the example printed records for %d media, want only the one published while it was down", len(rows))
	}
}

func imageSuccess(id string) contracts.Response {
	base := "https://cdn.example/u1/images/" + id + "/photo_"
	return contracts.Response{
		MediaID: id, OriginalURL: "https://api.example/v1/media/" + id, Success: true,
		Processed: []contracts.Variant{
			{Quality: contracts.QualityHigh, Format: contracts.FormatWebP, URL: base + "high.webp", Size: 245000, Width: 2048, Height: 1536},
			{Quality: contracts.QualityMedium, Format: contracts.FormatWebP, URL: base + "medium.webp", Size: 120000, Width: 1024, Height: 768},
			{Quality: contracts.QualityLow, Format: contracts.FormatWebP, URL: base + "low.webp", Size: 45000, Width: 480, Height: 360},
		},
		Metadata: &contracts.Metadata{MIME: "image/jpeg", Width: 4000, Height: 3000},
	}
}

func videoSuccess(id string) contracts.Response {
	return contracts.Response{
		MediaID: id, OriginalURL: "https://api.example/v1/media/" + id, Success: true,
		Processed: []contracts.Variant{
			{Quality: contracts.QualityOriginal, Format: contracts.FormatMP4, URL: "https://cdn.example/u1/videos/" + id + "/mp4/clip.mp4", Size: 8200000},
			{Quality: contracts.QualityThumbnail, Format: contracts.FormatJPG, URL: "https://cdn.example/u1/thumbnail/" + id + "/poster.jpg", Size: 85000},
			{Quality: contracts.QualityOriginal, Format: contracts.FormatM3U8, URL: "https://cdn.example/u1/videos/" + id + "/hls/index.m3u8", Size: 400},
		},
		Metadata: &contracts.Metadata{MIME: "video/quicktime", DurationSeconds: 10, VideoCodec: "h264", AudioCodec: "aac"},
	}
}

func failure(id, msg string) contracts.Response {
	return contracts.Response{MediaID: id, OriginalURL: "https://api.example/v1/media/" + id, Error: msg}
}

func virusEvent(id string) contracts.VirusEvent {
	return contracts.VirusEvent{
		MediaID: id, S3Key: "u1/invoice.jpg", S3Bucket: "media", MediaURL: "https://api.example/v1/media/" + id,
		VirusName: "Eicar-Signature", DetectedAt: time.Now().UTC().Format(time.RFC3339),
		ActionTaken: contracts.ActionDeleted,
	}
}

// buildExample compiles the example as a user would, into the test's temp dir.
func buildExample(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "apiconsumer")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("building the example: %v\n%s", err, out)
	}
	return bin
}

// proc is one run of the example with its output captured.
type proc struct {
	cmd     *exec.Cmd
	stdout  testenv.LockedBuffer
	stderr  testenv.LockedBuffer
	done    chan error
	stopped bool
}

func startExample(t *testing.T, bin, url string) *proc {
	t.Helper()
	p := &proc{done: make(chan error, 1)}
	p.cmd = exec.Command(bin, "--nats-url", url)
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		if !p.stopped {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// stop sends SIGINT, as Ctrl-C or a container runtime would, and expects a clean exit.
func (p *proc) stop(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGINT)
	select {
	case err := <-p.done:
		p.stopped = true
		if err != nil {
			t.Fatalf("the example exited with %v; stderr:\n%s", err, p.stderr.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("the example did not stop within 15s of SIGINT; stderr:\n%s", p.stderr.String())
	}
}

func (p *proc) printed(mediaID string) error {
	if !strings.Contains(p.stdout.String(), `"mediaId":"`+mediaID+`"`) {
		return fmt.Errorf("no record for %s yet; stdout:\n%s\nstderr:\n%s", mediaID, p.stdout.String(), p.stderr.String())
	}
	return nil
}

// records decodes every printed line, grouped by mediaId in print order.
func (p *proc) records(t *testing.T) map[string][]Media {
	t.Helper()
	out := map[string][]Media{}
	sc := bufio.NewScanner(strings.NewReader(p.stdout.String()))
	for sc.Scan() {
		var m Media
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("stdout line %q is not a JSON record: %v", sc.Text(), err)
		}
		out[m.MediaID] = append(out[m.MediaID], m)
	}
	return out
}

func last(t *testing.T, rows map[string][]Media, id string) Media {
	t.Helper()
	rs := rows[id]
	if len(rs) == 0 {
		t.Fatalf("no record printed for %s", id)
	}
	return rs[len(rs)-1]
}

func statuses(rs []Media) string {
	var s []string
	for _, r := range rs {
		s = append(s, r.Status)
	}
	return strings.Join(s, ",")
}
