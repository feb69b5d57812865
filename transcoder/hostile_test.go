package transcoder_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/transcoder"
)

// Hostile inputs and the limits the tools run under. See SECURITY.md.

// ourFFmpeg waits until a process named ffmpeg that this test process started is running and
// returns it.
func ourFFmpeg(t *testing.T) proc {
	t.Helper()
	var found proc
	testenv.Eventually(t, 10*time.Second, func() error {
		for _, p := range processes(t) {
			if p.ppid == os.Getpid() && p.comm == "ffmpeg" {
				found = p
				return nil
			}
		}
		return errors.New("ffmpeg has not started")
	})
	return found
}

// noFFmpegLeft checks that no ffmpeg or ffprobe started by this process is still there.
func noFFmpegLeft(t *testing.T) {
	t.Helper()
	testenv.Eventually(t, 5*time.Second, func() error {
		for _, p := range processes(t) {
			if p.ppid == os.Getpid() && (p.comm == "ffmpeg" || p.comm == "ffprobe" || p.comm == "prlimit") {
				return fmt.Errorf("process %d (%s) is still there", p.pid, p.comm)
			}
		}
		return nil
	})
}

// procLimits parses /proc/<pid>/limits into "Max cpu time" → [soft, hard].
func procLimits(t *testing.T, pid int) map[string][2]string {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	if err != nil {
		t.Fatal(err)
	}
	limits := map[string][2]string{}
	for _, line := range strings.Split(string(data), "\n")[1:] {
		if len(line) < 26 {
			continue
		}
		f := strings.Fields(line[26:])
		if len(f) >= 2 {
			limits[strings.TrimSpace(line[:26])] = [2]string{f[0], f[1]}
		}
	}
	return limits
}

// TestVideoToolRunsConfined looks at a running ffmpeg from outside: its resource limits were set
// before it started (prlimit execs it), its environment holds only PATH, and it works in the job's
// directory.
func TestVideoToolRunsConfined(t *testing.T) {
	cfg := transcoder.DefaultVideoConfig()
	cfg.MaxMemoryBytes = 1536 << 20
	cfg.MaxCPUTime = 300 * time.Second
	// An encode: one ffmpeg with the job's limits. (A remux runs its poster beside it, a second ffmpeg
	// with the shorter poster CPU limit, and either could be the one found below.)
	cfg.Remux = false
	v := newVideos(t, cfg)
	src := source1080p10s(t)
	out := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := v.Transform(ctx, src, out)
		done <- err
	}()

	p := ourFFmpeg(t)
	limits := procLimits(t, p.pid)
	for name, want := range map[string]string{
		"Max address space":  strconv.Itoa(1536 << 20),
		"Max cpu time":       "300",
		"Max file size":      strconv.FormatInt(cfg.MaxOutputBytes+64<<20, 10),
		"Max core file size": "0",
	} {
		if got := limits[name]; got != [2]string{want, want} {
			t.Errorf("%s: soft/hard %v, want %s for both", name, got, want)
		}
	}
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", p.pid))
	if err != nil {
		t.Fatal(err)
	}
	if env := strings.Split(strings.TrimRight(string(environ), "\x00"), "\x00"); len(env) != 1 || !strings.HasPrefix(env[0], "PATH=") {
		t.Errorf("ffmpeg's environment is %q, want only PATH", env)
	}
	if cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", p.pid)); err != nil || cwd != out {
		t.Errorf("ffmpeg works in %q (%v), want the job's directory %q", cwd, err, out)
	}
	if p.pgid != p.pid {
		t.Errorf("ffmpeg (pid %d) is in process group %d, want its own", p.pid, p.pgid)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Transform did not return within 10s of the cancel")
	}
	noFFmpegLeft(t)
}

func TestVideoCPUTimeLimit(t *testing.T) {
	cfg := transcoder.DefaultVideoConfig()
	cfg.MaxCPUTime = time.Second
	cfg.Remux = false // the source is H.264/AAC: make it encode
	v := newVideos(t, cfg)
	// The 10 s 1080p source takes several CPU-seconds to transcode.
	start := time.Now()
	_, err := v.Transform(context.Background(), source1080p10s(t), t.TempDir())
	elapsed := time.Since(start)
	if !transcoder.IsBadInput(err) {
		t.Fatalf("got %v, want a bad-input error", err)
	}
	if want := "transcoding video: the video needs more CPU time than the limit of 1s"; !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error %q, want it to start with %q", err, want)
	}
	t.Logf("refused after %s: %v", elapsed.Round(time.Millisecond), err)
	noFFmpegLeft(t)
}

