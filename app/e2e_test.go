package app_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/mediaworker/mediaworker/app"
	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/job"
	"github.com/mediaworker/mediaworker/objstore"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// world is one running worker with real parts around it: a JetStream server, clamd with the dev
// signatures, an object store (versitygw or the JetStream object store), libvips and ffmpeg.
type world struct {
	t      *testing.T
	app    *app.App
	cfg    app.Config
	nc     *nats.Conn
	js     jetstream.JetStream
	store  objstore.Store
	subj   contracts.Subjects
	bucket string
	s3     *testenv.VersityGW // with StorageS3

	mu        sync.Mutex
	responses map[string][]contracts.Response
	viruses   map[string][]contracts.VirusEvent
}

// runApp runs a worker as `mediaworker run` does, until the test ends (then it must stop within 30 s).
func runApp(t *testing.T, cfg app.Config, level zerolog.Level) *app.App {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	a, err := app.New(ctx, cfg, zerolog.New(zerolog.NewTestWriter(t)).Level(level))
	if err != nil {
		cancel()
		t.Fatalf("starting the worker: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
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
	})
	return a
}

func startWorld(t *testing.T, storage string, clamd *testenv.Clamd, tweak func(*app.Config)) *world {
	t.Helper()
	srv := testenv.StartNATS(t)
	cfg := app.DefaultConfig()
	cfg.NATS.URL = srv.ClientURL()
	cfg.Storage = storage
	cfg.Scanner.Addr = clamd.Addr
	cfg.Pipeline.TmpDir = t.TempDir()
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.PerLane[job.Image].Slots, cfg.PerLane[job.Video].Slots = 2, 1
	cfg.Worker.BackoffBase = 200 * time.Millisecond
	cfg.Worker.DrainTimeout = 20 * time.Second
	var s3 *testenv.VersityGW
	if storage == app.StorageS3 {
		s3 = testenv.StartS3(t)
		cfg.S3.Endpoint, cfg.S3.AccessKey, cfg.S3.SecretKey = s3.Endpoint, s3.AccessKey, s3.SecretKey
	}
	if tweak != nil {
		tweak(&cfg)
	}
	a := runApp(t, cfg, zerolog.InfoLevel)

	w := &world{t: t, app: a, cfg: cfg, subj: contracts.SubjectsFor(cfg.Streams.App), bucket: "media", s3: s3,
		responses: map[string][]contracts.Response{}, viruses: map[string][]contracts.VirusEvent{}}
	w.observe(srv)
	return w
}

// observe connects the world to the worker's NATS like the API would: the object store with the test
// bucket, and listeners recording every response and virus event.
func (w *world) observe(srv *server.Server) {
	w.t.Helper()
	w.observeConn(testenv.Connect(w.t, srv))
}

// observeConn is observe over a connection of the test's own (to a worker's embedded server, say).
func (w *world) observeConn(nc *nats.Conn) {
	w.t.Helper()
	w.nc = nc
	var err error
	if w.js, err = jetstream.New(w.nc); err != nil {
		w.t.Fatal(err)
	}
	if w.store, err = app.OpenStore(context.Background(), w.cfg, w.js); err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { w.store.Close() })
	if err := w.store.EnsureBucket(context.Background(), w.bucket); err != nil {
		w.t.Fatal(err)
	}
	w.listen()
}

