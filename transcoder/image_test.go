package transcoder_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/transcoder"
)

func newImages(t *testing.T, cfg transcoder.ImageConfig) *transcoder.Images {
	t.Helper()
	testenv.RequireBinary(t, "ffmpeg")
	testenv.RequireBinary(t, "vips")
	im, err := transcoder.NewImages(cfg)
	if err != nil {
		t.Fatalf("NewImages: %v", err)
	}
	return im
}

// checkVariants decodes every variant and checks its size against the result and the wanted dims.
func checkVariants(t *testing.T, res transcoder.ImageResult, outDir string, want [3][2]int) []testenv.ImageInfo {
	t.Helper()
	if len(res.Variants) != 3 {
		t.Fatalf("got %d variants, want 3", len(res.Variants))
	}
	var infos []testenv.ImageInfo
	for i, q := range []string{"high", "medium", "low"} {
		v := res.Variants[i]
		if v.Quality != q || v.Path != filepath.Join(outDir, q+".webp") {
			t.Errorf("variant %d is %q at %s, want %q at %s", i, v.Quality, v.Path, q, filepath.Join(outDir, q+".webp"))
		}
		info := testenv.DecodeImage(t, v.Path)
		if info.Loader != "webpload" {
			t.Errorf("%s: loader %q, want webpload", q, info.Loader)
		}
		if info.Width != want[i][0] || info.Height != want[i][1] {
			t.Errorf("%s: decoded %dx%d, want %dx%d", q, info.Width, info.Height, want[i][0], want[i][1])
		}
		if v.Width != info.Width || v.Height != info.Height {
			t.Errorf("%s: result says %dx%d, file is %dx%d", q, v.Width, v.Height, info.Width, info.Height)
		}
		st, err := os.Stat(v.Path)
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() != v.Size {
			t.Errorf("%s: result says %d bytes, file has %d", q, v.Size, st.Size())
		}
		for k := range info.Fields {
			if strings.HasPrefix(k, "exif") || k == "icc-profile-data" || k == "xmp-data" {
				t.Errorf("%s: metadata %q was not stripped", q, k)
			}
		}
		infos = append(infos, info)
	}
	return infos
}

func TestImage12MPJPEG(t *testing.T) {
	im := newImages(t, transcoder.DefaultImageConfig())
	src := testenv.MakeJPEG(t, t.TempDir(), 4000, 3000)
	out := t.TempDir()

	start := time.Now()
	res, err := im.Transform(context.Background(), src, out)
	elapsed := time.Since(start)
	if err != nil {
		t.Fatalf("Transform: %v", err)
	}
	t.Logf("12 MP JPEG → 3 WebP in %s", elapsed)

	if res.Width != 4000 || res.Height != 3000 || res.Format != "jpeg" || res.HasAlpha {
		t.Errorf("source described as %dx%d %s alpha=%v, want 4000x3000 jpeg alpha=false",
			res.Width, res.Height, res.Format, res.HasAlpha)
	}
	checkVariants(t, res, out, [3][2]int{{2048, 1536}, {1024, 768}, {480, 360}})
	v := res.Variants
	if !(v[0].Size > v[1].Size && v[1].Size > v[2].Size) {
		t.Errorf("sizes not decreasing: high %d, medium %d, low %d", v[0].Size, v[1].Size, v[2].Size)
	}
}

func TestImageSmallIsNotUpscaled(t *testing.T) {
	im := newImages(t, transcoder.DefaultImageConfig())
	src := testenv.MakeJPEG(t, t.TempDir(), 800, 600)
	out := t.TempDir()
	res, err := im.Transform(context.Background(), src, out)
	if err != nil {
		t.Fatalf("Transform: %v", err)
	}
	checkVariants(t, res, out, [3][2]int{{800, 600}, {800, 600}, {480, 360}})
}

func TestImageEXIFOrientationIsApplied(t *testing.T) {
	im := newImages(t, transcoder.DefaultImageConfig())
	// Stored 600×400 landscape; orientation 6 means "rotate 90° clockwise to view": 400×600 portrait.
	src := testenv.MakeJPEGOrientation(t, t.TempDir(), 600, 400, 6)
	out := t.TempDir()
	res, err := im.Transform(context.Background(), src, out)
	if err != nil {
		t.Fatalf("Transform: %v", err)
	}
	if res.Width != 400 || res.Height != 600 {
		t.Errorf("source described as %dx%d, want upright 400x600", res.Width, res.Height)
	}
	checkVariants(t, res, out, [3][2]int{{400, 600}, {400, 600}, {320, 480}})
}

