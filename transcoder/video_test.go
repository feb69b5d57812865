package transcoder_test

import (
	"context"
	"errors"
	"fmt"
	"image/jpeg"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/transcoder"
)

func newVideos(t *testing.T, cfg transcoder.VideoConfig) *transcoder.Videos {
	t.Helper()
	testenv.RequireBinary(t, "ffmpeg")
	testenv.RequireBinary(t, "ffprobe")
	v, err := transcoder.NewVideos(cfg)
	if err != nil {
		t.Fatalf("NewVideos: %v", err)
	}
	return v
}

// checkMP4 ffprobes the encoded video: H.264 yuv420p (plus AAC when wantAudio), wantW×wantH, moov
// before mdat, and the result's description matching the file.
func checkMP4(t *testing.T, res transcoder.VideoResult, outDir string, wantW, wantH int, wantAudio bool) testenv.ProbeResult {
	t.Helper()
	if res.MP4Path != filepath.Join(outDir, "video.mp4") {
		t.Errorf("MP4 at %s, want %s", res.MP4Path, filepath.Join(outDir, "video.mp4"))
	}
	p := testenv.FFprobe(t, res.MP4Path)
	if !strings.Contains(p.FormatName, "mp4") {
		t.Errorf("format %q, want mp4", p.FormatName)
	}
	v := p.Stream("video")
	if v == nil || v.CodecName != "h264" || v.PixFmt != "yuv420p" || v.Width != wantW || v.Height != wantH {
		t.Errorf("video stream %+v, want h264 yuv420p %dx%d", v, wantW, wantH)
	}
	a := p.Stream("audio")
	if wantAudio && (a == nil || a.CodecName != "aac") {
		t.Errorf("audio stream %+v, want aac", a)
	}
	if !wantAudio && a != nil {
		t.Errorf("audio stream %+v, want none", a)
	}
	if len(p.Streams) != 1+btoi(wantAudio) {
		t.Errorf("%d streams, want %d", len(p.Streams), 1+btoi(wantAudio))
	}
	atoms := testenv.MP4Atoms(t, res.MP4Path)
	moov, mdat := slices.Index(atoms, "moov"), slices.Index(atoms, "mdat")
	if moov < 0 || mdat < 0 || moov > mdat {
		t.Errorf("top-level atoms %v: want moov before mdat (fast start)", atoms)
	}
	m := res.MP4
	if m.Width != wantW || m.Height != wantH || m.VideoCodec != "h264" || m.Container != "mp4" || m.HasAudio != wantAudio ||
		(wantAudio && m.AudioCodec != "aac") {
		t.Errorf("result describes the MP4 as %+v", m)
	}
	// The duration is read from the MP4's header for encodes, and must agree with ffprobe's.
	if math.Abs(m.Duration-p.Duration) > 0.05 {
		t.Errorf("result says the MP4 lasts %.3f s, ffprobe says %.3f s", m.Duration, p.Duration)
	}
	return p
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func checkPoster(t *testing.T, res transcoder.VideoResult, outDir string, wantW, wantH int) {
	t.Helper()
	if res.PosterErr != nil || res.PosterPath != filepath.Join(outDir, "poster.jpg") {
		t.Fatalf("poster %q, error %v", res.PosterPath, res.PosterErr)
	}
	if res.PosterWidth != wantW || res.PosterHeight != wantH {
		t.Errorf("result says the poster is %dx%d, want %dx%d", res.PosterWidth, res.PosterHeight, wantW, wantH)
	}
	info := testenv.DecodeImage(t, res.PosterPath)
	if info.Loader != "jpegload" || info.Width != wantW || info.Height != wantH {
		t.Errorf("poster is %dx%d (%s), want a %dx%d JPEG", info.Width, info.Height, info.Loader, wantW, wantH)
	}
}

func TestVideo1080pMOV(t *testing.T) {
	v := newVideos(t, transcoder.DefaultVideoConfig())
	src := source1080p10s(t)
	srcProbe := testenv.FFprobe(t, src)
	out := t.TempDir()

	start := time.Now()
	res, err := v.Transform(context.Background(), src, out)
	elapsed := time.Since(start)
	if err != nil {
		t.Fatalf("Transform: %v", err)
	}
	t.Logf("10 s 1080p MOV → MP4 + poster in %s", elapsed)

	s := res.Source
	if s.Container != "mov" || s.VideoCodec != "h264" || s.AudioCodec != "aac" || !s.HasAudio ||
		s.Width != 1920 || s.Height != 1080 || math.Abs(s.Duration-10) > 0.1 {
		t.Errorf("source described as %+v", s)
	}
	p := checkMP4(t, res, out, 1920, 1080, true)
	if d := p.Duration - srcProbe.Duration; math.Abs(d) > 0.1 {
		t.Errorf("MP4 lasts %.3f s, source %.3f s", p.Duration, srcProbe.Duration)
	}
	if math.Abs(res.MP4.Duration-p.Duration) > 0.001 {
		t.Errorf("result says %.3f s, file has %.3f s", res.MP4.Duration, p.Duration)
	}
	checkPoster(t, res, out, 1280, 720)
	if res.HLSDir != "" || res.HLSFiles != nil {
		t.Errorf("HLS output %q %v with HLS off", res.HLSDir, res.HLSFiles)
	}
}

func TestVideoScaling(t *testing.T) {
	v := newVideos(t, transcoder.DefaultVideoConfig())
	for _, tc := range []struct {
		name         string
		w, h         int
		wantW, wantH int
	}{
		{"1440p is scaled to 1080p", 2560, 1440, 1920, 1080},
		{"4K is scaled to 1080p", 3840, 2160, 1920, 1080},
		{"portrait caps the short edge", 1440, 2560, 1080, 1920}, // the poster's long edge: 720×1280
		{"small is not enlarged", 640, 360, 640, 360},
		{"odd sizes become even", 641, 361, 640, 360},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := testenv.MakeVideo(t, t.TempDir(), "src.mp4", testenv.VideoOpts{
				Width: tc.w, Height: tc.h, Seconds: 1, FPS: 5, ACodec: "aac", Container: "mp4",
			})
			out := t.TempDir()
			res, err := v.Transform(context.Background(), src, out)
			if err != nil {
				t.Fatalf("Transform: %v", err)
			}
			checkMP4(t, res, out, tc.wantW, tc.wantH, true)
			pw, ph := tc.wantW, tc.wantH // the poster: at most 1280 on its long edge
			if long := max(pw, ph); long > 1280 {
				pw, ph = pw*1280/long, ph*1280/long
			}
			checkPoster(t, res, out, pw, ph)
		})
	}
}