// listen records every response and virus event, validating each against its schema as it arrives.
func (w *world) listen() {
	for _, s := range []string{w.subj.Response, w.subj.Virus} {
		sub, err := w.nc.Subscribe(s, func(m *nats.Msg) {
			schema := contracts.SchemaResponse
			if m.Subject == w.subj.Virus {
				schema = contracts.SchemaVirusEvent
			}
			if err := contracts.ValidateJSON(schema, m.Data); err != nil {
				w.t.Errorf("emitted %s does not match its schema: %v\n%s", m.Subject, err, m.Data)
			}
			w.mu.Lock()
			defer w.mu.Unlock()
			if m.Subject == w.subj.Virus {
				var v contracts.VirusEvent
				_ = json.Unmarshal(m.Data, &v)
				w.viruses[v.MediaID] = append(w.viruses[v.MediaID], v)
				return
			}
			var r contracts.Response
			_ = json.Unmarshal(m.Data, &r)
			w.responses[r.MediaID] = append(w.responses[r.MediaID], r)
		})
		if err != nil {
			w.t.Fatal(err)
		}
		w.t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	if err := w.nc.Flush(); err != nil {
		w.t.Fatal(err)
	}
}

// upload stores a local file under key and returns it.
func (w *world) upload(path, key string) string {
	w.t.Helper()
	if _, err := objstore.UploadFile(context.Background(), w.store, w.bucket, key, path, "application/octet-stream"); err != nil {
		w.t.Fatalf("uploading %s: %v", path, err)
	}
	return key
}

// request publishes an optimize request for key and returns its mediaId.
func (w *world) request(key string) string {
	w.t.Helper()
	req := testenv.NewRequest(w.bucket, key)
	testenv.PublishRequest(w.t, w.js, w.subj.Request, req)
	return req.MediaID
}

func (w *world) publishRaw(data []byte, msgID string) {
	w.t.Helper()
	testenv.PublishRaw(w.t, w.js, w.subj.Request, data, msgID)
}

// await waits for the one response of mediaId and checks that no second one follows.
// askRecipe uploads path as key, publishes a request for it naming recipe and returns the answer,
// which must be a success that echoes the recipe.
func (w *world) askRecipe(path, key, recipe string, timeout time.Duration) contracts.Response {
	w.t.Helper()
	w.upload(path, key)
	req := testenv.NewRequest(w.bucket, key)
	req.Recipe = recipe
	testenv.PublishRequest(w.t, w.js, w.subj.Request, req)
	r := w.await(req.MediaID, timeout)
	if !r.Success || r.Recipe != recipe {
		w.t.Fatalf("%s: %+v", key, r)
	}
	return r
}

func (w *world) await(id string, timeout time.Duration) contracts.Response {
	w.t.Helper()
	var r contracts.Response
	testenv.Eventually(w.t, timeout, func() error {
		w.mu.Lock()
		defer w.mu.Unlock()
		switch rs := w.responses[id]; len(rs) {
		case 0:
			return fmt.Errorf("no response for %s yet", id)
		case 1:
			r = rs[0]
			return nil
		default:
			w.t.Fatalf("%d responses for %s: %+v", len(rs), id, rs)
			return nil
		}
	})
	return r
}

// fetch downloads a key to a temp file.
func (w *world) fetch(key string) string {
	w.t.Helper()
	p := filepath.Join(w.t.TempDir(), filepath.Base(key))
	if _, err := objstore.DownloadFile(context.Background(), w.store, w.bucket, key, p, 0); err != nil {
		w.t.Fatalf("downloading %s: %v", key, err)
	}
	return p
}

func (w *world) exists(key string) bool {
	w.t.Helper()
	_, err := w.store.Stat(context.Background(), w.bucket, key)
	if err != nil && !errors.Is(err, objstore.ErrNotFound) {
		w.t.Fatalf("stat %s: %v", key, err)
	}
	return err == nil
}

func variant(t *testing.T, r contracts.Response, quality string) contracts.Variant {
	t.Helper()
	for _, v := range r.Processed {
		if v.Quality == quality {
			return v
		}
	}
	t.Fatalf("response has no %q variant: %+v", quality, r.Processed)
	return contracts.Variant{}
}

func keyFromURL(t *testing.T, w *world, url string) string {
	t.Helper()
	base := strings.TrimSuffix(w.store.URL(w.bucket, ""), "/")
	if !strings.HasPrefix(url, base+"/") {
		t.Fatalf("variant url %q is not under the store's base %q", url, base)
	}
	return strings.TrimPrefix(url, base+"/")
}

// scratchEmpty checks that no job left files behind.
func scratchEmpty(t *testing.T, w *world) {
	t.Helper()
	testenv.Eventually(t, 5*time.Second, func() error {
		entries, err := os.ReadDir(w.cfg.Pipeline.TmpDir)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if e.Name() != ".lock" {
				return fmt.Errorf("scratch dir still holds %s", e.Name())
			}
		}
		return nil
	})
}

