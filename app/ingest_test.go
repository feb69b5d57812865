package app_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/app"
	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/ingest"
	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/job"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// With ingest on for a bucket of the embedded default's object store, `nats obj put` is all it takes:
// the put's notice becomes a request nobody published, answered once with metadata.source. The same
// notice sent again, the variants the worker writes into the watched prefix and a put outside it start
// nothing.
func TestIngestNATSObjectPut(t *testing.T) {
	clamd := testenv.StartClamd(t)
	natsCLI := testenv.NATSCLI(t)
	listen := testenv.FreeAddr(t)
	cfg := app.DefaultConfig()
	cfg.NATS.Embedded.Listen, cfg.NATS.Embedded.DataDir = listen, t.TempDir()
	cfg.NATS.Embedded.SyncAlways = false
	cfg.Scanner.Addr = clamd.Addr
	cfg.Pipeline.TmpDir = t.TempDir()
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.PerLane[job.Image].Slots, cfg.PerLane[job.Video].Slots = 2, 1
	cfg.Ingest = ingest.Config{Enabled: true, Routes: "media/uploads/"}
	a := runApp(t, cfg, zerolog.InfoLevel)

	url := "nats://" + listen
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	w := &world{t: t, cfg: cfg, nc: nc, subj: contracts.SubjectsFor(cfg.Streams.App), bucket: "media",
		responses: map[string][]contracts.Response{}, viruses: map[string][]contracts.VirusEvent{}}
	if w.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	w.listen()
	media := t.TempDir()
	put := func(key, path string) {
		t.Helper()
		out, err := exec.Command(natsCLI, "--server", url, "obj", "put", "media", path, "--name", key, "--force", "--no-progress").CombinedOutput()
		if err != nil {
			t.Fatalf("nats obj put %s: %v\n%s", key, err, out)
		}
	}
	// answered waits until n media have an answer (each checked to be one by await) and returns the
	// one whose source names key.
	answered := func(n int, key string) contracts.Response {
		t.Helper()
		var got contracts.Response
		testenv.Eventually(t, 2*time.Minute, func() error {
			w.mu.Lock()
			defer w.mu.Unlock()
			if len(w.responses) < n {
				return fmt.Errorf("%d of %d uploads answered", len(w.responses), n)
			}
			for id, rs := range w.responses {
				if len(rs) != 1 {
					t.Fatalf("%d answers for %s: %+v", len(rs), id, rs)
				}
				if md := rs[0].Metadata; md != nil && md.Source != nil && md.Source.Key == key {
					got = rs[0]
				}
			}
			if len(w.responses) > n {
				t.Fatalf("%d uploads answered, want %d: %v", len(w.responses), n, w.responses)
			}
			if got.MediaID == "" {
				return fmt.Errorf("no answer for %s", key)
			}
			return nil
		})
		return got
	}

	put("uploads/u1/photo.jpg", testenv.MakeJPEG(t, media, 1600, 1200))
	r := answered(1, "uploads/u1/photo.jpg")
	src := r.Metadata.Source
	if !r.Success || len(r.Processed) != 3 || src.Kind != contracts.SourceNATSObjectStore || src.Bucket != "media" || src.VersionID == "" {
		t.Fatalf("answer %+v, source %+v", r, src)
	}
	if want := ingest.MediaID("media", "uploads/u1/photo.jpg", src.VersionID, ""); r.MediaID != want {
		t.Fatalf("mediaId %s, want %s (the version's)", r.MediaID, want)
	}
	// The original is named as `submit` names it: the worker's /objects serves variants only.
	if want := "nats://objectstore/media/uploads/u1/photo.jpg"; r.OriginalURL != want {
		t.Errorf("originalUrl %q, want %q", r.OriginalURL, want)
	}

	// The put's notice, sent three times more (as an at-least-once sender would).
	meta, err := w.js.Stream(context.Background(), "OBJ_media")
	if err != nil {
		t.Fatal(err)
	}
	var notice *jetstream.RawStreamMsg
	for seq := uint64(1); ; seq++ {
		m, err := meta.GetMsg(context.Background(), seq)
		if err != nil {
			t.Fatalf("no notice of uploads/u1/photo.jpg in OBJ_media: %v", err)
		}
		if strings.Contains(string(m.Data), `"name":"uploads/u1/photo.jpg"`) {
			notice = m
			break
		}
	}
	for range 3 {
		if _, err := w.js.Publish(context.Background(), notice.Subject, notice.Data); err != nil {
			t.Fatal(err)
		}
	}
	// Outside the prefix: nothing. The next upload's answer is the barrier: the consumer takes notices
	// in order, so every one before it (the repeats, the first job's variants, the outsider) was seen.
	put("other/photo.jpg", testenv.MakeJPEG(t, media, 320, 240))
	put("uploads/u2/small.jpg", testenv.MakeJPEG(t, media, 640, 480))
	r2 := answered(2, "uploads/u2/small.jpg")
	if !r2.Success {
		t.Fatalf("second upload: %+v", r2)
	}
	// A failure names its upload too (the schema check of every answer is listen's).
	notes := filepath.Join(media, "notes.txt")
	if err := os.WriteFile(notes, []byte("not a picture"), 0o600); err != nil {
		t.Fatal(err)
	}
	put("uploads/u3/notes.jpg", notes)
	if r := answered(3, "uploads/u3/notes.jpg"); r.Success || r.Error == "" {
		t.Fatalf("a text file: %+v", r)
	}
	// A new version of the same key is a new request.
	put("uploads/u1/photo.jpg", testenv.MakeJPEG(t, media, 800, 600))
	testenv.Eventually(t, 2*time.Minute, func() error {
		w.mu.Lock()
		defer w.mu.Unlock()
		if len(w.responses) != 4 {
			return fmt.Errorf("%d uploads answered, want 4", len(w.responses))
		}
		return nil
	})
	// What /metrics tells of it: four requests, the three repeats, the outsider, and the nine variants
	// the three jobs wrote into the watched prefix (three WebPs each), guarded.
	want := map[string]string{"published": "4", "duplicate": "3", "unwatched": "1", "guarded": "9", "malformed": "0", "ignored": "0"}
	testenv.Eventually(t, time.Minute, func() error {
		resp, err := http.Get("http://" + a.HTTPAddr() + "/metrics")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		for outcome, n := range want {
			line := `mediaworker_ingest_events_total{outcome="` + outcome + `"} ` + n + "\n"
			if !strings.Contains(string(body), line) {
				return fmt.Errorf("/metrics has no %q", strings.TrimSpace(line))
			}
		}
		return nil
	})
}

// Ingest settings that could only go wrong later are refused at start, each named: a route on the
// quarantine bucket (a loop), a recipe no config defines (every upload refused), S3 without events.
func TestIngestConfigRefusals(t *testing.T) {
	cfg := app.DefaultConfig()
	cfg.Pipeline.QuarantineBucket = "quarantine"
	cfg.Ingest = ingest.Config{Enabled: true, Routes: "media/u=avatar,quarantine"}
	cfg.Storage = app.StorageS3
	cfg.S3.Endpoint, cfg.S3.AccessKey, cfg.S3.SecretKey = "127.0.0.1:9", "a", "b"
	err := cfg.Validate()
	for _, want := range []string{`names the recipe "avatar"`, `"quarantine/" watches the quarantine bucket`, "needs the subjects the S3 server sends its events to"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate = %v; want it to say %q", err, want)
		}
	}
}