func TestVideoOtherInputs(t *testing.T) {
	v := newVideos(t, transcoder.DefaultVideoConfig())
	for _, tc := range []struct {
		name      string
		opts      testenv.VideoOpts
		container string
	}{
		{"h264 without audio in mp4", testenv.VideoOpts{VCodec: "h264", Container: "mp4"}, "mp4"},
		{"mjpeg and aac in mov", testenv.VideoOpts{VCodec: "mjpeg", ACodec: "aac", Container: "mov"}, "mov"},
		{"vp9 and opus in webm", testenv.VideoOpts{VCodec: "vp9", ACodec: "opus", Container: "webm"}, "webm"},
		{"hevc and aac in mkv", testenv.VideoOpts{VCodec: "hevc", ACodec: "aac", Container: "mkv"}, "matroska"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := testenv.MakeVideo(t, t.TempDir(), "upload.bin", tc.opts)
			out := t.TempDir()
			res, err := v.Transform(context.Background(), src, out)
			if err != nil {
				t.Fatalf("Transform: %v", err)
			}
			hasAudio := tc.opts.ACodec != ""
			if res.Source.Container != tc.container || res.Source.HasAudio != hasAudio {
				t.Errorf("source described as %+v, want container %s, audio %v", res.Source, tc.container, hasAudio)
			}
			checkMP4(t, res, out, 320, 240, hasAudio)
			checkPoster(t, res, out, 320, 240)
		})
	}
}

