package transcoder_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/transcoder"
)

// checkAnimated decodes a variant and checks it is an animation of frames frames with the delays
// (ms) and the first frame's colour of the source.
func checkAnimated(t *testing.T, path string, frames int, delay string) {
	t.Helper()
	info := testenv.DecodeImage(t, path)
	if got := info.Fields["n-pages"]; got != strconv.Itoa(frames) {
		t.Errorf("%s: n-pages %q, want %d", filepath.Base(path), got, frames)
	}
	if want := strings.TrimSpace(strings.Repeat(delay+" ", frames)); strings.TrimSpace(info.Fields["delay"]) != want {
		t.Errorf("%s: delays %q, want %q", filepath.Base(path), info.Fields["delay"], want)
	}
	if info.Fields["loop"] != "0" {
		t.Errorf("%s: loop %q, want 0 (forever, as the source)", filepath.Base(path), info.Fields["loop"])
	}
	px := testenv.Pixel(t, path, 10, 10) // page 0 is at the top of the stacked pages
	if len(px) < 3 || px[0] < 200 || px[1] > 60 || px[2] > 60 {
		t.Errorf("%s: first frame pixel %v, want red", filepath.Base(path), px)
	}
}

// TestImageAnimationsStayAnimated: an animated GIF and an animated WebP give animated WebP variants
// with every frame, the frame delays and the loop count of the source, each variant frame the size
// of the variant.
func TestImageAnimationsStayAnimated(t *testing.T) {
	cfg := transcoder.DefaultImageConfig()
	cfg.High, cfg.Medium, cfg.Low = 600, 300, 120 // small sizes keep the test quick; the code path is the same
	im := newImages(t, cfg)
	gif := testenv.MakeGIF(t, t.TempDir(), 800, 400, 5) // red, green, blue, red, green; 1 s each
	for name, src := range map[string]string{"gif": gif, "webp": testenv.MakeAnimatedWebP(t, t.TempDir(), 800, 400, 5)} {
		t.Run(name, func(t *testing.T) {
			out := t.TempDir()
			res, err := im.Transform(context.Background(), src, out)
			if err != nil {
				t.Fatalf("Transform: %v", err)
			}
			if res.Frames != 5 || len(res.Warnings) != 0 || res.Format != name {
				t.Errorf("result: %d frames, format %s, warnings %q; want 5 frames of %s, no warning", res.Frames, res.Format, res.Warnings, name)
			}
			want := [3][2]int{{600, 300}, {300, 150}, {120, 60}}
			for i, v := range res.Variants {
				if v.Width != want[i][0] || v.Height != want[i][1] {
					t.Errorf("%s: %dx%d, want %dx%d per frame", v.Quality, v.Width, v.Height, want[i][0], want[i][1])
				}
				checkAnimated(t, v.Path, 5, "1000")
			}
			// The third frame is blue: the frames are the source's, in order.
			px := testenv.Pixel(t, res.Variants[2].Path+"[page=2]", 10, 10)
			if len(px) < 3 || px[2] < 200 || px[2]-px[0] < 100 || px[2]-px[1] < 100 { // lossy WebP tints pure blue
				t.Errorf("third frame pixel %v, want blue", px)
			}
		})
	}
}