func TestVideoMemoryLimit(t *testing.T) {
	cfg := transcoder.DefaultVideoConfig()
	// Enough for a 1080p source (about 700 MB with two threads), not for an 8K one.
	cfg.MaxMemoryBytes = 768 << 20
	v := newVideos(t, cfg)
	src := testenv.MakeVideo(t, t.TempDir(), "8k.mp4", testenv.VideoOpts{Width: 7680, Height: 4320, FPS: 5, Container: "mp4"})
	_, err := v.Transform(context.Background(), src, t.TempDir())
	if !transcoder.IsBadInput(err) {
		t.Fatalf("got %v, want a bad-input error", err)
	}
	if want := "transcoding video: the video needs more memory than the limit of 768 MiB (512 MiB per allocation)"; !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error %q, want it to start with %q", err, want)
	}
	t.Logf("%v", err)
	noFFmpegLeft(t)
}

func TestNewVideosChecksTheLimits(t *testing.T) {
	cfg := transcoder.DefaultVideoConfig()
	cfg.MaxMemoryBytes = 256 << 20 // ffmpeg cannot even map its libraries
	_, err := transcoder.NewVideos(cfg)
	if err == nil || !strings.Contains(err.Error(), "checking that ffmpeg runs under its resource limits (256 MiB of address space)") {
		t.Errorf("NewVideos with a 256 MiB limit: %v", err)
	}
	cfg = transcoder.DefaultVideoConfig()
	cfg.Prlimit = "no-such-prlimit"
	if _, err := transcoder.NewVideos(cfg); err == nil || !strings.Contains(err.Error(), "finding prlimit") {
		t.Errorf("NewVideos without prlimit: %v", err)
	}
}

// TestVideoPlaylistsReadNothing feeds .mp4-named HLS playlists and ffconcat lists that point at other
// local files and at an HTTP server on loopback: ffmpeg must read none of them.
func TestVideoPlaylistsReadNothing(t *testing.T) {
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		http.NotFound(w, r)
	}))
	defer srv.Close()

	v := newVideos(t, transcoder.DefaultVideoConfig())
	dir := t.TempDir()
	secret := testenv.MakeVideo(t, dir, "secret.mp4", testenv.VideoOpts{Container: "mp4"})
	fileOnly := testenv.MakeM3U8(t, dir, "file.mp4", "file://"+secret)
	// Control: without the whitelists, ffprobe reads the playlist and the local file it names.
	if p := testenv.FFprobe(t, fileOnly); p.FormatName != "hls" || p.Stream("video") == nil {
		t.Fatalf("control: plain ffprobe should read the playlist as hls with video, got %+v", p)
	}
	for name, path := range map[string]string{
		"m3u8 file":       fileOnly,
		"m3u8 file+http":  testenv.MakeM3U8(t, dir, "both.mp4", "file://"+secret, srv.URL+"/seg.ts"),
		"m3u8 http":       testenv.MakeM3U8(t, dir, "http.mp4", srv.URL+"/seg.ts"),
		"ffconcat http":   testenv.MakeFFconcat(t, dir, "concat.mp4", srv.URL+"/seg.mp4"),
		"ffconcat secret": testenv.MakeFFconcat(t, dir, "concat2.mp4", "secret.mp4"),
		// Named like the containers the allow-list takes since field media (issue 9): the name
		// never matters, and a playlist of MPEG-TS segments (which the list takes) is still a
		// playlist (which it does not).
		"m3u8 named .ts":      testenv.MakeM3U8(t, dir, "rec.ts", "file://"+secret, srv.URL+"/seg.ts"),
		"m3u8 named .mts":     testenv.MakeM3U8(t, dir, "cam.mts", srv.URL+"/seg.ts"),
		"ffconcat named .avi": testenv.MakeFFconcat(t, dir, "old.avi", "secret.mp4", srv.URL+"/seg.mp4"),
		"ffconcat named .mpg": testenv.MakeFFconcat(t, dir, "clip.mpg", "secret.mp4"),
		"ffconcat named .vob": testenv.MakeFFconcat(t, dir, "dvd.vob", srv.URL+"/seg.mp4"),
		"m3u8 named .m2ts":    testenv.MakeM3U8(t, dir, "disc.m2ts", "file://"+secret),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := v.Transform(context.Background(), path, t.TempDir())
			if !transcoder.IsBadInput(err) || !strings.HasPrefix(err.Error(), "not a supported video (mp4, mov, 3gp, mkv, webm, avi, mpeg-ts (mts, m2ts) or mpeg-ps (mpg, vob))") {
				t.Fatalf("got %v, want a not-a-supported-video bad input", err)
			}
		})
	}
	if n := requests.Load(); n != 0 {
		t.Errorf("the HTTP server saw %d requests, want 0", n)
	}
}

func TestVideoClaimingHundredHours(t *testing.T) {
	src := testenv.MakeVideoClaimingDuration(t, t.TempDir(), "long.mp4", 100*time.Hour)
	if p := testenv.FFprobe(t, src); p.Duration != 360000 {
		t.Fatalf("control: ffprobe says %.0f s, want the claimed 360000", p.Duration)
	}
	_, err := newVideos(t, transcoder.DefaultVideoConfig()).Transform(context.Background(), src, t.TempDir())
	if !transcoder.IsBadInput(err) || err.Error() != "video is 100h0m0s long, limit is 1h0m0s" {
		t.Errorf("got %v, want the duration refusal", err)
	}
}