// TestVideoRotated: a phone video shot upright is stored landscape with a rotation; the MP4 and poster
// come out upright, with no rotation left for players to apply twice.
func TestVideoRotated(t *testing.T) {
	v := newVideos(t, transcoder.DefaultVideoConfig())
	src := testenv.MakeVideo(t, t.TempDir(), "portrait.mov", testenv.VideoOpts{
		Width: 640, Height: 360, ACodec: "aac", Rotate90: true,
	})
	out := t.TempDir()
	res, err := v.Transform(context.Background(), src, out)
	if err != nil {
		t.Fatalf("Transform: %v", err)
	}
	if res.Source.Width != 360 || res.Source.Height != 640 {
		t.Errorf("source described as %dx%d, want 360x640 as displayed", res.Source.Width, res.Source.Height)
	}
	checkMP4(t, res, out, 360, 640, true)
	checkPoster(t, res, out, 360, 640)
	rotated, err := exec.Command("ffprobe", "-v", "error", "-select_streams", "v:0",
		"-show_entries", "stream_side_data=rotation:stream_tags=rotate", "-of", "csv=p=0", res.MP4Path).Output()
	if err != nil || strings.TrimSpace(string(rotated)) != "" {
		t.Errorf("MP4 still carries a rotation: %q (%v)", rotated, err)
	}
}

func TestVideoCancelKillsFFmpeg(t *testing.T) {
	v := newVideos(t, transcoder.DefaultVideoConfig())
	src := source1080p10s(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	done := make(chan error, 1)
	go func() {
		_, err := v.Transform(ctx, src, t.TempDir())
		done <- err
	}()

	var pgid int
	testenv.Eventually(t, 10*time.Second, func() error {
		for _, p := range processes(t) {
			if p.ppid == os.Getpid() && p.comm == "ffmpeg" {
				pgid = p.pgid
				return nil
			}
		}
		return errors.New("ffmpeg has not started")
	})
	if pgid == os.Getpid() || pgid == 0 {
		t.Fatalf("ffmpeg runs in process group %d, want its own", pgid)
	}
	cancel()

	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) || transcoder.IsBadInput(err) {
			t.Errorf("Transform returned %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Transform did not return within 10s of the cancel")
	}
	testenv.Eventually(t, 5*time.Second, func() error {
		for _, p := range processes(t) {
			if p.pgid == pgid {
				return fmt.Errorf("process %d (%s) of group %d is still there", p.pid, p.comm, pgid)
			}
		}
		return nil
	})
}

type proc struct {
	pid, ppid, pgid int
	comm            string
}

// processes lists the processes in /proc (those that exit while being read are skipped).
func processes(t *testing.T) []proc {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var procs []proc
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...; comm may hold spaces and parentheses.
		s := string(stat)
		open, close := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || close < open {
			continue
		}
		f := strings.Fields(s[close+1:])
		if len(f) < 3 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		pgid, _ := strconv.Atoi(f[2])
		procs = append(procs, proc{pid: pid, ppid: ppid, pgid: pgid, comm: s[open+1 : close]})
	}
	return procs
}