// TestImageAnimationBeyondBudgetGivesFirstFrame: an animation over the frame or pixel budget gives
// still variants of its first frame and a warning that says why.
func TestImageAnimationBeyondBudgetGivesFirstFrame(t *testing.T) {
	gif := testenv.MakeGIF(t, t.TempDir(), 320, 240, 4)
	for name, tc := range map[string]struct {
		cfg  func(*transcoder.ImageConfig)
		want string
	}{
		"frames": {func(c *transcoder.ImageConfig) { c.AnimationMaxFrames = 3 },
			"animation not kept: 4 frames of 320×240 (0.3 MP) exceed the animation budget of 3 frames and 25 MP; the variants show the first frame"},
		"pixels": {func(c *transcoder.ImageConfig) { c.AnimationMaxPixels = 200_000 },
			"animation not kept: 4 frames of 320×240 (0.3 MP) exceed the animation budget of 300 frames and 0.2 MP; the variants show the first frame"},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := transcoder.DefaultImageConfig()
			tc.cfg(&cfg)
			out := t.TempDir()
			res, err := newImages(t, cfg).Transform(context.Background(), gif, out)
			if err != nil {
				t.Fatalf("Transform: %v", err)
			}
			if res.Frames != 1 || len(res.Warnings) != 1 || res.Warnings[0] != tc.want {
				t.Errorf("got %d frames, warnings %q; want 1 frame and %q", res.Frames, res.Warnings, tc.want)
			}
			for _, info := range checkVariants(t, res, out, [3][2]int{{320, 240}, {320, 240}, {320, 240}}) {
				if n := info.Fields["n-pages"]; n != "" && n != "1" {
					t.Errorf("n-pages %q, want a still image", n)
				}
			}
			px := testenv.Pixel(t, res.Variants[0].Path, 160, 120)
			if len(px) < 3 || px[0] < 200 || px[1] > 60 || px[2] > 60 {
				t.Errorf("pixel = %v, want the first frame's red", px)
			}
		})
	}
}

// TestImageAPNGWarns: libvips 8.14 reads an APNG's default image only; the response must say the
// animation was not kept rather than flatten it silently.
func TestImageAPNGWarns(t *testing.T) {
	apng := testenv.MakeAPNG(t, t.TempDir(), 160, 120, 5)
	res, err := newImages(t, transcoder.DefaultImageConfig()).Transform(context.Background(), apng, t.TempDir())
	if err != nil {
		t.Fatalf("Transform: %v", err)
	}
	if res.Frames != 1 || len(res.Warnings) != 1 || !strings.HasPrefix(res.Warnings[0], "animation not kept: animated PNG (APNG)") {
		t.Errorf("got %d frames, warnings %q", res.Frames, res.Warnings)
	}
}

// TestImageAPNGAndAVIFSequenceStayAnimated: with ffmpeg at hand, the animations libvips 8.14 cannot
// read (APNG, AVIF image sequences) give animated WebPs too, frame durations kept.
func TestImageAPNGAndAVIFSequenceStayAnimated(t *testing.T) {
	im := newImages(t, transcoder.DefaultImageConfig())
	im.UseFFmpeg(newVideos(t, transcoder.DefaultVideoConfig()))
	for name, tc := range map[string]struct {
		path, format string
		frames       int
		delay        string
	}{
		"apng":          {testenv.MakeAPNG(t, t.TempDir(), 320, 240, 6), "png", 6, "200"},
		"avif sequence": {testenv.MakeAVIFSequence(t, t.TempDir(), 320, 240, 10), "avif", 10, "100"},
	} {
		t.Run(name, func(t *testing.T) {
			out := t.TempDir()
			res, err := im.Transform(context.Background(), tc.path, out)
			if err != nil {
				t.Fatalf("Transform: %v", err)
			}
			if res.Format != tc.format || res.Frames != tc.frames || res.Width != 320 || res.Height != 240 || len(res.Warnings) != 0 {
				t.Errorf("result %s %dx%d, %d frames, warnings %q; want %s 320x240, %d frames, none", res.Format, res.Width, res.Height, res.Frames, res.Warnings, tc.format, tc.frames)
			}
			for _, v := range res.Variants {
				info := testenv.DecodeImage(t, v.Path)
				if info.Fields["n-pages"] != strconv.Itoa(tc.frames) || strings.TrimSpace(info.Fields["delay"]) != strings.TrimSpace(strings.Repeat(tc.delay+" ", tc.frames)) {
					t.Errorf("%s: n-pages %q, delays %q; want %d frames of %s ms", v.Quality, info.Fields["n-pages"], info.Fields["delay"], tc.frames, tc.delay)
				}
			}
			if _, err := os.Stat(filepath.Join(out, "frames.ffmpeg.webp")); !os.IsNotExist(err) {
				t.Errorf("ffmpeg's intermediate was left behind: %v", err)
			}
		})
	}

	// Beyond the budget: the first frame, and the warning counts the source's frames.
	cfg := transcoder.DefaultImageConfig()
	cfg.AnimationMaxFrames = 4
	small := newImages(t, cfg)
	small.UseFFmpeg(newVideos(t, transcoder.DefaultVideoConfig()))
	for name, tc := range map[string]struct{ path, count string }{
		"apng":          {testenv.MakeAPNG(t, t.TempDir(), 160, 120, 6), "6"},
		"avif sequence": {testenv.MakeAVIFSequence(t, t.TempDir(), 160, 120, 10), "more than 4"},
	} {
		res, err := small.Transform(context.Background(), tc.path, t.TempDir())
		want := "animation not kept: " + tc.count + " frames of 160×120"
		if err != nil || res.Frames != 1 || len(res.Warnings) != 1 || !strings.HasPrefix(res.Warnings[0], want) {
			t.Errorf("%s over budget: %d frames, warnings %q, %v; want 1 frame and %q…", name, res.Frames, res.Warnings, err, want)
		}
	}
}