// TestImageHostileHeaders: animations and screens that promise more than the limits are refused
// from the header, at once.
func TestImageHostileHeaders(t *testing.T) {
	im := newImages(t, transcoder.DefaultImageConfig())
	dir := t.TempDir()
	for _, tc := range []struct {
		name, path, want string
	}{
		{"3000-frame gif", testenv.MakeGIFFrames(t, dir, 16, 16, 3000), "image has 3000 frames, limit is 1000"},
		{"100000×100000 png", testenv.MakePNGHeader(t, dir, 100000, 100000), "image is 100000×100000 (10000 MP), limit is 50 MP"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := t.TempDir()
			start := time.Now()
			_, err := im.Transform(context.Background(), tc.path, out)
			if !transcoder.IsBadInput(err) || err.Error() != tc.want {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("refusal took %s: was the image decoded?", d)
			}
			assertEmptyDir(t, out)
		})
	}
}

// TestImageGIFScreenIsNotTrusted: a GIF whose logical screen claims 65535×65535 around a 1×1 frame
// is read as the 1×1 it really is (libvips' GIF loader sizes the image from its frames), quickly.
func TestImageGIFScreenIsNotTrusted(t *testing.T) {
	im := newImages(t, transcoder.DefaultImageConfig())
	start := time.Now()
	res, err := im.Transform(context.Background(), testenv.MakeGIFScreen(t, t.TempDir(), 65535, 65535), t.TempDir())
	if err != nil || res.Width != 1 || res.Height != 1 {
		t.Fatalf("got %+v, %v; want a 1×1 image", res, err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("took %s", d)
	}
}

// TestImageNothingCached: with libvips' operation cache off, a finished transform holds no file
// open, and a file replaced at the same path is read anew.
func TestImageNothingCached(t *testing.T) {
	im := newImages(t, transcoder.DefaultImageConfig())
	dir := t.TempDir()
	path := filepath.Join(dir, "input")
	for _, size := range [][2]int{{640, 480}, {300, 200}} {
		data, err := os.ReadFile(testenv.MakeJPEG(t, t.TempDir(), size[0], size[1]))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		res, err := im.Transform(context.Background(), path, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		if res.Width != size[0] || res.Height != size[1] {
			t.Fatalf("transform of a %dx%d file says %dx%d: a stale decode was reused", size[0], size[1], res.Width, res.Height)
		}
		fds, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		for _, fd := range fds {
			if target, _ := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); strings.HasPrefix(target, dir) {
				t.Errorf("fd %s still holds %s after the transform", fd.Name(), target)
			}
		}
	}
}

// TestImageBlockedLoaders: formats this libvips build can read but the worker does not accept are
// refused before their loader runs, whatever the file is named. The vips format is the sharpest: its
// header declares the size and the pixels are mapped straight from the file.
func TestImageBlockedLoaders(t *testing.T) {
	im := newImages(t, transcoder.DefaultImageConfig())
	dir := t.TempDir()
	src := testenv.MakeJPEG(t, dir, 64, 48)
	for _, tc := range []struct{ ext, loader, name string }{
		{"v", "vips", "a libvips image"}, {"jp2", "jp2k", "JPEG 2000"}, {"fits", "fits", "FITS"}, {"hdr", "rad", "Radiance HDR"},
	} {
		t.Run(tc.loader, func(t *testing.T) {
			p := filepath.Join(dir, "x."+tc.ext)
			cmd := exec.Command(testenv.RequireBinary(t, "vips"), "copy", src, p)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("making a %s file: %v\n%s", tc.loader, err, out)
			}
			// Named like a photo: the extension must not matter.
			named := filepath.Join(dir, tc.loader+"-photo.jpg")
			if err := os.Rename(p, named); err != nil {
				t.Fatal(err)
			}
			_, err := im.Transform(context.Background(), named, t.TempDir())
			want := "unsupported image format: " + tc.name + " (accepted: JPEG, PNG, WebP, GIF, TIFF, HEIC/HEIF or AVIF)"
			if !transcoder.IsBadInput(err) || err.Error() != want {
				t.Errorf("got %v, want %q", err, want)
			}
		})
	}
	pdf := filepath.Join(dir, "doc.jpg")
	if err := os.WriteFile(pdf, []byte("%PDF-1.4\n1 0 obj<</Type/Catalog/Pages 2 0 R>>endobj\n2 0 obj<</Type/Pages/Kids[]/Count 0>>endobj\ntrailer<</Root 1 0 R>>\n%%EOF\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := im.Transform(context.Background(), pdf, t.TempDir()); !transcoder.IsBadInput(err) || !strings.HasPrefix(err.Error(), "unsupported image format") {
		t.Errorf("pdf: got %v", err)
	}
}
