package transcoder_test

import (
	"context"
	"fmt"
	"image"
	"image/jpeg"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/transcoder"
)

// vttCue is one cue of a storyboard's VTT: its times in ms and its region of the sprite.
type vttCue struct {
	start, end int64
	file       string
	x, y, w, h int
}

// parseStoryboardVTT reads a WebVTT file as players read a storyboard's: the WEBVTT header, NOTE
// blocks skipped, then cues of "HH:MM:SS.mmm --> HH:MM:SS.mmm" and a "file#xywh=x,y,w,h" payload.
func parseStoryboardVTT(t *testing.T, path string) []vttCue {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blocks := strings.Split(strings.TrimRight(string(data), "\n"), "\n\n")
	if blocks[0] != "WEBVTT" {
		t.Fatalf("VTT starts %q, want the WEBVTT header alone", blocks[0])
	}
	parseTime := func(s string) int64 {
		var h, m, sec, ms int64
		if n, err := fmt.Sscanf(s, "%02d:%02d:%02d.%03d", &h, &m, &sec, &ms); n != 4 || err != nil || len(s) != 12 || m > 59 || sec > 59 {
			t.Fatalf("timestamp %q is not HH:MM:SS.mmm", s)
		}
		return ((h*60+m)*60+sec)*1000 + ms
	}
	var cues []vttCue
	for _, b := range blocks[1:] {
		if strings.HasPrefix(b, "NOTE") {
			continue
		}
		lines := strings.Split(b, "\n")
		if len(lines) != 2 {
			t.Fatalf("cue %q: want a timing line and a payload", b)
		}
		from, to, ok := strings.Cut(lines[0], " --> ")
		if !ok {
			t.Fatalf("cue timing %q", lines[0])
		}
		c := vttCue{start: parseTime(from), end: parseTime(to)}
		file, frag, ok := strings.Cut(lines[1], "#xywh=")
		if !ok {
			t.Fatalf("cue payload %q has no #xywh=", lines[1])
		}
		c.file = file
		var nums []int
		for _, f := range strings.Split(frag, ",") {
			n, err := strconv.Atoi(f)
			if err != nil {
				t.Fatalf("cue payload %q: %v", lines[1], err)
			}
			nums = append(nums, n)
		}
		if len(nums) != 4 {
			t.Fatalf("cue payload %q: want x,y,w,h", lines[1])
		}
		c.x, c.y, c.w, c.h = nums[0], nums[1], nums[2], nums[3]
		cues = append(cues, c)
	}
	return cues
}

