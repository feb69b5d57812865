package pipeline

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/objstore"
	"github.com/mediaworker/mediaworker/scanner"
	"github.com/mediaworker/mediaworker/transcoder"
)

// These tests cover the classification logic with in-memory fakes. The real parts (MinIO, the
// JetStream object store, clamd, libvips, ffmpeg) run the same pipeline end to end in package app.

type memStore struct {
	mu       sync.Mutex
	objs     map[string][]byte
	variants map[string]bool // objects put under objstore.AsVariant
	failStat error
	failPut  error
	failGet  error
	failDel  error
	stall    bool // Get blocks until its context ends, like minio-go on a store that stopped answering
	calls    []string
	stats    int
}

func (m *memStore) k(b, k string) string { return b + "/" + k }

func (m *memStore) Stat(ctx context.Context, bucket, key string) (objstore.Info, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stats++
	if m.failStat != nil {
		return objstore.Info{}, m.failStat
	}
	d, ok := m.objs[m.k(bucket, key)]
	if !ok {
		return objstore.Info{}, fmt.Errorf("stat %s: %w", key, objstore.ErrNotFound)
	}
	return objstore.Info{Bucket: bucket, Key: key, Size: int64(len(d)), Variant: m.variants[m.k(bucket, key)]}, nil
}

func (m *memStore) Get(ctx context.Context, bucket, key string, w io.Writer) (int64, error) {
	if m.failGet != nil {
		return 0, m.failGet
	}
	if m.stall {
		<-ctx.Done()
		return 0, ctx.Err()
	}
	m.mu.Lock()
	d, ok := m.objs[m.k(bucket, key)]
	m.mu.Unlock()
	if !ok {
		return 0, objstore.ErrNotFound
	}
	n, err := w.Write(d)
	return int64(n), err
}

func (m *memStore) Put(ctx context.Context, bucket, key string, r io.Reader, size int64, ct string) error {
	if m.failPut != nil {
		return m.failPut
	}
	d, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.objs[m.k(bucket, key)] = d
	if objstore.PutsVariant(ctx) {
		if m.variants == nil {
			m.variants = map[string]bool{}
		}
		m.variants[m.k(bucket, key)] = true
	}
	m.calls = append(m.calls, "put "+key)
	return nil
}

func (m *memStore) Delete(ctx context.Context, bucket, key string) error {
	if m.failDel != nil {
		return m.failDel
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.objs, m.k(bucket, key))
	m.calls = append(m.calls, "delete "+bucket+"/"+key)
	return nil
}

func (m *memStore) Copy(ctx context.Context, sb, sk, db, dk string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.objs[m.k(db, dk)] = m.objs[m.k(sb, sk)]
	m.calls = append(m.calls, "copy "+sb+"/"+sk+" "+db+"/"+dk)
	return nil
}

func (m *memStore) EnsureBucket(context.Context, string) error { return nil }
func (m *memStore) Ping(context.Context) error                 { return nil }
func (m *memStore) URL(bucket, key string) string {
	return "https://store.example/" + bucket + "/" + key
}
func (m *memStore) Close() error { return nil }

type fakeScanner struct {
	verdict scanner.Verdict
	err     error
	scanned bool
}

func (f *fakeScanner) Scan(ctx context.Context, r io.Reader, size int64) (scanner.Verdict, error) {
	f.scanned = true
	if f.err != nil {
		return scanner.Verdict{}, f.err // like clamd refusing at once: nothing read
	}
	// Like the real scanner: every announced byte, or it is no verdict.
	n, err := io.Copy(io.Discard, r)
	if err != nil || n != size {
		return scanner.Verdict{}, &scanner.Error{Kind: scanner.Truncated, Op: "reading", Err: fmt.Errorf("got %d of %d bytes: %v", n, size, err)}
	}
	return f.verdict, nil
}

type fakeImages struct {
	err    error
	called bool
	block  bool // wait for ctx to end, like a stuck encoder killed by its context
	// badInputPath: refuse the input in words that name its scratch path (which no response may).
	badInputPath bool
	specs        []transcoder.ImageVariantSpec // the recipe's variants it was last asked for
}

