package app_test

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/app"
	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/ingest"
	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/job"
	"github.com/mediaworker/mediaworker/objstore"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// startStoppable runs a worker that the test can stop (and start again with the same cfg).
func startStoppable(t *testing.T, cfg app.Config) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	a, err := app.New(ctx, cfg, zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel))
	if err != nil {
		cancel()
		t.Fatalf("starting the worker: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("worker stopped with: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("worker did not stop within 30s")
		}
		a.Close()
	}
	t.Cleanup(stop)
	return stop
}

// A real S3 server's own events, end to end: versitygw (built from the module proxy) sends its NATS
// event notifications; a PUT signed by curl into the watched prefix is answered once with nobody
// publishing a request; the same event sent three times more, the variants the worker writes into the
// bucket and a PUT outside the prefix start nothing; PUTs made while the worker is down are answered,
// once each, when it is back.
func TestIngestVersityGWEvents(t *testing.T) {
	clamd := testenv.StartClamd(t)
	srv := testenv.StartNATS(t)
	const topic = "s3.events"
	gw := testenv.StartVersityGW(t, testenv.VersityGWOptions{EventNATSURL: srv.ClientURL(), EventNATSTopic: topic})

	cfg := app.DefaultConfig()
	cfg.NATS.URL = srv.ClientURL()
	cfg.Storage = app.StorageS3
	cfg.S3.Endpoint, cfg.S3.AccessKey, cfg.S3.SecretKey = gw.Endpoint, gw.AccessKey, gw.SecretKey
	cfg.Scanner.Addr = clamd.Addr
	cfg.Pipeline.TmpDir = t.TempDir()
	cfg.HTTPAddr = ""
	cfg.PerLane[job.Image].Slots, cfg.PerLane[job.Video].Slots = 2, 1
	cfg.Ingest = ingest.Config{Enabled: true, Routes: "media/uploads/", Subjects: topic}

	w := &world{t: t, cfg: cfg, subj: contracts.SubjectsFor(cfg.Streams.App), bucket: "media",
		responses: map[string][]contracts.Response{}, viruses: map[string][]contracts.VirusEvent{}}
	w.observe(srv) // makes the bucket, records every answer
	stop := startStoppable(t, cfg)

	// Every event versitygw sends, as sent, to re-send one.
	events, err := w.nc.SubscribeSync(topic)
	if err != nil {
		t.Fatal(err)
	}
	media := t.TempDir()
	put := func(key, path string) {
		t.Helper()
		out, err := exec.Command("curl", "--silent", "--show-error", "--fail",
			"--aws-sigv4", "aws:amz:us-east-1:s3", "--user", gw.AccessKey+":"+gw.SecretKey,
			"-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD", "-H", "Content-Type: image/jpeg",
			"--upload-file", path, objstore.ObjectURL(gw.URL()+"/media", key)).CombinedOutput()
		if err != nil {
			t.Fatalf("curl PUT %s: %v\n%s", key, err, out)
		}
	}
	count := func() int {
		w.mu.Lock()
		defer w.mu.Unlock()
		for id, rs := range w.responses {
			if len(rs) != 1 {
				t.Fatalf("%d answers for %s: %+v", len(rs), id, rs)
			}
		}
		return len(w.responses)
	}
	waitFor := func(n int, timeout time.Duration) {
		t.Helper()
		testenv.Eventually(t, timeout, func() error {
			switch c := count(); {
			case c > n:
				t.Fatalf("%d uploads answered, want %d: something started a job that should not", c, n)
			case c < n:
				return fmt.Errorf("%d uploads answered, want %d", c, n)
			}
			return nil
		})
	}

	photo := testenv.MakeJPEG(t, media, 1200, 900)
	put("uploads/u1/my photo.jpg", photo)
	waitFor(1, 2*time.Minute)
	var first contracts.Response
	w.mu.Lock()
	for _, rs := range w.responses {
		first = rs[0]
	}
	w.mu.Unlock()
	src := first.Metadata.Source
	if !first.Success || len(first.Processed) != 3 || src == nil || src.Kind != contracts.SourceS3Event ||
		src.Key != "uploads/u1/my photo.jpg" || src.Event != "s3:ObjectCreated:Put" {
		t.Fatalf("answer %+v (source %+v)", first, src)
	}
	if want := ingest.MediaID("media", src.Key, src.VersionID, src.ETag); first.MediaID != want {
		t.Fatalf("mediaId %s, want %s", first.MediaID, want)
	}

	// The upload's event, sent three times more.
	var upload []byte
	for upload == nil {
		m, err := events.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("versitygw sent no event for the upload: %v", err)
		}
		if recs, _, err := ingest.ParseS3Event(m.Data); err == nil && len(recs) == 1 && recs[0].Key == "uploads/u1/my photo.jpg" && recs[0].Created() {
			upload = m.Data
		}
	}
	for range 3 {
		if err := w.nc.Publish(topic, upload); err != nil {
			t.Fatal(err)
		}
	}
	// Keys the events escape: what the record says is unescaped to the key itself (put by minio-go,
	// which signs such a key as S3 wants; curl 7.88's --aws-sigv4 does not).
	w.upload(photo, "uploads/u3/a+b%41 ü&.jpg")
	put("elsewhere/photo.jpg", photo)
	// The barrier: events are taken in order, so when this upload is answered every event before it
	// (the repeats, the outsider, the first job's variants) has been seen.
	put("uploads/u2/b.jpg", testenv.MakeJPEG(t, media, 320, 240))
	waitFor(3, 2*time.Minute)
	w.mu.Lock()
	for _, rs := range w.responses {
		if r := rs[0]; !r.Success {
			t.Errorf("%s: %+v (source %+v)", r.MediaID, r, r.Metadata)
		}
	}
	w.mu.Unlock()

	// Uploads while the worker is down wait in the events stream.
	stop()
	const n = 100
	small := testenv.MakeJPEG(t, media, 64, 48)
	for i := range n {
		put(filepath.Join("uploads/batch", fmt.Sprintf("%02d.jpg", i)), small)
	}
	js, _ := jetstream.New(w.nc)
	testenv.Eventually(t, 30*time.Second, func() error {
		s, err := js.Stream(context.Background(), ingest.EventsStream(cfg.Streams.App))
		if err != nil {
			return err
		}
		info, err := s.Info(context.Background())
		if err != nil {
			return err
		}
		if info.State.Msgs == 0 {
			return fmt.Errorf("events stream is empty")
		}
		return nil
	})
	startStoppable(t, cfg)
	waitFor(3+n, 3*time.Minute)
}