// TestImageColourProfileIsApplied: metadata is stripped, so pixels must be converted to sRGB first or
// a Display P3 photo would lose its colours.
func TestImageColourProfileIsApplied(t *testing.T) {
	im := newImages(t, transcoder.DefaultImageConfig())
	src := testenv.MakeJPEGDisplayP3(t, t.TempDir(), 640, 480)
	if px := testenv.Pixel(t, src, 10, 10); px[0] > 245 || px[1] < 30 {
		t.Fatalf("control: stored P3 pixel %v, want about 234 51 35", px)
	}
	out := t.TempDir()
	res, err := im.Transform(context.Background(), src, out)
	if err != nil {
		t.Fatalf("Transform: %v", err)
	}
	checkVariants(t, res, out, [3][2]int{{640, 480}, {640, 480}, {480, 360}})
	for _, v := range res.Variants {
		if px := testenv.Pixel(t, v.Path, 10, 10); px[0] < 245 || px[1] > 15 || px[2] > 15 {
			t.Errorf("%s: pixel %v, want sRGB red (255 0 0)", v.Quality, px)
		}
	}
}

func TestImagePNGAlphaIsKept(t *testing.T) {
	im := newImages(t, transcoder.DefaultImageConfig())
	src := testenv.MakePNGAlpha(t, t.TempDir(), 640, 480)
	out := t.TempDir()
	res, err := im.Transform(context.Background(), src, out)
	if err != nil {
		t.Fatalf("Transform: %v", err)
	}
	if res.Format != "png" || !res.HasAlpha {
		t.Errorf("source described as %s alpha=%v, want png with alpha", res.Format, res.HasAlpha)
	}
	infos := checkVariants(t, res, out, [3][2]int{{640, 480}, {640, 480}, {480, 360}})
	for i, info := range infos {
		if info.Bands != 4 {
			t.Errorf("variant %d has %d bands, want 4 (RGBA)", i, info.Bands)
		}
	}
	px := testenv.Pixel(t, res.Variants[2].Path, 100, 100)
	if len(px) != 4 || px[3] < 110 || px[3] > 145 {
		t.Errorf("low variant pixel = %v, want alpha about 128", px)
	}
}

func TestImageOtherFormats(t *testing.T) {
	im := newImages(t, transcoder.DefaultImageConfig())
	for _, tc := range []struct {
		format string
		make   func(testing.TB, string, int, int) string
	}{
		{"webp", testenv.MakeWebP},
		{"tiff", testenv.MakeTIFF},
		{"heif", testenv.MakeHEIC},
	} {
		t.Run(tc.format, func(t *testing.T) {
			src := tc.make(t, t.TempDir(), 1200, 900)
			out := t.TempDir()
			res, err := im.Transform(context.Background(), src, out)
			if err != nil {
				t.Fatalf("Transform: %v", err)
			}
			if res.Format != tc.format || res.Width != 1200 || res.Height != 900 {
				t.Errorf("source described as %dx%d %s, want 1200x900 %s", res.Width, res.Height, res.Format, tc.format)
			}
			checkVariants(t, res, out, [3][2]int{{1200, 900}, {1024, 768}, {480, 360}})
		})
	}
}

func TestImageOverPixelLimitIsRefusedBeforeDecoding(t *testing.T) {
	im := newImages(t, transcoder.DefaultImageConfig())
	src := testenv.MakePNGHeader(t, t.TempDir(), 100000, 100000)
	out := t.TempDir()
	start := time.Now()
	_, err := im.Transform(context.Background(), src, out)
	elapsed := time.Since(start)
	if !transcoder.IsBadInput(err) {
		t.Fatalf("got %v, want a bad-input error", err)
	}
	if want := "image is 100000×100000 (10000 MP), limit is 50 MP"; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	// Decoding 10^10 RGB pixels would take 30 GB and minutes; refusing from the header is instant.
	if elapsed > 2*time.Second {
		t.Errorf("refusal took %s: was the image decoded?", elapsed)
	}
	assertEmptyDir(t, out)
}

func TestImageFrameLimits(t *testing.T) {
	src := testenv.MakeGIF(t, t.TempDir(), 320, 240, 3)

	cfg := transcoder.DefaultImageConfig()
	cfg.MaxFrames = 2
	_, err := newImages(t, cfg).Transform(context.Background(), src, t.TempDir())
	if !transcoder.IsBadInput(err) || err.Error() != "image has 3 frames, limit is 2" {
		t.Errorf("frame limit: got %v", err)
	}

	// Every declared frame counts towards the pixel limit, though only the first is decoded.
	cfg = transcoder.DefaultImageConfig()
	cfg.MaxPixels = 320 * 240 * 2
	_, err = newImages(t, cfg).Transform(context.Background(), src, t.TempDir())
	if !transcoder.IsBadInput(err) || err.Error() != "image is 320×240 × 3 frames (0.2 MP), limit is 0.2 MP" {
		t.Errorf("pixel limit over frames: got %v", err)
	}
}