func TestEndToEndOnS3(t *testing.T) {
	clamd := testenv.StartClamd(t)
	w := startWorld(t, app.StorageS3, clamd, nil)
	media := t.TempDir()

	// Publish everything first: the worker runs images and videos in their own pools.
	photoPath := testenv.MakeJPEG(t, media, 4000, 3000)
	photo := w.request(w.upload(photoPath, "u1/photo.jpg"))
	alpha := w.request(w.upload(testenv.MakePNGAlpha(t, media, 640, 480), "u1/logo.png"))
	clip := w.request(w.upload(testenv.MakeVideo(t, media, "clip.mov", testenv.VideoOpts{
		Width: 1920, Height: 1080, Seconds: 10, FPS: 25, ACodec: "aac"}), "u1/clip.mov"))
	eicarPath := filepath.Join(media, "eicar.com")
	if err := os.WriteFile(eicarPath, []byte(testenv.EICAR), 0o600); err != nil {
		t.Fatal(err)
	}
	eicar := w.request(w.upload(eicarPath, "u2/eicar.jpg"))
	jpegWithEICAR := filepath.Join(media, "cat.jpg")
	jpg, _ := os.ReadFile(testenv.MakeJPEG(t, t.TempDir(), 320, 240))
	if err := os.WriteFile(jpegWithEICAR, append(jpg, testenv.EICAR...), 0o600); err != nil {
		t.Fatal(err)
	}
	appended := w.request(w.upload(jpegWithEICAR, "u2/cat.jpg"))
	pdfPath := filepath.Join(media, "doc.pdf")
	if err := os.WriteFile(pdfPath, []byte(minimalPDF), 0o600); err != nil {
		t.Fatal(err)
	}
	pdf := w.request(w.upload(pdfPath, "u3/doc.jpg"))
	missing := uuid.NewString()
	w.publishRaw([]byte(`{"s3Bucket":"media","mediaId":"`+missing+`","mediaUrl":"https://api.example/m/1"}`), missing)

	t.Run("12 MP JPEG becomes three WebPs", func(t *testing.T) {
		r := w.await(photo, 2*time.Minute)
		if !r.Success || len(r.Processed) != 3 {
			t.Fatalf("want success with 3 variants, got %+v", r)
		}
		for q, edge := range map[string]int{"high": 2048, "medium": 1024, "low": 480} {
			v := variant(t, r, q)
			key := keyFromURL(t, w, v.URL)
			if want := "u1/images/" + photo + "/photo_" + q + ".webp"; key != want {
				t.Errorf("%s key %q, want %q", q, key, want)
			}
			img := testenv.DecodeImage(t, w.fetch(key))
			if img.Loader != "webpload" || max(img.Width, img.Height) != edge || math.Abs(float64(img.Width)/float64(img.Height)-4.0/3) > 0.01 {
				t.Errorf("%s: %s %dx%d, want webp with long edge %d and 4:3", q, img.Loader, img.Width, img.Height, edge)
			}
			fi, _ := os.Stat(w.fetch(key))
			if v.Size != fi.Size() || v.Format != "webp" {
				t.Errorf("%s: response says %d bytes %s, stored object has %d", q, v.Size, v.Format, fi.Size())
			}
		}
		if r.Metadata == nil || r.Metadata.Width != 4000 || r.Metadata.Height != 3000 || r.Metadata.MIME != "image/jpeg" {
			t.Fatalf("metadata: %+v", r.Metadata)
		}
		// S3 vouches for no digest: the worker hashes the bytes as they arrive.
		if want := fileSHA256(t, photoPath); r.Metadata.SHA256 != want {
			t.Errorf("metadata.sha256 %q, want the upload's %q", r.Metadata.SHA256, want)
		}
	})

	t.Run("PNG with alpha keeps alpha", func(t *testing.T) {
		r := w.await(alpha, time.Minute)
		if !r.Success {
			t.Fatalf("failed: %s", r.Error)
		}
		img := testenv.DecodeImage(t, w.fetch(keyFromURL(t, w, variant(t, r, "high").URL)))
		if img.Bands != 4 || img.Width != 640 {
			t.Errorf("high variant: %d bands, %d wide; want 4 bands (alpha) and no upscale (640)", img.Bands, img.Width)
		}
	})

	t.Run("EICAR alone is a virus", func(t *testing.T) { assertVirus(t, w, eicar, "u2/eicar.jpg") })
	t.Run("EICAR appended to a JPEG is a virus", func(t *testing.T) { assertVirus(t, w, appended, "u2/cat.jpg") })

	t.Run("a PDF is unsupported", func(t *testing.T) {
		r := w.await(pdf, time.Minute)
		if r.Success || !strings.Contains(r.Error, "unsupported media type: application/pdf") {
			t.Fatalf("want an unsupported-type failure, got %+v", r)
		}
	})

	t.Run("a request without s3Key names the field", func(t *testing.T) {
		r := w.await(missing, time.Minute)
		if r.Success || !strings.Contains(r.Error, "s3Key is missing") || r.OriginalURL != "https://api.example/m/1" {
			t.Fatalf("want a failure naming s3Key, got %+v", r)
		}
	})

	t.Run("10 s 1080p MOV becomes H.264/AAC MP4 and a poster", func(t *testing.T) {
		r := w.await(clip, 4*time.Minute)
		if !r.Success {
			t.Fatalf("failed: %s", r.Error)
		}
		mp4 := variant(t, r, "original")
		key := keyFromURL(t, w, mp4.URL)
		if want := "u1/videos/" + clip + "/mp4/clip.mp4"; key != want || mp4.Format != "mp4" {
			t.Errorf("mp4 key %q format %q, want %q mp4", key, mp4.Format, want)
		}
		p := testenv.FFprobe(t, w.fetch(key))
		v, a := p.Stream("video"), p.Stream("audio")
		if v == nil || v.CodecName != "h264" || a == nil || a.CodecName != "aac" {
			t.Fatalf("streams: %+v", p.Streams)
		}
		if v.Height > 1080 || math.Abs(p.Duration-10) > 0.1 {
			t.Errorf("mp4 is %dx%d, %.3f s; want ≤1080p and 10±0.1 s", v.Width, v.Height, p.Duration)
		}
		poster := variant(t, r, "thumbnail")
		if poster.Format != "jpg" || keyFromURL(t, w, poster.URL) != "u1/thumbnail/"+clip+"/poster.jpg" {
			t.Errorf("poster variant: %+v", poster)
		}
		if img := testenv.DecodeImage(t, w.fetch(keyFromURL(t, w, poster.URL))); img.Loader != "jpegload" {
			t.Errorf("poster decodes as %s", img.Loader)
		}
		if r.Metadata == nil || r.Metadata.VideoCodec == "" || math.Abs(r.Metadata.DurationSeconds-10) > 0.1 {
			t.Errorf("metadata: %+v", r.Metadata)
		}
	})

	scratchEmpty(t, w)
}