func (f *fakeImages) TransformRecipe(ctx context.Context, src, out string, specs []transcoder.ImageVariantSpec) (transcoder.ImageResult, error) {
	f.specs = specs
	return f.Transform(ctx, src, out)
}

func (f *fakeImages) Transform(ctx context.Context, src, out string) (transcoder.ImageResult, error) {
	f.called = true
	if f.block {
		<-ctx.Done()
		return transcoder.ImageResult{}, ctx.Err()
	}
	if f.badInputPath {
		return transcoder.ImageResult{}, &transcoder.Error{BadInput: true, Msg: "cannot decode " + src, Err: errors.New("truncated")}
	}
	if f.err != nil {
		return transcoder.ImageResult{}, f.err
	}
	res := transcoder.ImageResult{Width: 10, Height: 10}
	for _, q := range []string{"high", "medium", "low"} {
		p := filepath.Join(out, q+".webp")
		if err := os.WriteFile(p, []byte("webp-"+q), 0o600); err != nil {
			return res, err
		}
		res.Variants = append(res.Variants, transcoder.ImageVariant{Quality: q, Path: p, Width: 10, Height: 10, Size: int64(len("webp-" + q))})
	}
	return res, nil
}

type fakeVideos struct{}

func (fakeVideos) Probe(ctx context.Context, path string) (*transcoder.VideoProbe, error) {
	return &transcoder.VideoProbe{Info: transcoder.VideoInfo{Duration: 1}}, nil
}

func (fakeVideos) TransformProbed(ctx context.Context, probe *transcoder.VideoProbe, out string) (transcoder.VideoResult, error) {
	return transcoder.VideoResult{}, errors.New("not used")
}

// jpegHeader is enough for content detection to say image/jpeg.
var jpegHeader = append([]byte{0xFF, 0xD8, 0xFF, 0xE0, 0, 0x10, 'J', 'F', 'I', 'F', 0}, bytes.Repeat([]byte{0}, 64)...)

type fixture struct {
	store  *memStore
	scan   *fakeScanner
	images *fakeImages
	cfg    Config
	req    contracts.Request
	alt    Deps   // a real store or scanner instead of the fakes, when set
	note   string // what a test expects the failure's detail to say
}

func newFixture(t *testing.T) *fixture {
	f := &fixture{
		store:  &memStore{objs: map[string][]byte{}},
		scan:   &fakeScanner{},
		images: &fakeImages{},
		cfg:    DefaultConfig(),
		req:    contracts.Request{S3Key: "u/p.jpg", S3Bucket: "media", MediaID: "550e8400-e29b-41d4-a716-446655440000", MediaURL: "https://a/1"},
	}
	f.cfg.TmpDir, f.cfg.MaxInputBytes, f.cfg.MinFreeBytes = t.TempDir(), 1<<20, 0
	f.store.objs["media/u/p.jpg"] = jpegHeader
	return f
}

func (f *fixture) run(t *testing.T) Outcome {
	t.Helper()
	d := Deps{Store: f.store, Scanner: f.scan, Images: f.images, Videos: fakeVideos{}}
	if f.alt.Store != nil {
		d.Store = f.alt.Store
	}
	if f.alt.Scanner != nil {
		d.Scanner = f.alt.Scanner
	}
	p, err := New(f.cfg, d)
	if err != nil {
		t.Fatal(err)
	}
	out := p.Process(context.Background(), f.req, "")
	entries, _ := os.ReadDir(f.cfg.TmpDir)
	if len(entries) != 0 {
		t.Errorf("scratch dir not cleaned: %d entries", len(entries))
	}
	if err := contracts.Validate(contracts.SchemaResponse, out.Response); err != nil {
		t.Errorf("outcome's response fails the schema: %v", err)
	}
	return out
}