func TestImageBadInputs(t *testing.T) {
	im := newImages(t, transcoder.DefaultImageConfig())
	dir := t.TempDir()

	jpeg, err := os.ReadFile(testenv.MakeJPEG(t, t.TempDir(), 800, 600))
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name, path, wantMsg string
	}{
		{"truncated jpeg", write("truncated.jpg", jpeg[:len(jpeg)/2]), "decoding image"},
		{"text", write("notes.jpg", []byte("just some text, not an image\n")), "unsupported image format"},
		{"empty", write("empty.png", nil), "unsupported image format"},
		// A libvips matrix file: libvips can load it, but the matrix loader is not on the allow-list.
		{"matrix", write("m.mat", []byte("2 2\n1 2\n3 4\n")), "unsupported image format"},
		// SVG and PPM loaders exist in this libvips build; both are blocked.
		{"svg", write("x.svg", []byte(`<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"/>`)), "unsupported image format"},
		{"ppm", write("x.ppm", []byte("P6\n2 2\n255\n\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00")), "unsupported image format"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := t.TempDir()
			_, err := im.Transform(context.Background(), tc.path, out)
			if !transcoder.IsBadInput(err) {
				t.Fatalf("got %v, want a bad-input error", err)
			}
			if !strings.HasPrefix(err.Error(), tc.wantMsg) {
				t.Errorf("error %q, want it to start with %q", err, tc.wantMsg)
			}
			t.Logf("%s: %v", tc.name, err)
		})
	}

	_, err = im.Transform(context.Background(), filepath.Join(dir, "missing.jpg"), t.TempDir())
	if err == nil || transcoder.IsBadInput(err) {
		t.Errorf("missing source: got %v, want an internal error", err)
	}
}

func TestImageCancelledContext(t *testing.T) {
	im := newImages(t, transcoder.DefaultImageConfig())
	src := testenv.MakeJPEG(t, t.TempDir(), 800, 600)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	out := t.TempDir()
	_, err := im.Transform(ctx, src, out)
	if !errors.Is(err, context.Canceled) || transcoder.IsBadInput(err) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	assertEmptyDir(t, out)
}

// TestImageConcurrent runs good and bad inputs at once: libvips' error buffer is process-global, and
// a failing job must not make a concurrent good one fail (or the other way round).
func TestImageConcurrent(t *testing.T) {
	im := newImages(t, transcoder.DefaultImageConfig())
	srcDir := t.TempDir()
	good := testenv.MakeJPEG(t, srcDir, 1600, 1200)
	data, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(srcDir, "bad.jpg")
	if err := os.WriteFile(bad, data[:len(data)/3], 0o644); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i%2 == 0 {
				res, err := im.Transform(context.Background(), good, t.TempDir())
				if err != nil || len(res.Variants) != 3 || res.Variants[0].Width != 1600 {
					t.Errorf("good input %d: %+v, %v", i, res, err)
				}
				return
			}
			if _, err := im.Transform(context.Background(), bad, t.TempDir()); !transcoder.IsBadInput(err) {
				t.Errorf("bad input %d: got %v, want a bad-input error", i, err)
			}
		}()
	}
	wg.Wait()
}

func TestImageConfigValidate(t *testing.T) {
	if err := transcoder.DefaultImageConfig().Validate(); err != nil {
		t.Fatalf("default config: %v", err)
	}
	for name, mutate := range map[string]func(*transcoder.ImageConfig){
		"zero max pixels":       func(c *transcoder.ImageConfig) { c.MaxPixels = 0 },
		"zero max frames":       func(c *transcoder.ImageConfig) { c.MaxFrames = 0 },
		"zero animation frames": func(c *transcoder.ImageConfig) { c.AnimationMaxFrames = 0 },
		"zero animation pixels": func(c *transcoder.ImageConfig) { c.AnimationMaxPixels = 0 },
		"medium > high":         func(c *transcoder.ImageConfig) { c.Medium = c.High + 1 },
		"zero low":              func(c *transcoder.ImageConfig) { c.Low = 0 },
		"too large":             func(c *transcoder.ImageConfig) { c.High = 20000 },
		"quality 0":             func(c *transcoder.ImageConfig) { c.QualityLow = 0 },
		"quality 101":           func(c *transcoder.ImageConfig) { c.QualityHigh = 101 },
		"effort 7":              func(c *transcoder.ImageConfig) { c.Effort = 7 },
	} {
		c := transcoder.DefaultImageConfig()
		mutate(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: Validate accepted %+v", name, c)
		}
		if _, err := transcoder.NewImages(c); err == nil {
			t.Errorf("%s: NewImages accepted %+v", name, c)
		}
	}
}

func assertEmptyDir(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Errorf("%s holds %d files, want none", dir, len(entries))
	}
}

// TestHEIFDecodeBudget: HEIC decodes share a pixel budget; an image larger than the whole budget
// still decodes (alone) instead of waiting forever, and concurrent ones all finish.
func TestHEIFDecodeBudget(t *testing.T) {
	cfg := transcoder.DefaultImageConfig()
	cfg.HEIFDecodePixels = 1000 // below one 64×48 image
	im, err := transcoder.NewImages(cfg)
	if err != nil {
		t.Fatal(err)
	}
	src := testenv.MakeHEIC(t, t.TempDir(), 64, 48)
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			_, err := im.Transform(context.Background(), src, t.TempDir())
			errs <- err
		}()
	}
	for range 4 {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(time.Minute):
			t.Fatal("HEIC transforms did not finish: the budget deadlocks")
		}
	}
	// A cancelled wait returns the context's error, not a failure of the image.
	hold, err := transcoder.NewImages(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := hold.Transform(ctx, src, t.TempDir()); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}