// checkStoryboard checks the files against the result and each other: the sprite a JPEG of the
// result's size, one cue per tile, contiguous from 0 to durationMs, each region a tile inside the
// sprite, distinct tiles showing different frames. It returns the cues and the sprite.
func checkStoryboard(t *testing.T, res transcoder.StoryboardResult, outDir string, durationMs int64, wantTiles int, wantInterval float64) ([]vttCue, image.Image) {
	t.Helper()
	if res.SpritePath != filepath.Join(outDir, "storyboard.jpg") || res.VTTPath != filepath.Join(outDir, "storyboard.vtt") {
		t.Errorf("files %q and %q", res.SpritePath, res.VTTPath)
	}
	if res.Tiles != wantTiles || res.IntervalSeconds != wantInterval {
		t.Errorf("%d tiles every %g s, want %d every %g s", res.Tiles, res.IntervalSeconds, wantTiles, wantInterval)
	}
	f, err := os.Open(res.SpritePath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sprite, err := jpeg.Decode(f)
	if err != nil {
		t.Fatalf("decoding the sprite: %v", err)
	}
	b := sprite.Bounds()
	if b.Dx() != res.SpriteWidth || b.Dy() != res.SpriteHeight {
		t.Errorf("sprite is %dx%d, result says %dx%d", b.Dx(), b.Dy(), res.SpriteWidth, res.SpriteHeight)
	}
	cues := parseStoryboardVTT(t, res.VTTPath)
	if len(cues) != res.Tiles {
		t.Fatalf("%d cues for %d tiles", len(cues), res.Tiles)
	}
	var next int64
	seen := map[[2]int]bool{}
	for i, c := range cues {
		if c.file != "storyboard.jpg" {
			t.Errorf("cue %d names %q, want the sprite's relative name", i, c.file)
		}
		if c.start != next || c.end <= c.start {
			t.Errorf("cue %d covers [%d, %d) ms, want it to start at %d and be non-empty", i, c.start, c.end, next)
		}
		next = c.end
		if c.x < 0 || c.y < 0 || c.w != res.TileWidth || c.h != res.TileHeight || c.x+c.w > b.Dx() || c.y+c.h > b.Dy() {
			t.Errorf("cue %d's region %d,%d %dx%d is not a %dx%d tile inside the %dx%d sprite", i, c.x, c.y, c.w, c.h,
				res.TileWidth, res.TileHeight, b.Dx(), b.Dy())
		}
		if seen[[2]int{c.x, c.y}] {
			t.Errorf("cue %d reuses the tile at %d,%d", i, c.x, c.y)
		}
		seen[[2]int{c.x, c.y}] = true
	}
	if next != durationMs {
		t.Errorf("the cues end at %d ms, want the duration, %d ms", next, durationMs)
	}
	// Every tile is a frame (testsrc2 is bright and colourful; an empty tile is black), and each
	// differs from the one before (testsrc2's timer and moving parts change every frame).
	for i, c := range cues {
		if l := meanTileLuma(sprite, c); l < 40 {
			t.Errorf("tile %d is dark (mean luma %.0f): an empty tile?", i, l)
		}
		if i > 0 {
			if d := tileDifference(sprite, cues[i-1], c); d < 2 {
				t.Errorf("tiles %d and %d differ by %.2f on average: the same frame?", i-1, i, d)
			}
		}
	}
	return cues, sprite
}

func lumaAt(img image.Image, x, y int) float64 {
	if m, ok := img.(*image.YCbCr); ok {
		return float64(m.Y[m.YOffset(x, y)])
	}
	r, g, b, _ := img.At(x, y).RGBA()
	return (0.299*float64(r) + 0.587*float64(g) + 0.114*float64(b)) / 257
}

func meanTileLuma(img image.Image, c vttCue) float64 {
	var sum float64
	for y := c.y; y < c.y+c.h; y++ {
		for x := c.x; x < c.x+c.w; x++ {
			sum += lumaAt(img, x, y)
		}
	}
	return sum / float64(c.w*c.h)
}

func tileDifference(img image.Image, a, b vttCue) float64 {
	var sum float64
	for y := range a.h {
		for x := range a.w {
			sum += math.Abs(lumaAt(img, a.x+x, a.y+y) - lumaAt(img, b.x+x, b.y+y))
		}
	}
	return sum / float64(a.w*a.h)
}

// storyboardOf probes src and makes its storyboard in a new directory.
func storyboardOf(t *testing.T, v *transcoder.Videos, src string, spec transcoder.StoryboardSpec) (transcoder.StoryboardResult, string) {
	t.Helper()
	ctx := context.Background()
	pr, err := v.Probe(ctx, src)
	if err != nil {
		t.Fatalf("Probe: %v", err)
	}
	out := t.TempDir()
	res, err := v.Storyboard(ctx, pr, out, spec)
	if err != nil {
		t.Fatalf("Storyboard: %v", err)
	}
	return res, out
}

func TestStoryboard20s(t *testing.T) {
	v := newVideos(t, transcoder.DefaultVideoConfig())
	src := testenv.MakeVideo(t, t.TempDir(), "20s.mp4", testenv.VideoOpts{Seconds: 20, FPS: 25, Container: "mp4"})
	res, out := storyboardOf(t, v, src, transcoder.StoryboardSpec{})
	// 320×240 at the default 160 px wide: 160×120 tiles, 10 in one row of the default 10 columns.
	if res.TileWidth != 160 || res.TileHeight != 120 || res.SpriteWidth != 1600 || res.SpriteHeight != 120 {
		t.Errorf("tiles %dx%d in a %dx%d sprite, want 160x120 in 1600x120", res.TileWidth, res.TileHeight, res.SpriteWidth, res.SpriteHeight)
	}
	cues, _ := checkStoryboard(t, res, out, 20000, 10, 2)
	for i, c := range cues {
		if c.start != int64(i)*2000 {
			t.Errorf("cue %d starts at %d ms, want %d", i, c.start, i*2000)
		}
	}
	data, _ := os.ReadFile(res.VTTPath)
	t.Logf("sprite %dx%d, %d bytes of VTT:\n%s", res.SpriteWidth, res.SpriteHeight, len(data), data)

	// Rows: 4 columns make 3 rows, the last one part empty; the cues use only the tiles that hold frames.
	res, out = storyboardOf(t, v, src, transcoder.StoryboardSpec{Columns: 4, TileWidth: 100})
	if res.TileWidth != 100 || res.TileHeight != 76 || res.SpriteWidth != 400 || res.SpriteHeight != 3*76 {
		t.Errorf("tiles %dx%d in a %dx%d sprite, want 100x76 in 400x228", res.TileWidth, res.TileHeight, res.SpriteWidth, res.SpriteHeight)
	}
	cues, _ = checkStoryboard(t, res, out, 20000, 10, 2)
	if c := cues[9]; c.x != 100 || c.y != 152 {
		t.Errorf("the 10th tile is at %d,%d, want 100,152 (second of the third row)", c.x, c.y)
	}
}

// TestStoryboardShortLastCue: 7 s every 2 s is 4 tiles, the last one covering 6 to 7 s.
func TestStoryboardShortLastCue(t *testing.T) {
	v := newVideos(t, transcoder.DefaultVideoConfig())
	src := testenv.MakeVideo(t, t.TempDir(), "7s.mov", testenv.VideoOpts{Seconds: 7, FPS: 25, ACodec: "aac"})
	res, out := storyboardOf(t, v, src, transcoder.StoryboardSpec{EverySeconds: 2})
	if res.SpriteWidth != 4*160 || res.SpriteHeight != 120 {
		t.Errorf("sprite %dx%d, want one row of 4 tiles, 640x120", res.SpriteWidth, res.SpriteHeight)
	}
	cues, _ := checkStoryboard(t, res, out, 7000, 4, 2)
	if last := cues[3]; last.start != 6000 || last.end != 7000 {
		t.Errorf("the last cue covers [%d, %d) ms, want [6000, 7000)", last.start, last.end)
	}
}

// TestStoryboardMaxTilesSpacesWider: at most 5 tiles over 20 s means one every 4 s, and the VTT's
// cues say so.
func TestStoryboardMaxTilesSpacesWider(t *testing.T) {
	v := newVideos(t, transcoder.DefaultVideoConfig())
	src := testenv.MakeVideo(t, t.TempDir(), "20s.mp4", testenv.VideoOpts{Seconds: 20, FPS: 25, Container: "mp4"})
	res, out := storyboardOf(t, v, src, transcoder.StoryboardSpec{EverySeconds: 2, MaxTiles: 5})
	cues, _ := checkStoryboard(t, res, out, 20000, 5, 4)
	for i, c := range cues {
		if c.start != int64(i)*4000 || c.end != int64(i+1)*4000 {
			t.Errorf("cue %d covers [%d, %d) ms, want [%d, %d)", i, c.start, c.end, i*4000, (i+1)*4000)
		}
	}
	// 7 tiles over 20 s do not divide it: a tile every 2.858 s, the last cue shorter, none over 7.
	res, out = storyboardOf(t, v, src, transcoder.StoryboardSpec{MaxTiles: 7})
	cues, _ = checkStoryboard(t, res, out, 20000, 7, 2.858)
	if last := cues[6]; last.start != 6*2858 || last.end != 20000 {
		t.Errorf("the last cue covers [%d, %d) ms, want [%d, 20000)", last.start, last.end, 6*2858)
	}
	if data, _ := os.ReadFile(res.VTTPath); !strings.Contains(string(data), "NOTE a frame every 2.858 s") {
		t.Errorf("the VTT does not note the wider interval:\n%s", data)
	}
}

// TestStoryboardHDRIsToneMapped: an HDR source's tiles are tone-mapped like the encode, not washed out.
func TestStoryboardHDRIsToneMapped(t *testing.T) {
	v := newVideos(t, transcoder.DefaultVideoConfig())
	dir := t.TempDir()
	src := testenv.MakePQClip(t, dir)
	untreated := testenv.MeasureFrame(t, src)
	ref := testenv.MeasureFrame(t, testenv.SDRReference(t, dir, 320, 180))
	res, _ := storyboardOf(t, v, src, transcoder.StoryboardSpec{EverySeconds: 0.5})
	got := testenv.MeasureFrame(t, res.SpritePath)
	t.Logf("sprite %dx%d (%d tiles): luma %.0f saturation %.0f (SDR pattern %.0f/%.0f, untreated %.0f/%.0f)",
		res.SpriteWidth, res.SpriteHeight, res.Tiles, got.Luma, got.Saturation, ref.Luma, ref.Saturation, untreated.Luma, untreated.Saturation)
	if got.Saturation < 0.65*ref.Saturation || math.Abs(got.Luma-ref.Luma) > 0.2*ref.Luma {
		t.Errorf("the sprite looks washed out or dark: luma %.0f saturation %.0f, SDR pattern %.0f/%.0f",
			got.Luma, got.Saturation, ref.Luma, ref.Saturation)
	}
}

func TestStoryboardSpecValidate(t *testing.T) {
	if err := (transcoder.StoryboardSpec{}).Validate(); err != nil {
		t.Errorf("the zero spec (all defaults): %v", err)
	}
	if err := (transcoder.StoryboardSpec{EverySeconds: 0.5, TileWidth: 240, Columns: 5, MaxTiles: 1000}).Validate(); err != nil {
		t.Errorf("a valid spec: %v", err)
	}
	for _, tc := range []struct {
		spec  transcoder.StoryboardSpec
		field string
	}{
		{transcoder.StoryboardSpec{EverySeconds: -1}, "every_seconds"},
		{transcoder.StoryboardSpec{EverySeconds: 0.01}, "every_seconds"},
		{transcoder.StoryboardSpec{EverySeconds: math.NaN()}, "every_seconds"},
		{transcoder.StoryboardSpec{EverySeconds: math.Inf(1)}, "every_seconds"},
		{transcoder.StoryboardSpec{TileWidth: -160}, "tile_width"},
		{transcoder.StoryboardSpec{TileWidth: 8}, "tile_width"},
		{transcoder.StoryboardSpec{TileWidth: 4000}, "tile_width"},
		{transcoder.StoryboardSpec{Columns: -1}, "columns"},
		{transcoder.StoryboardSpec{Columns: 1000}, "columns"},
		{transcoder.StoryboardSpec{Columns: 100, TileWidth: 1280}, "columns × tile_width"},
		{transcoder.StoryboardSpec{MaxTiles: -5}, "max_tiles"},
		{transcoder.StoryboardSpec{MaxTiles: 100000}, "max_tiles"},
	} {
		err := tc.spec.Validate()
		if err == nil || !strings.HasPrefix(err.Error(), tc.field+" ") {
			t.Errorf("%+v: got %v, want an error naming %s", tc.spec, err, tc.field)
		}
	}
	// Storyboard refuses an invalid spec before running anything, as the worker's fault (its config).
	v := newVideos(t, transcoder.DefaultVideoConfig())
	src := testenv.MakeVideo(t, t.TempDir(), "1s.mov", testenv.VideoOpts{})
	pr, err := v.Probe(context.Background(), src)
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	_, err = v.Storyboard(context.Background(), pr, out, transcoder.StoryboardSpec{Columns: -1})
	if err == nil || transcoder.IsBadInput(err) || !strings.Contains(err.Error(), "columns") {
		t.Errorf("Storyboard with columns -1: %v, want an internal error naming columns", err)
	}
	if entries, _ := os.ReadDir(out); len(entries) != 0 {
		t.Errorf("Storyboard with an invalid spec wrote %d files", len(entries))
	}
}

// storyboardChildCPU is the CPU time of this process's waited-for children (the ffmpeg runs) plus its own.
func storyboardChildCPU() time.Duration {
	var self, kids syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &kids)
	tv := func(t syscall.Timeval) time.Duration { return time.Duration(t.Nano()) }
	return tv(self.Utime) + tv(self.Stime) + tv(kids.Utime) + tv(kids.Stime)
}

