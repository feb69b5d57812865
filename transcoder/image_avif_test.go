package transcoder_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/transcoder"
)

// mimetypeTestdata is the mimetype release whose module still ships its testdata directory (later
// releases leave it out of the module zip).
const mimetypeTestdata = "v1.4.3"

// TestImageAVIF: AVIF stills, one made by ffmpeg's libaom and one that mimetype ships, go through
// libvips' heif loader (libheif's AV1 decoder) to the three WebPs, under the HEIF decode budget.
func TestImageAVIF(t *testing.T) {
	cfg := transcoder.DefaultImageConfig()
	cfg.HEIFDecodePixels = 1000 // below every file here: each decodes alone, and none waits forever
	im := newImages(t, cfg)
	real := filepath.Join(testenv.ModuleDir(t, "github.com/gabriel-vasile/mimetype", mimetypeTestdata), "testdata", "avif.avif")
	for name, tc := range map[string]struct {
		path string
		w, h int
		want [3][2]int
	}{
		"ffmpeg libaom": {testenv.MakeAVIF(t, t.TempDir(), 1200, 900), 1200, 900, [3][2]int{{1200, 900}, {1024, 768}, {480, 360}}},
		"mimetype":      {real, 320, 180, [3][2]int{{320, 180}, {320, 180}, {320, 180}}},
	} {
		t.Run(name, func(t *testing.T) {
			out := t.TempDir()
			res, err := im.Transform(context.Background(), tc.path, out)
			if err != nil {
				t.Fatalf("Transform: %v", err)
			}
			if res.Format != "avif" || res.Width != tc.w || res.Height != tc.h || res.Frames != 1 {
				t.Errorf("source described as %dx%d %s (%d frames), want %dx%d avif", res.Width, res.Height, res.Format, res.Frames, tc.w, tc.h)
			}
			checkVariants(t, res, out, tc.want)
		})
	}
	// testsrc2's top-left is a saturated colour block, not grey: the AV1 decode kept colour.
	src := testenv.MakeAVIF(t, t.TempDir(), 640, 480)
	out := t.TempDir()
	res, err := im.Transform(context.Background(), src, out)
	if err != nil {
		t.Fatal(err)
	}
	want := testenv.Pixel(t, testenv.MakeJPEG(t, t.TempDir(), 640, 480), 40, 40)
	got := testenv.Pixel(t, res.Variants[0].Path, 40, 40)
	for i := range 3 {
		if d := got[i] - want[i]; d > 40 || d < -40 {
			t.Errorf("pixel (40,40) = %v, the same pattern as JPEG gives %v", got, want)
			break
		}
	}
}

// TestImageAVIFSequenceIsRefusedClearly: libheif 1.15 reads an AVIF's primary still image only, and
// an image sequence (ffmpeg's, mimetype's) has none: without ffmpeg (Images.UseFFmpeg) to decode it,
// the person is told so, in words.
func TestImageAVIFSequenceIsRefusedClearly(t *testing.T) {
	im := newImages(t, transcoder.DefaultImageConfig())
	const want = "unsupported image: animated AVIF (an image sequence without a still picture) cannot be read; upload it as an animated WebP or GIF, or as a video"
	for name, path := range map[string]string{
		"ffmpeg":   testenv.MakeAVIFSequence(t, t.TempDir(), 320, 240, 10),
		"mimetype": filepath.Join(testenv.ModuleDir(t, "github.com/gabriel-vasile/mimetype", mimetypeTestdata), "testdata", "avifsequence.avif"),
	} {
		_, err := im.Transform(context.Background(), path, t.TempDir())
		if !transcoder.IsBadInput(err) || err.Error() != want {
			t.Errorf("%s: got %v, want %q", name, err, want)
		}
	}
}

// TestImageAVIFOverTheSizeLimitsSaysSo: libheif refuses a picture over 16384 pixels on a side before
// libvips' header read ends, which libvips reports with a "bad seek" that once read as a truncated
// upload. The person is told the size and the limit it is over: the pixel limit when it is over that
// too, else the decoder's.
func TestImageAVIFOverTheSizeLimitsSaysSo(t *testing.T) {
	im := newImages(t, transcoder.DefaultImageConfig())
	dir := t.TempDir()
	for _, tc := range []struct {
		w, h int
		want string
	}{
		{60000, 60000, "image is 60000×60000 (3600 MP), limit is 50 MP"},
		{60000, 100, "image is 60000×100, limit is 16384×16384 for AVIF images"},
		// Within libheif's limit, the header read gives the size and the pixel limit refuses it.
		{16000, 16000, "image is 16000×16000 (256 MP), limit is 50 MP"},
	} {
		src := testenv.MakeAVIFDeclaring(t, dir, fmt.Sprintf("%dx%d.avif", tc.w, tc.h), tc.w, tc.h)
		out := t.TempDir()
		_, err := im.Transform(context.Background(), src, out)
		if !transcoder.IsBadInput(err) || err.Error() != tc.want {
			t.Errorf("%d×%d: got %v, want %q", tc.w, tc.h, err, tc.want)
		}
		assertEmptyDir(t, out)
	}
}