func TestVideoConfigValidate(t *testing.T) {
	if err := transcoder.DefaultVideoConfig().Validate(); err != nil {
		t.Fatalf("default config: %v", err)
	}
	for name, mutate := range map[string]func(*transcoder.VideoConfig){
		"no ffmpeg":        func(c *transcoder.VideoConfig) { c.FFmpeg = "" },
		"no prlimit":       func(c *transcoder.VideoConfig) { c.Prlimit = "" },
		"tiny memory":      func(c *transcoder.VideoConfig) { c.MaxMemoryBytes = 100 << 20 },
		"no cpu time":      func(c *transcoder.VideoConfig) { c.MaxCPUTime = 0 },
		"crf 52":           func(c *transcoder.VideoConfig) { c.CRF = 52 },
		"unknown preset":   func(c *transcoder.VideoConfig) { c.Preset = "quick" },
		"bitrate":          func(c *transcoder.VideoConfig) { c.AudioBitrate = "128" },
		"zero threads":     func(c *transcoder.VideoConfig) { c.Threads = 0 },
		"zero duration":    func(c *transcoder.VideoConfig) { c.MaxDuration = 0 },
		"zero pixels":      func(c *transcoder.VideoConfig) { c.MaxPixels = 0 },
		"zero output":      func(c *transcoder.VideoConfig) { c.MaxOutputBytes = 0 },
		"tiny hls segment": func(c *transcoder.VideoConfig) { c.HLS, c.HLSSegment = true, time.Millisecond },
		"max height 1":     func(c *transcoder.VideoConfig) { c.MaxHeight = 1 },
	} {
		c := transcoder.DefaultVideoConfig()
		mutate(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: Validate accepted %+v", name, c)
		}
	}
	c := transcoder.DefaultVideoConfig()
	c.FFmpeg = "ffmpeg-that-does-not-exist"
	if _, err := transcoder.NewVideos(c); err == nil {
		t.Error("NewVideos accepted a missing ffmpeg")
	}
}

// TestVideoPosterTime: the poster is the frame at 10% of the video (here 0.3 s), not the first one,
// whether the video is re-encoded (the poster comes from the encode's own frames) or remuxed (a
// separate run seeks in the upload, decoding only reference frames). The clip is black for its first
// 0.15 s, white until 0.7 s and black again: with x264's B-frames (veryfast: up to 3 in a row at 25
// fps) the first reference frame at or after 0.3 s is still white, a poster far too late is not.
func TestVideoPosterTime(t *testing.T) {
	testenv.RequireBinary(t, "ffmpeg")
	dir := t.TempDir()
	src := filepath.Join(dir, "fade.mp4")
	cmd := exec.Command("ffmpeg", "-hide_banner", "-loglevel", "error",
		"-f", "lavfi", "-i", "color=c=black:s=320x240:r=25:d=3,format=yuv420p,geq=lum='if(between(T,0.15,0.7),235,16)':cb=128:cr=128",
		"-c:v", "libx264", "-preset", "veryfast", "-pix_fmt", "yuv420p", "-movflags", "+faststart", "-y", src)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("making the clip: %v\n%s", err, out)
	}
	for _, remux := range []bool{false, true} {
		t.Run(fmt.Sprintf("remux=%v", remux), func(t *testing.T) {
			cfg := transcoder.DefaultVideoConfig()
			cfg.Remux = remux
			out := t.TempDir()
			res, err := newVideos(t, cfg).Transform(context.Background(), src, out)
			if err != nil {
				t.Fatal(err)
			}
			if res.Remuxed != remux {
				t.Fatalf("Remuxed = %v, want %v", res.Remuxed, remux)
			}
			checkPoster(t, res, out, 320, 240)
			if l := meanLuma(t, res.PosterPath); l < 200 {
				t.Errorf("poster mean luma %.0f: a black frame (the first, or one after 0.7 s), not the one at 0.3 s (white)", l)
			}
		})
	}
}