func TestClassification(t *testing.T) {
	cases := []struct {
		name      string
		setup     func(*fixture)
		kind      Kind
		errSubstr string
		transform bool
	}{
		{"success", func(*fixture) {}, Success, "", true},
		{"missing object", func(f *fixture) { delete(f.store.objs, "media/u/p.jpg") }, Failed, `object "u/p.jpg" not found in bucket "media"`, false},
		{"empty object", func(f *fixture) { f.store.objs["media/u/p.jpg"] = nil }, Failed, "object is empty", false},
		{"too large", func(f *fixture) { f.cfg.MaxInputBytes = 10 }, Failed, "input is too large", false},
		{"store down", func(f *fixture) {
			f.store.failGet = &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
		}, Retry, "downloading: the object store could not be reached", false},
		{"clamd down", func(f *fixture) {
			f.scan.err = &scanner.Error{Kind: scanner.Unavailable, Op: "dialing", Err: errors.New("refused")}
		}, Retry, "scanning: the virus scanner could not be reached", false},
		{"over clamd limit", func(f *fixture) {
			f.scan.err = &scanner.Error{Kind: scanner.LimitExceeded, Op: "scanning", Err: errors.New("INSTREAM size limit exceeded")}
		}, Failed, "cannot be scanned", false},
		{"not media", func(f *fixture) { f.store.objs["media/u/p.jpg"] = []byte("%PDF-1.4\n%%EOF\n") }, Failed, "unsupported media type: application/pdf", false},
		{"corrupt image", func(f *fixture) { f.images.err = &transcoder.Error{BadInput: true, Msg: "truncated JPEG"} }, Failed, "truncated JPEG", true},
		{"internal transform failure", func(f *fixture) { f.images.err = &transcoder.Error{Msg: "disk full"} }, Retry, "disk full", true},
		{"upload fails", func(f *fixture) { f.store.failPut = errors.New("503 slow down") }, Retry, "uploading", true},
		{"scratch disk short", func(f *fixture) { f.cfg.MinFreeBytes = 1 << 62 }, Retry, "this job needs", false},
		// Wall-clock time is never the input's fault: a transform that runs past its cap is retried.
		{"stuck transform", func(f *fixture) {
			f.cfg.JobTimeout = 200 * time.Millisecond
			f.cfg.MaxTransformTime = 200 * time.Millisecond
			f.images.block = true
		}, Retry, "transforming: still running after 200ms", true},
		// A store that stops answering is a stall: transient.
		{"stalled store", func(f *fixture) {
			f.cfg.JobTimeout = 200 * time.Millisecond
			f.store.stall = true
		}, Retry, "downloading: no progress within 200ms", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			tc.setup(f)
			out := f.run(t)
			if out.Kind != tc.kind {
				t.Fatalf("kind %s, want %s (err %v)", out.Kind, tc.kind, out.Err)
			}
			if tc.errSubstr != "" && !strings.Contains(out.Response.Error, tc.errSubstr) {
				t.Errorf("error %q does not mention %q", out.Response.Error, tc.errSubstr)
			}
			if f.images.called != tc.transform {
				t.Errorf("transform called: %v, want %v", f.images.called, tc.transform)
			}
		})
	}
}

func TestSuccessResponseHasEveryVariantAtItsKey(t *testing.T) {
	f := newFixture(t)
	f.cfg.PublicBaseURL = "https://cdn.example/m"
	out := f.run(t)
	if out.Kind != Success || len(out.Response.Processed) != 3 {
		t.Fatalf("%+v", out)
	}
	if f.store.stats != 1 {
		t.Errorf("the object was looked up %d times in one job, want once", f.store.stats)
	}
	for _, v := range out.Response.Processed {
		key := "u/images/" + f.req.MediaID + "/p_" + v.Quality + ".webp"
		if v.URL != "https://cdn.example/m/"+key {
			t.Errorf("url %s", v.URL)
		}
		if got := f.store.objs["media/"+key]; int64(len(got)) != v.Size || v.Size == 0 {
			t.Errorf("%s: stored %d bytes, response says %d", key, len(got), v.Size)
		}
	}
}

