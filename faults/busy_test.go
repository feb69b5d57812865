package faults

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/pipeline"
)

// Issue 22 item 1: a busy machine never fails a valid upload. Four CPU-bound processes beside the
// worker (an edge box that also runs the site's API, a laptop during a build), one video slot,
// --job-timeout 12s and six 10 s 1080p MPEG-4 clips submitted at once: all six succeed, later than on
// an idle machine. Before, every one failed "processing took longer than the limit of 12s": the
// transform's budget was wall-clock time, and running out of it was the input's fault. A clip that
// truly needs more CPU time than its budget is still refused, with the CPU words.
//
// Each hog keeps two `yes` per core busy (eight busy threads a core in all; with one a core the cores
// went to ffmpeg's threads often enough for a clip to finish inside 12 s). The six clips take about
// 2 minutes on 2 cores, each about 5 CPU-s of encoding; with the wall-clock budget all six failed.
func TestBusyMachineFailsNoValidUpload(t *testing.T) {
	clamd := testenv.StartClamd(t)
	clip := testenv.MakeDeviceClip(t, t.TempDir(), testenv.DeviceClip{Name: "clip.mp4", Format: "mp4",
		VCodec: "mpeg4", ACodec: "aac", Width: 1920, Height: 1080, Seconds: 10})
	startCPUHogs(t, 4)

	t.Run("six clips succeed", func(t *testing.T) {
		srv := testenv.StartNATS(t)
		wk := startWorker(t, "a", workerOpts{natsURL: srv.ClientURL(), clamd: clamd,
			args: []string{"--max-video-jobs", "1", "--job-timeout", "12s"}})
		l := newLedger(t, srv.ClientURL())
		c := newClient(t, l, nil, 1)
		for i := range 6 {
			c.upload(clip, fmt.Sprintf("v%d/clip.mp4", i))
		}
		began := time.Now()
		var videos []string
		for i := range 6 {
			videos = append(videos, c.request(fmt.Sprintf("v%d/clip.mp4", i)))
		}
		l.await(videos, 10*time.Minute)
		expectSuccess(t, l, videos)
		t.Logf("six 10 s 1080p clips beside four CPU hogs, one slot, --job-timeout 12s: all answered in %s, %d video deliveries",
			time.Since(began).Round(100*time.Millisecond), l.lane(pipeline.Video).Delivered.Consumer)
		// Slow is not stalled: no transform was taken for a stall on the way (a retry would still
		// have succeeded, and hidden it).
		if b, _ := os.ReadFile(wk.logPath); strings.Contains(string(b), "made no progress") {
			t.Errorf("a transform was stopped as a stall on a machine that was only busy:\n%s", testenv.TailLines(b, 40))
		}
	})

	t.Run("a clip over its CPU budget is refused", func(t *testing.T) {
		srv := testenv.StartNATS(t)
		// (10 s + 10 s) × 50 ms: 1 s of CPU time for a clip that needs several.
		startWorker(t, "b", workerOpts{natsURL: srv.ClientURL(), clamd: clamd,
			args: []string{"--max-video-jobs", "1", "--job-timeout", "12s", "--video-cpu-per-second", "50ms"}})
		l := newLedger(t, srv.ClientURL())
		c := newClient(t, l, nil, 1)
		id := c.submit(clip, "over/clip.mp4")
		l.await([]string{id}, 5*time.Minute)
		r := l.one(id)
		want := "transforming: transcoding video: the video needs more CPU time than the limit of 1s for a 10.0 s video"
		if r.Success || !strings.HasPrefix(r.Error, want) {
			t.Fatalf("response %+v, want a failure starting %q", r, want)
		}
		if n := l.lane(pipeline.Video).Delivered.Consumer; n != 1 {
			t.Errorf("the refused clip was delivered %d times in the video lane, want once (a permanent failure)", n)
		}
	})
}

// startCPUHogs starts n CPU-bound jobs that run until the test ends. Each is a shell with two busy
// `yes` (writing to /dev/null) per core, as a parallel build keeps every core busy, in a process group
// of its own, killed as a whole by its pid when the test ends. (The scheduler shares the cores per
// thread, and ffmpeg runs several: one busy thread per job left it most of a core.)
func startCPUHogs(t *testing.T, n int) {
	t.Helper()
	testenv.RequireBinary(t, "yes")
	script := strings.Repeat("yes >/dev/null & ", 2*runtime.NumCPU()) + "wait"
	for range n {
		cmd := exec.Command("/bin/sh", "-c", script)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatalf("starting a CPU hog: %v", err)
		}
		pid := cmd.Process.Pid
		t.Cleanup(func() {
			// The negative pid is the hog's process group: the shell and its busy children.
			if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil {
				t.Errorf("killing CPU hog %d: %v", pid, err)
			}
			_ = cmd.Wait()
		})
	}
}