// TestTransformProbedReprobesAChangedFile: a probe describes one file; if the file changed since,
// TransformProbed does not trust it.
func TestTransformProbedReprobesAChangedFile(t *testing.T) {
	v := newVideos(t, transcoder.DefaultVideoConfig())
	dir := t.TempDir()
	src := testenv.MakeVideo(t, dir, "a.mov", testenv.VideoOpts{Width: 320, Height: 240})
	pr, err := v.Probe(context.Background(), src)
	if err != nil {
		t.Fatal(err)
	}
	other := testenv.MakeVideo(t, dir, "b.mov", testenv.VideoOpts{Width: 160, Height: 120, Seconds: 2})
	if err := os.Rename(other, src); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	res, err := v.TransformProbed(context.Background(), pr, out)
	if err != nil {
		t.Fatal(err)
	}
	if res.Source.Width != 160 || res.MP4.Width != 160 {
		t.Errorf("source %+v, mp4 %+v: want the new 160×120 file", res.Source, res.MP4)
	}
}

// meanLuma is the average brightness (0-255) of a JPEG.
func meanLuma(t *testing.T, path string) float64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := jpeg.Decode(f)
	if err != nil {
		t.Fatalf("decoding %s: %v", path, err)
	}
	var sum, n float64
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y += 4 {
		for x := b.Min.X; x < b.Max.X; x += 4 {
			r, g, bl, _ := img.At(x, y).RGBA()
			sum += (0.299*float64(r) + 0.587*float64(g) + 0.114*float64(bl)) / 257
			n++
		}
	}
	return sum / n
}

// TestVideoOutputSizeIsTheFrameSize: the MP4's size in the result is its frames' size, as ffprobe
// and decoders report it, also when the pixels are not square (the MP4's track header then holds a
// display size: 853 for an anamorphic 720×480) or the source has odd dimensions (encoded one less).
func TestVideoOutputSizeIsTheFrameSize(t *testing.T) {
	testenv.RequireBinary(t, "ffmpeg")
	cfg := transcoder.DefaultVideoConfig()
	cfg.Remux = false
	v := newVideos(t, cfg)
	for _, c := range []struct {
		name, vf     string
		wantW, wantH int
	}{
		{"anamorphic", "setsar=32/27", 720, 480},
		{"odd", "scale=719:405,setsar=1", 718, 404},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			src := filepath.Join(dir, "src.mkv")
			cmd := exec.Command("ffmpeg", "-hide_banner", "-loglevel", "error",
				"-f", "lavfi", "-i", "testsrc2=s=720x480:r=10:d=1", "-vf", c.vf,
				"-c:v", "ffv1", "-y", src)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("making the clip: %v\n%s", err, out)
			}
			out := t.TempDir()
			res, err := v.Transform(context.Background(), src, out)
			if err != nil {
				t.Fatal(err)
			}
			checkMP4(t, res, out, c.wantW, c.wantH, false)
		})
	}
}

// TestVideoOnePixelWide: a valid video a pixel wide (or high) is encoded, not refused as damaged.
// H.264 in yuv420p needs even sides of at least 2, so the short edge becomes 2 and the long edge
// follows; an odd side is rounded down to even as before.
func TestVideoOnePixelWide(t *testing.T) {
	v := newVideos(t, transcoder.DefaultVideoConfig())
	dir := t.TempDir()
	for _, tc := range []struct {
		w, h, wantW, wantH int
	}{
		{1, 64, 2, 128},
		{64, 1, 128, 2},
		{1, 1, 2, 2},
		{3, 64, 2, 42},
	} {
		src := testenv.MakeThinVideo(t, dir, fmt.Sprintf("thin_%dx%d.mp4", tc.w, tc.h), tc.w, tc.h)
		out := t.TempDir()
		res, err := v.Transform(context.Background(), src, out)
		if err != nil {
			t.Errorf("%d×%d: %v (%s)", tc.w, tc.h, err, transcoder.ErrorDetail(err))
			continue
		}
		if res.Source.Width != tc.w || res.Source.Height != tc.h {
			t.Errorf("%d×%d: source described as %d×%d", tc.w, tc.h, res.Source.Width, res.Source.Height)
		}
		checkMP4(t, res, out, tc.wantW, tc.wantH, false)
		if res.PosterPath == "" {
			t.Errorf("%d×%d: no poster (%v)", tc.w, tc.h, res.PosterErr)
		}
	}
}