// fileSHA256 is the lowercase hex SHA-256 of the file at path.
func fileSHA256(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func assertVirus(t *testing.T, w *world, id, key string) {
	t.Helper()
	r := w.await(id, time.Minute)
	if r.Success || r.Error != "virus detected: "+testenv.EICARSignature {
		t.Fatalf("want a virus failure, got %+v", r)
	}
	// The virus event is published before the response, but the test hears the two subjects on two
	// subscriptions, each with its own delivery goroutine: on a busy machine the response's callback
	// can run first. Wait for the event, then count.
	var events []contracts.VirusEvent
	testenv.Eventually(t, 10*time.Second, func() error {
		w.mu.Lock()
		defer w.mu.Unlock()
		if events = w.viruses[id]; len(events) == 0 {
			return fmt.Errorf("no virus event for %s yet", id)
		}
		return nil
	})
	if len(events) != 1 {
		t.Fatalf("want one virus event, got %d", len(events))
	}
	ev := events[0]
	if ev.VirusName != testenv.EICARSignature || ev.S3Key != key || ev.ActionTaken != contracts.ActionDeleted {
		t.Errorf("virus event: %+v", ev)
	}
	if w.exists(key) {
		t.Errorf("infected object %s is still in the bucket", key)
	}
	k := contracts.KeysFor(contracts.Request{S3Key: key, MediaID: id})
	for _, out := range []string{k.Image("high"), k.Image("medium"), k.Image("low"), k.Video(), k.Poster()} {
		if w.exists(out) {
			t.Errorf("a variant was written for an infected upload: %s", out)
		}
	}
}

// The embedded default: JetStream object store, variants served by the worker's own HTTP server.
func TestEndToEndOnNATSObjectStore(t *testing.T) {
	clamd := testenv.StartClamd(t)
	w := startWorld(t, app.StorageNATS, clamd, nil)
	media := t.TempDir()
	photoPath := testenv.MakeJPEG(t, media, 1600, 1200)
	id := w.request(w.upload(photoPath, "site/p.jpg"))
	r := w.await(id, time.Minute)
	if !r.Success || len(r.Processed) != 3 {
		t.Fatalf("want success with 3 variants, got %+v", r)
	}
	// The JetStream object store records the content's SHA-256 and the download checks it, so the
	// answer's sha256 is the store's digest rather than a second hash of the bytes: it must still be
	// the upload's.
	if want := fileSHA256(t, photoPath); r.Metadata == nil || r.Metadata.SHA256 != want {
		t.Errorf("metadata %+v: sha256 want the upload's %q", r.Metadata, want)
	}
	for _, v := range r.Processed {
		if !strings.HasPrefix(v.URL, "http://"+w.app.HTTPAddr()+"/objects/media/site/images/"+id+"/") {
			t.Fatalf("variant url %q is not served by the worker", v.URL)
		}
		resp, err := http.Get(v.URL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.ContentLength != v.Size || resp.Header.Get("Content-Type") != "image/webp" {
			t.Errorf("GET %s: %s, %d bytes, %s; want 200, %d bytes, image/webp", v.URL, resp.Status, resp.ContentLength, resp.Header.Get("Content-Type"), v.Size)
		}
	}
	eicarPath := filepath.Join(media, "e.txt")
	_ = os.WriteFile(eicarPath, []byte(testenv.EICAR), 0o600)
	assertVirus(t, w, w.request(w.upload(eicarPath, "site/e.png")), "site/e.png")
	scratchEmpty(t, w)
}

// clamd down: the job waits and retries; nothing is processed unscanned.
func TestClamdDownMeansWaitNeverUnscanned(t *testing.T) {
	clamd := testenv.StartClamd(t)
	w := startWorld(t, app.StorageNATS, clamd, nil)
	clamd.Stop()
	id := w.request(w.upload(testenv.MakeJPEG(t, t.TempDir(), 800, 600), "u/p.jpg"))
	k := contracts.KeysFor(contracts.Request{S3Key: "u/p.jpg", MediaID: id})
	// Give the worker time for a few failed attempts.
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		w.mu.Lock()
		n := len(w.responses[id])
		w.mu.Unlock()
		if n > 0 || w.exists(k.Image("low")) {
			t.Fatal("a job was answered or transformed while clamd was down")
		}
		time.Sleep(100 * time.Millisecond)
	}
	clamd.Start()
	if r := w.await(id, time.Minute); !r.Success {
		t.Fatalf("after clamd came back: %+v", r)
	}
}

// An unparseable request has nobody to answer: it goes to the DLQ at once, and others keep flowing.
func TestUnparseableRequestIsDeadLettered(t *testing.T) {
	clamd := testenv.StartClamd(t)
	w := startWorld(t, app.StorageNATS, clamd, nil)
	w.publishRaw([]byte(`{"this is": not json`), "poison-1")
	id := w.request(w.upload(testenv.MakeJPEG(t, t.TempDir(), 640, 480), "u/ok.jpg"))
	if r := w.await(id, time.Minute); !r.Success {
		t.Fatalf("request after poison failed: %+v", r)
	}
	ctx := context.Background()
	stream, err := w.js.Stream(ctx, w.cfg.Streams.DLQStream())
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		info, err := stream.Info(ctx)
		if err != nil {
			return err
		}
		if info.State.Msgs != 1 {
			return fmt.Errorf("dlq holds %d messages", info.State.Msgs)
		}
		return nil
	})
	m, err := stream.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Data) != `{"this is": not json` || m.Header.Get("Mw-Reason") != "parse-error" || m.Header.Get("Mw-Last-Error") == "" {
		t.Fatalf("dead letter: %q headers %v", m.Data, m.Header)
	}
	req, _ := w.js.Stream(ctx, w.cfg.Streams.RequestsStream())
	testenv.Eventually(t, 10*time.Second, func() error {
		info, err := req.Info(ctx)
		if err != nil {
			return err
		}
		if info.State.Msgs != 0 {
			return fmt.Errorf("work queue still holds %d messages", info.State.Msgs)
		}
		return nil
	})
}

const minimalPDF = "%PDF-1.4\n1 0 obj<</Type/Catalog/Pages 2 0 R>>endobj\n2 0 obj<</Type/Pages/Kids[]/Count 0>>endobj\ntrailer<</Root 1 0 R>>\n%%EOF\n"