// TestImageAPNGFrameBombIsRefusedFromHeader: an APNG whose acTL declares 100000 frames is refused
// from its header, before ffmpeg starts.
func TestImageAPNGFrameBombIsRefusedFromHeader(t *testing.T) {
	data, err := os.ReadFile(testenv.MakeAPNG(t, t.TempDir(), 64, 48, 3))
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(data, []byte("acTL"))
	if i < 4 {
		t.Fatal("ffmpeg's APNG has no acTL chunk")
	}
	binary.BigEndian.PutUint32(data[i+4:], 100000) // num_frames
	binary.BigEndian.PutUint32(data[i+12:], crc32.ChecksumIEEE(data[i:i+12]))
	path := filepath.Join(t.TempDir(), "input")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	im := newImages(t, transcoder.DefaultImageConfig())
	im.UseFFmpeg(newVideos(t, transcoder.DefaultVideoConfig()))
	out := t.TempDir()
	_, err = im.Transform(context.Background(), path, out)
	if !transcoder.IsBadInput(err) || err.Error() != "image has 100000 frames, limit is 1000" {
		t.Fatalf("got %v, want the frame limit", err)
	}
	assertEmptyDir(t, out)
}

// TestImageDamagedAnimationsAreWordedForPeople: a cut APNG or AVIF sequence gives the frames that are
// there with a warning that says so, or, cut inside its first frame, an error in words, not ffmpeg's.
func TestImageDamagedAnimationsAreWordedForPeople(t *testing.T) {
	im := newImages(t, transcoder.DefaultImageConfig())
	im.UseFFmpeg(newVideos(t, transcoder.DefaultVideoConfig()))
	cut := func(src string, tenths int) string {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(t.TempDir(), "input")
		if err := os.WriteFile(p, data[:len(data)*tenths/10], 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	apng := testenv.MakeAPNG(t, t.TempDir(), 320, 240, 10)
	res, err := im.Transform(context.Background(), cut(apng, 5), t.TempDir())
	if err != nil || res.Frames < 2 || res.Frames >= 10 || len(res.Warnings) != 1 ||
		res.Warnings[0] != fmt.Sprintf("animation incomplete: the file holds %d of the 10 frames it declares (was the upload cut short?)", res.Frames) {
		t.Errorf("APNG cut in half: %d frames, warnings %q, %v", res.Frames, res.Warnings, err)
	}
	for name, tc := range map[string]struct{ src, want string }{
		"apng": {apng, "decoding image: the PNG animation is damaged or truncated (was the upload cut short?)"},
		"avif": {testenv.MakeAVIFSequence(t, t.TempDir(), 320, 240, 10), "decoding image: the AVIF animation is damaged or truncated (was the upload cut short?)"},
	} {
		_, err := im.Transform(context.Background(), cut(tc.src, 2), t.TempDir())
		if !transcoder.IsBadInput(err) || err.Error() != tc.want {
			t.Errorf("%s cut to a fifth: got %v, want %q", name, err, tc.want)
		}
	}
}