// BenchmarkStoryboardCPU prices the default storyboard of a 20 s 1080p25 H.264/AAC MP4 (testsrc2), in
// CPU time (ffmpeg's and the worker's). Run it with
//
//	go test ./transcoder/ -run '^$' -bench BenchmarkStoryboardCPU -benchtime 5x
func BenchmarkStoryboardCPU(b *testing.B) {
	dir := b.TempDir()
	src := testenv.MakeVideo(b, dir, "src.mp4", testenv.VideoOpts{Width: 1920, Height: 1080, Seconds: 20, FPS: 25,
		ACodec: "aac", Container: "mp4", FastStart: true})
	v, err := transcoder.NewVideos(transcoder.DefaultVideoConfig())
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	pr, err := v.Probe(ctx, src)
	if err != nil {
		b.Fatal(err)
	}
	out := b.TempDir()
	var runs []time.Duration
	for range b.N {
		before := storyboardChildCPU()
		if _, err := v.Storyboard(ctx, pr, out, transcoder.StoryboardSpec{}); err != nil {
			b.Fatal(err)
		}
		runs = append(runs, storyboardChildCPU()-before)
	}
	slices.Sort(runs)
	b.ReportMetric(float64(runs[len(runs)/2].Milliseconds()), "cpu-ms")
}
