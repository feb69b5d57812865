package pipeline

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/transcoder"
)

// TestMetadataBombIsAPermanentFailure: an upload carrying more metadata than the image transcoder
// takes (transcoder.ImageConfig.MaxMetadataBytes) ends as a permanent failure, not retried, whose
// answer tells the person how much it carried, the limit and what to do; real images with metadata
// still pass.
func TestMetadataBombIsAPermanentFailure(t *testing.T) {
	images, err := transcoder.NewImages(transcoder.DefaultImageConfig())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, tc := range []struct {
		name, path string
		kind       Kind
		answer     string
	}{
		{"jpeg with 18.7 MiB of APP1", testenv.MakeJPEGWithSegments(t, dir, "bomb.jpg", 0xE1, 300, 65533), Failed,
			"transforming: image carries 18.7 MiB of metadata (EXIF, XMP, colour profiles, comments); at most 16 MiB is accepted: remove the metadata and upload it again"},
		{"png with a 20 MiB text chunk", testenv.MakePNGWithChunk(t, dir, "bomb.png", "tEXt", 20<<20), Failed,
			"transforming: image carries 20.0 MiB of metadata (EXIF, XMP, colour profiles, comments); at most 16 MiB is accepted: remove the metadata and upload it again"},
		{"a phone photo's EXIF", testenv.MakeJPEGOrientation(t, dir, 640, 480, 6), Success, ""},
		{"a Display P3 profile", testenv.MakeJPEGDisplayP3(t, dir, 640, 480), Success, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.cfg.MaxInputBytes = 64 << 20
			data, err := os.ReadFile(tc.path)
			if err != nil {
				t.Fatal(err)
			}
			f.store.objs["media/u/p.jpg"] = data
			p, err := New(f.cfg, Deps{Store: f.store, Scanner: f.scan, Images: images, Videos: fakeVideos{}})
			if err != nil {
				t.Fatal(err)
			}
			out := p.Process(context.Background(), f.req, "")
			if out.Kind != tc.kind {
				t.Fatalf("got %s (%v), want %s", out.Kind, out.Err, tc.kind)
			}
			if err := contracts.Validate(contracts.SchemaResponse, out.Response); err != nil {
				t.Errorf("response fails the schema: %v", err)
			}
			if tc.kind == Success {
				return
			}
			var pe *Error
			if !errors.As(out.Err, &pe) || pe.Class != Permanent {
				t.Errorf("error %v, want a permanent one", out.Err)
			}
			if out.Response.Error != tc.answer {
				t.Errorf("answer %q,\nwant   %q", out.Response.Error, tc.answer)
			}
		})
	}
}

// estimateCounter is a transcoder.Images that counts the header reads of its memory estimate.
type estimateCounter struct {
	*transcoder.Images
	estimates int
}

func (e *estimateCounter) EstimateMemory(src string, specs []transcoder.ImageVariantSpec) int64 {
	e.estimates++
	return e.Images.EstimateMemory(src, specs)
}

// unlimited admits every job at once.
type unlimited struct{}

func (unlimited) Acquire(context.Context, int64) (func(), error) { return func() {}, nil }

// TestMetadataBombIsRefusedBeforeTheHeaderIsRead: issue 31 item 7. With a memory budget (the
// default), the estimate reads the image's header with libvips, and libjpeg's header read keeps every
// APPn segment: the worker held a bomb's metadata before the transform refused it. The metadata walk
// now runs right after detection, so a bomb never reaches the estimate; a real photo still does.
func TestMetadataBombIsRefusedBeforeTheHeaderIsRead(t *testing.T) {
	images, err := transcoder.NewImages(transcoder.DefaultImageConfig())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, tc := range []struct {
		name, path string
		kind       Kind
		estimates  int
	}{
		{"jpeg with 18.7 MiB of APP1", testenv.MakeJPEGWithSegments(t, dir, "bomb.jpg", 0xE1, 300, 65533), Failed, 0},
		{"a photo", testenv.MakeJPEG(t, dir, 640, 480), Success, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.cfg.MaxInputBytes = 64 << 20
			data, err := os.ReadFile(tc.path)
			if err != nil {
				t.Fatal(err)
			}
			f.store.objs["media/u/p.jpg"] = data
			counter := &estimateCounter{Images: images}
			p, err := New(f.cfg, Deps{Store: f.store, Scanner: f.scan, Images: counter, Videos: fakeVideos{}, Memory: unlimited{}})
			if err != nil {
				t.Fatal(err)
			}
			if out := p.Process(context.Background(), f.req, ""); out.Kind != tc.kind {
				t.Fatalf("got %s (%v), want %s", out.Kind, out.Err, tc.kind)
			}
			if counter.estimates != tc.estimates {
				t.Errorf("the memory estimate read the header %d times, want %d", counter.estimates, tc.estimates)
			}
		})
	}
}