func TestInfectedIsRemovedAndNothingTransformed(t *testing.T) {
	for _, quarantine := range []string{"", "quarantine"} {
		t.Run("quarantine="+quarantine, func(t *testing.T) {
			f := newFixture(t)
			f.cfg.QuarantineBucket = quarantine
			f.scan.verdict = scanner.Verdict{Infected: true, Signature: "Eicar-Test"}
			out := f.run(t)
			if out.Kind != Infected || out.Virus == nil || out.Response.Error != "virus detected: Eicar-Test" || f.images.called {
				t.Fatalf("%+v", out)
			}
			if _, ok := f.store.objs["media/u/p.jpg"]; ok {
				t.Error("infected object still in place")
			}
			want := contracts.ActionDeleted
			if quarantine != "" {
				want = contracts.ActionQuarantined
				if _, ok := f.store.objs["quarantine/u/p.jpg"]; !ok {
					t.Error("not copied to quarantine")
				}
			}
			if out.Virus.ActionTaken != want {
				t.Errorf("action %s, want %s", out.Virus.ActionTaken, want)
			}
			if _, err := time.Parse(time.RFC3339, out.Virus.DetectedAt); err != nil {
				t.Error(err)
			}
			if err := contracts.Validate(contracts.SchemaVirusEvent, out.Virus); err != nil {
				t.Error(err)
			}
		})
	}
	t.Run("delete fails", func(t *testing.T) {
		f := newFixture(t)
		f.scan.verdict = scanner.Verdict{Infected: true, Signature: "Eicar-Test"}
		f.store.failDel = errors.New("store down")
		if out := f.run(t); out.Kind != Retry || f.images.called {
			t.Fatalf("a failed removal must retry (and scan again), got %+v", out)
		}
	})
}

func TestCancelledJobIsTransient(t *testing.T) {
	f := newFixture(t)
	p, _ := New(f.cfg, Deps{Store: f.store, Scanner: f.scan, Images: f.images, Videos: fakeVideos{}})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if out := p.Process(ctx, f.req, ""); out.Kind != Retry || f.scan.scanned {
		t.Fatalf("%+v", out)
	}
}

type memVerdicts struct {
	m map[string]contracts.VirusEvent
}

func (v *memVerdicts) Remember(ctx context.Context, ev contracts.VirusEvent) error {
	v.m[ev.MediaID] = ev
	return nil
}

func (v *memVerdicts) Recall(ctx context.Context, id string) (*contracts.VirusEvent, error) {
	if ev, ok := v.m[id]; ok {
		return &ev, nil
	}
	return nil, nil
}

// The delete reached the store but its reply was lost: the next delivery finds no object and must
// still answer "virus detected", not "not found".
func TestVirusVerdictSurvivesALostDeleteReply(t *testing.T) {
	f := newFixture(t)
	f.scan.verdict = scanner.Verdict{Infected: true, Signature: "Eicar-Test"}
	verdicts := &memVerdicts{m: map[string]contracts.VirusEvent{}}
	p, err := New(f.cfg, Deps{Store: f.store, Scanner: f.scan, Images: f.images, Videos: fakeVideos{}, Verdicts: verdicts})
	if err != nil {
		t.Fatal(err)
	}
	delete(f.store.objs, "media/u/p.jpg") // what the lost-reply delete did
	if out := p.Process(context.Background(), f.req, ""); out.Kind != Failed {
		t.Fatalf("without a remembered verdict a missing object is a plain failure, got %s", out.Kind)
	}
	f.store.objs["media/u/p.jpg"] = jpegHeader
	f.store.failDel = errors.New("reply lost")
	if out := p.Process(context.Background(), f.req, ""); out.Kind != Retry {
		t.Fatalf("first delivery: %s %v", out.Kind, out.Err)
	}
	delete(f.store.objs, "media/u/p.jpg")
	out := p.Process(context.Background(), f.req, "")
	if out.Kind != Infected || out.Virus == nil || out.Response.Error != "virus detected: Eicar-Test" || f.images.called {
		t.Fatalf("redelivery after the object was removed: %+v", out)
	}
}
