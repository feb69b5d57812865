package pipeline

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mediaworker/mediaworker/scanner"
	"github.com/mediaworker/mediaworker/transcoder"
)

// getCounter is a memStore that counts downloads.
type getCounter struct {
	*memStore
	gets int
}

func (g *getCounter) Get(ctx context.Context, bucket, key string, w io.Writer) (int64, error) {
	g.gets++
	return g.memStore.Get(ctx, bucket, key, w)
}

// TestOversizedInputIsRefusedBeforeDownload: the object's size is checked against MaxInputBytes from
// Stat, so not one byte of an oversized upload is fetched, and the refusal names both sizes.
func TestOversizedInputIsRefusedBeforeDownload(t *testing.T) {
	f := newFixture(t)
	f.cfg.MaxInputBytes = 1_000_000
	f.store.objs["media/u/p.jpg"] = make([]byte, 2_500_000)
	store := &getCounter{memStore: f.store}
	p, err := New(f.cfg, Deps{Store: store, Scanner: f.scan, Images: f.images, Videos: fakeVideos{}})
	if err != nil {
		t.Fatal(err)
	}
	out := p.Process(context.Background(), f.req, "")
	var pe *Error
	if out.Kind != Failed || !errors.As(out.Err, &pe) || pe.Class != Permanent {
		t.Fatalf("got %s (%v), want a permanent failure", out.Kind, out.Err)
	}
	if want := "downloading: input is too large: object is 2.5 MB, limit is 1.0 MB"; out.Response.Error != want {
		t.Errorf("error %q, want %q", out.Response.Error, want)
	}
	if store.gets != 0 || f.scan.scanned || f.images.called {
		t.Errorf("downloads %d, scanned %v, transformed %v: want nothing after the size check", store.gets, f.scan.scanned, f.images.called)
	}
}

// pathRecorder is an image transformer that records the paths it was given.
type pathRecorder struct {
	fakeImages
	src, out string
}

func (r *pathRecorder) TransformRecipe(ctx context.Context, src, out string, _ []transcoder.ImageVariantSpec) (transcoder.ImageResult, error) {
	r.src, r.out = src, out
	return r.fakeImages.Transform(ctx, src, out)
}

// TestScratchPathsDoNotComeFromKeys: whatever the key, the transformer sees a fresh per-job directory
// with fixed names in it.
func TestScratchPathsDoNotComeFromKeys(t *testing.T) {
	for _, key := range []string{"u/p.jpg", "u/photo [1].jpg[shrink=8]", "a/b/-rf.jpg", "ünï/ß.jpg"} {
		f := newFixture(t)
		f.req.S3Key = key
		f.store.objs["media/"+key] = jpegHeader
		rec := &pathRecorder{}
		p, err := New(f.cfg, Deps{Store: f.store, Scanner: f.scan, Images: rec, Videos: fakeVideos{}})
		if err != nil {
			t.Fatal(err)
		}
		if out := p.Process(context.Background(), f.req, ""); out.Kind != Success {
			t.Fatalf("%q: %s %v", key, out.Kind, out.Err)
		}
		job := filepath.Dir(rec.src)
		if filepath.Dir(job) != f.cfg.TmpDir || !strings.HasPrefix(filepath.Base(job), ScratchPrefix) ||
			filepath.Base(rec.src) != "input" || rec.out != job {
			t.Errorf("%q: transformer got %s and %s, want <tmp>/%s*/input and its directory", key, rec.src, rec.out, ScratchPrefix)
		}
	}
}

// TestScanRefusalIsPermanent: an input clamd cannot scan in full fails for good, saying so.
func TestScanRefusalIsPermanent(t *testing.T) {
	f := newFixture(t)
	f.scan.err = &scanner.Error{Kind: scanner.LimitExceeded, Op: "scanning stream",
		Err:   errString("clamd could not scan the whole input: Heuristics.Limits.Exceeded.MaxFileSize"),
		Words: "clamd could not scan the whole input: Heuristics.Limits.Exceeded.MaxFileSize"} // as scanner's parseReply makes it
	out := f.run(t)
	if out.Kind != Failed || !strings.Contains(out.Response.Error, "the file cannot be scanned") ||
		!strings.Contains(out.Response.Error, "Heuristics.Limits.Exceeded.MaxFileSize") || f.images.called {
		t.Fatalf("got %s %q", out.Kind, out.Response.Error)
	}
}

type errString string

func (e errString) Error() string { return string(e) }
