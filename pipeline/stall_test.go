package pipeline

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/progress"

	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/transcoder"
)

// How a video's transform ends, with the real transcoder and ffmpeg (issue 22 item 1): CPU time
// decides whether the input is at fault, wall-clock time only detects stalls. A transcode that stops
// moving is a stall (transient, ErrStalled); one that needs more CPU time than its budget is refused
// (permanent, the CPU words); one that is slow but keeps moving succeeds however long it takes.

// videoJob is a fixture whose object is clip, run in the video lane through the real transcoder
// configured by vcfg.
type videoJob struct {
	*fixture
	vcfg transcoder.VideoConfig

	mu    sync.Mutex
	moves []time.Time // every sign of progress the job's watchers were given
}

func newVideoJob(t *testing.T, clip string) *videoJob {
	t.Helper()
	f := newFixture(t)
	data, err := os.ReadFile(clip)
	if err != nil {
		t.Fatal(err)
	}
	f.req.S3Key = "u/" + filepath.Base(clip)
	delete(f.store.objs, "media/u/p.jpg")
	f.store.objs["media/"+f.req.S3Key] = data
	f.cfg.MaxInputBytes = 64 << 20
	return &videoJob{fixture: f, vcfg: transcoder.DefaultVideoConfig()}
}

// run processes the job and checks what every job leaves behind: no scratch files, a response the
// schema accepts. It notes when the job's watchers were told of progress, and logs the longest gap.
func (j *videoJob) run(t *testing.T) Outcome {
	t.Helper()
	v, err := transcoder.NewVideos(j.vcfg)
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(j.cfg, Deps{Store: j.store, Scanner: j.scan, Images: j.images, Videos: v})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	ctx := progress.Watch(context.Background(), func() {
		j.mu.Lock()
		j.moves = append(j.moves, time.Now())
		j.mu.Unlock()
	})
	out := p.Process(ctx, j.req, Video)
	if entries, _ := os.ReadDir(j.cfg.TmpDir); len(entries) != 0 {
		t.Errorf("scratch dir not cleaned: %d entries", len(entries))
	}
	if err := contracts.Validate(contracts.SchemaResponse, out.Response); err != nil {
		t.Errorf("outcome's response fails the schema: %v", err)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	var gap time.Duration
	prev := start
	for _, m := range j.moves {
		gap, prev = max(gap, m.Sub(prev)), m
	}
	t.Logf("%s: %d signs of progress in %s, at most %s apart", out.Kind, len(j.moves), time.Since(start).Round(time.Millisecond), gap.Round(time.Millisecond))
	return out
}

// ffmpegScript writes an sh script to stand in for ffmpeg: body runs for encodes (libx264 in the
// arguments) with $FFMPEG the real ffmpeg; every other run (the poster, a remux) execs it at once.
// The worker gives ffmpeg an environment with PATH only, so all a script needs is baked in.
func ffmpegScript(t *testing.T, body string) string {
	t.Helper()
	real := testenv.RequireBinary(t, "ffmpeg")
	path := filepath.Join(t.TempDir(), "ffmpeg")
	script := fmt.Sprintf("#!/bin/sh\nFFMPEG='%s'\ncase \"$*\" in *libx264*) ;; *) exec \"$FFMPEG\" \"$@\" ;; esac\n%s\n", real, body)
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// A transcode that stops (SIGSTOP: no progress report, no CPU time) is a stall once --job-timeout
// passes: transient, the tool's process group killed, never the input's fault.
func TestStalledTranscodeIsRetried(t *testing.T) {
	clip := testenv.MakeVideo(t, t.TempDir(), "clip.mov", testenv.VideoOpts{Seconds: 2, VCodec: "mjpeg"})
	j := newVideoJob(t, clip)
	pidFile := filepath.Join(t.TempDir(), "pid")
	// The encode stops itself before it becomes ffmpeg; the job's kill (SIGKILL to the group) ends it.
	j.vcfg.FFmpeg = ffmpegScript(t, fmt.Sprintf("echo $$ > '%s'\nkill -STOP $$\nexec \"$FFMPEG\" \"$@\"", pidFile))
	j.cfg.JobTimeout = 2 * time.Second

	out := j.run(t)
	if out.Kind != Retry || !errors.Is(out.Err, ErrStalled) {
		t.Fatalf("kind %s (%v), want a retry caused by ErrStalled", out.Kind, out.Err)
	}
	if want := "transforming: the media tool made no progress within 2s"; !strings.HasPrefix(out.Response.Error, want) {
		t.Errorf("response error %q, want it to start with %q", out.Response.Error, want)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatalf("the encode never started: %v", err)
	}
	pid := strings.TrimSpace(string(b))
	testenv.Eventually(t, 10*time.Second, func() error {
		if _, err := os.Stat("/proc/" + pid); err == nil {
			return fmt.Errorf("the stalled encode (pid %s) is still there", pid)
		}
		return nil
	})
}

// A transcode that needs more CPU time than its budget (a tiny per-second budget here: 1 s of CPU
// for a clip that needs several) is the input's fault: refused, naming the limit and how it follows
// from the clip's length.
func TestTranscodeOverItsCPUBudgetIsRefused(t *testing.T) {
	clip := testenv.MakeDeviceClip(t, t.TempDir(), testenv.DeviceClip{Name: "clip.mp4", Format: "mp4",
		VCodec: "mpeg4", ACodec: "aac", Width: 1920, Height: 1080, Seconds: 6})
	j := newVideoJob(t, clip)
	j.vcfg.CPUPerInputSecond = 10 * time.Millisecond // (6 s + 10 s) × 10 ms: the least RLIMIT_CPU, 1 s

	out := j.run(t)
	if out.Kind != Failed || errors.Is(out.Err, ErrStalled) {
		t.Fatalf("kind %s (%v), want a permanent failure", out.Kind, out.Err)
	}
	want := "transforming: transcoding video: the video needs more CPU time than the limit of 1s for a 6.0 s video: 10ms per second of video, counting 10s more"
	if !strings.HasPrefix(out.Response.Error, want) {
		t.Errorf("response error %q, want it to start with %q", out.Response.Error, want)
	}
}

// A transcode that is slow but keeps moving is never cut short: here ffmpeg is stopped for 0.8 s in
// every second (SIGSTOP, SIGCONT), so it reports progress in bursts a few tenths of a second long,
// each gap well inside --job-timeout, while it is stopped for longer than --job-timeout in all.
func TestSlowButMovingTranscodeSucceeds(t *testing.T) {
	clip := testenv.MakeDeviceClip(t, t.TempDir(), testenv.DeviceClip{Name: "clip.mp4", Format: "mp4",
		VCodec: "mpeg4", ACodec: "aac", Width: 1920, Height: 1080, Seconds: 4})
	j := newVideoJob(t, clip)
	stops := filepath.Join(t.TempDir(), "stops")
	// A throttler beside it stops the script's process, which has become ffmpeg by then (exec), so the
	// transcoder sees ffmpeg as the worker runs it: its progress reports and its CPU time.
	j.vcfg.FFmpeg = ffmpegScript(t, fmt.Sprintf(`(
	while sleep 0.2; do
		kill -STOP $$ 2>/dev/null || exit 0
		echo stop >> '%s'
		sleep 0.8
		kill -CONT $$ 2>/dev/null || exit 0
	done
) >/dev/null 2>&1 &
exec "$FFMPEG" "$@"`, stops))
	const stallInterval = 3 * time.Second
	j.cfg.JobTimeout = stallInterval

	out := j.run(t)
	if out.Kind != Success {
		t.Fatalf("kind %s (%v), want success", out.Kind, out.Err)
	}
	b, _ := os.ReadFile(stops)
	n := strings.Count(string(b), "stop")
	stopped := time.Duration(n) * 800 * time.Millisecond
	t.Logf("ffmpeg was stopped %d times (%s in all) with a stall interval of %s", n, stopped, stallInterval)
	if stopped <= stallInterval {
		t.Fatalf("ffmpeg was stopped for %s in all, not longer than the stall interval (%s): the encode was too quick to show that a slow one is not cut short", stopped, stallInterval)
	}
}

// An image's transform is not watched (libvips cannot be interrupted and reports nothing): one that
// takes longer than --job-timeout runs on, and only MaxTransformTime ends it, as a retry.
func TestImageTransformIsNotCutAtTheStallInterval(t *testing.T) {
	f := newFixture(t)
	f.cfg.JobTimeout = 100 * time.Millisecond
	f.cfg.MaxTransformTime = time.Second
	f.images.block = true
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p, err := New(f.cfg, Deps{Store: f.store, Scanner: f.scan, Images: f.images, Videos: fakeVideos{}})
	if err != nil {
		t.Fatal(err)
	}
	out := p.Process(ctx, f.req, Image)
	if out.Kind != Retry || !errors.Is(out.Err, ErrJobTimeout) {
		t.Fatalf("kind %s (%v), want a retry at the transform's cap", out.Kind, out.Err)
	}
	if want := "transforming: still running after 1s"; !strings.HasPrefix(out.Response.Error, want) {
		t.Errorf("response error %q, want it to start with %q", out.Response.Error, want)
	}
}
