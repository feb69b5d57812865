package faults

import (
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/internal/testenv"
	natsjs "github.com/mediaworker/mediaworker/jetstream"
	"github.com/mediaworker/mediaworker/pipeline"
)

// videoFile makes a small video that must be transcoded (Motion JPEG: an H.264 MP4/MOV would only be
// remuxed), 10 s long so a per-job deadline scaled to the input allows the delays the tests add, while
// the real encode stays fast.
func videoFile(t *testing.T) string {
	t.Helper()
	return testenv.MakeVideo(t, t.TempDir(), "clip.mov", testenv.VideoOpts{Width: 160, Height: 120, Seconds: 10, FPS: 5, VCodec: "mjpeg"})
}

// awaitEncode waits until a worker process with pid has started an encode and returns it.
func awaitEncode(t *testing.T, f *ffmpegWrapper, workerPID int) encodeRun {
	t.Helper()
	var run encodeRun
	testenv.Eventually(t, 60*time.Second, func() error {
		for _, e := range f.encodes() {
			if e.workerPID == workerPID {
				run = e
				return nil
			}
		}
		return fmt.Errorf("worker %d has not started an encode (encodes so far: %v)", workerPID, f.encodes())
	})
	return run
}

// SIGKILL mid-transcode: the delivery dies with its worker; after AckWait a second worker gets it and
// completes it, the API hears exactly one success, and the dead worker's scratch dir is removed when it
// starts again.
func TestKilledMidTranscodeIsCompletedByAnother(t *testing.T) {
	clamd := testenv.StartClamd(t)
	srv := testenv.StartNATS(t)
	ff := newFFmpegWrapper(t)
	ff.hold()
	opts := workerOpts{natsURL: srv.ClientURL(), clamd: clamd, ffmpeg: ff, args: []string{"--ack-wait", "2s"}}
	a := startWorker(t, "a", opts)
	l := newLedger(t, srv.ClientURL())
	c := newClient(t, l, nil, 1)
	id := c.submit(videoFile(t), "u/clip.mov")

	enc := awaitEncode(t, ff, a.pid())
	left := scratchDirs(t, a.opts.tmpDir)
	if len(left) != 1 {
		t.Fatalf("worker a has %d scratch dirs mid-transcode, want 1: %v", len(left), left)
	}
	a.kill()
	// Should the encode outlive its worker (TestKilledWorkerLeavesNoFFmpeg says it must not), it is
	// stopped here so that it cannot race the second worker.
	ff.kill(enc)
	ff.release()

	b := startWorker(t, "b", workerOpts{natsURL: srv.ClientURL(), clamd: clamd, ffmpeg: ff, args: []string{"--ack-wait", "2s"}})
	l.await([]string{id}, 90*time.Second)
	if r := l.one(id); !r.Success || len(r.Processed) != 2 {
		t.Fatalf("after the crash: %+v, want success with mp4 and poster", r)
	}
	var byB bool
	for _, e := range ff.encodes() {
		byB = byB || e.workerPID == b.pid()
	}
	if !byB {
		t.Fatalf("worker b never encoded; encodes: %v", ff.encodes())
	}
	l.awaitEmptyQueue(10 * time.Second)
	if info := l.lane(pipeline.Video); info.Delivered.Consumer != 2 || info.NumAckPending != 0 {
		t.Errorf("consumer delivered %d (want 2: the crashed delivery and the one that finished), ack pending %d",
			info.Delivered.Consumer, info.NumAckPending)
	}
	if n := l.wireCount(id); n != 1 {
		t.Errorf("%d responses on the wire, want 1", n)
	}

	// The crashed run left its scratch dir; a restart removes it.
	if got := scratchDirs(t, a.opts.tmpDir); !slices.Equal(got, left) {
		t.Fatalf("before restart, a's tmp dir holds %v; want the crash's leftover %v", got, left)
	}
	a.start()
	if got := scratchDirs(t, a.opts.tmpDir); len(got) != 0 {
		t.Fatalf("restarted worker a did not remove the scratch dirs of its crashed run: %v", got)
	}
}

// A crashed worker must not leave its ffmpeg running: it would keep burning CPU for a job that another
// worker is already redoing, and write into a scratch dir the restart removes.
func TestKilledWorkerLeavesNoFFmpeg(t *testing.T) {
	clamd := testenv.StartClamd(t)
	srv := testenv.StartNATS(t)
	ff := newFFmpegWrapper(t)
	ff.hold()
	a := startWorker(t, "a", workerOpts{natsURL: srv.ClientURL(), clamd: clamd, ffmpeg: ff})
	l := newLedger(t, srv.ClientURL())
	c := newClient(t, l, nil, 1)
	c.submit(videoFile(t), "u/clip.mov")
	enc := awaitEncode(t, ff, a.pid())
	a.kill()
	// A parent-death signal arrives at once; the margin is for a loaded machine.
	testenv.Eventually(t, 3*time.Second, func() error {
		if alive(enc.pid) {
			return fmt.Errorf("ffmpeg (pid %d) of the SIGKILLed worker is still running: tools in their own "+
				"process group need a parent-death signal, or a crash orphans them", enc.pid)
		}
		return nil
	})
}

// A 15 s transcode with AckWait 2 s is delivered exactly once: InProgress keeps the delivery alive.
func TestLongTranscodeIsDeliveredOnce(t *testing.T) {
	clamd := testenv.StartClamd(t)
	srv := testenv.StartNATS(t)
	ff := newFFmpegWrapper(t)
	ff.delay(15 * time.Second)
	startWorker(t, "a", workerOpts{natsURL: srv.ClientURL(), clamd: clamd, ffmpeg: ff, args: []string{"--ack-wait", "2s"}})
	l := newLedger(t, srv.ClientURL())
	c := newClient(t, l, nil, 1)
	began := time.Now()
	id := c.submit(videoFile(t), "u/long.mov")
	l.await([]string{id}, 90*time.Second)
	took := time.Since(began)
	if r := l.one(id); !r.Success {
		t.Fatalf("long transcode: %+v", r)
	}
	if took < 15*time.Second {
		t.Fatalf("the job took %s; the wrapper should have made it take at least 15 s", took)
	}
	l.awaitEmptyQueue(10 * time.Second)
	info := l.lane(pipeline.Video)
	if info.Delivered.Consumer != 1 || info.NumRedelivered != 0 {
		t.Fatalf("a %s job with AckWait 2 s: consumer delivered %d, redelivered %d; want 1 and 0",
			took.Round(time.Second), info.Delivered.Consumer, info.NumRedelivered)
	}
	if n := len(ff.encodes()); n != 1 {
		t.Fatalf("%d encodes, want 1", n)
	}
	if n := l.wireCount(id); n != 1 {
		t.Fatalf("%d responses on the wire, want 1", n)
	}
	t.Logf("a %s job with AckWait 2 s was delivered once", took.Round(100*time.Millisecond))
}

// The safety net: a worker that dies holding the last allowed delivery leaves the request in the work
// queue, where JetStream will never deliver it again. The MAX_DELIVERIES advisory must move it to the
// DLQ and the API must get a failure response. The request was published with Nats-Expected-Stream
// (the client always does): one failure response, one stored DLQ copy.
func TestDeathOnLastDeliveryIsDeadLettered(t *testing.T) {
	clamd := testenv.StartClamd(t)
	srv := testenv.StartNATS(t)
	ff := newFFmpegWrapper(t)
	ff.hold()
	opts := workerOpts{natsURL: srv.ClientURL(), clamd: clamd, ffmpeg: ff, args: []string{"--ack-wait", "2s", "--max-deliver", "1"}}
	a := startWorker(t, "a", opts)
	l := newLedger(t, srv.ClientURL())
	c := newClient(t, l, nil, 1)
	id := c.submit(videoFile(t), "u/last.mov")
	enc := awaitEncode(t, ff, a.pid())
	a.kill()
	ff.kill(enc)
	ff.release()
	startWorker(t, "b", opts)

	l.await([]string{id}, 60*time.Second)
	if r := l.one(id); r.Success || !strings.Contains(r.Error, "deliver") {
		t.Fatalf("response after the last delivery died: %+v; want a failure saying it gave up", r)
	}
	l.awaitDLQ(1, 10*time.Second)
	dl := l.deadLetters()
	if len(dl) != 1 || !strings.Contains(string(dl[0].data), id) {
		t.Fatalf("dlq: %d entries; want the original request", len(dl))
	}
	if n := l.wireCount(id); n != 1 {
		t.Errorf("%d responses on the wire, want 1", n)
	}
	if got := dl[0].header.Get(natsjs.HeaderStreamSeq); got != "1" {
		t.Errorf("dead letter %s = %q, want 1", natsjs.HeaderStreamSeq, got)
	}
	l.awaitEmptyQueue(10 * time.Second)
}

// SIGTERM drains: the held encode is stopped when the drain timeout passes (its whole process group),
// the job is handed back at once rather than after AckWait, the scratch dir is removed, and the
// worker exits 0, so a second worker finishes the job well inside AckWait.
func TestDrainHandsBackAndExitsZero(t *testing.T) {
	clamd := testenv.StartClamd(t)
	srv := testenv.StartNATS(t)
	ff := newFFmpegWrapper(t)
	ff.hold()
	opts := workerOpts{natsURL: srv.ClientURL(), clamd: clamd, ffmpeg: ff, args: []string{"--ack-wait", "60s", "--drain-timeout", "1s"}}
	a := startWorker(t, "a", opts)
	l := newLedger(t, srv.ClientURL())
	c := newClient(t, l, nil, 1)
	id := c.submit(videoFile(t), "u/drain.mov")
	enc := awaitEncode(t, ff, a.pid())

	if code := a.term(30 * time.Second); code != 0 {
		t.Fatalf("worker exited with status %d after SIGTERM, want 0", code)
	}
	if alive(enc.pid) {
		t.Errorf("the encode (pid %d) outlived the drained worker", enc.pid)
	}
	if left := scratchDirs(t, a.opts.tmpDir); len(left) != 0 {
		t.Errorf("the drained worker left scratch dirs: %v", left)
	}
	if n := l.count(id); n != 0 {
		t.Fatalf("a job stopped by the drain was answered")
	}
	ff.release()
	began := time.Now()
	startWorker(t, "b", opts)
	l.await([]string{id}, 30*time.Second) // half the AckWait: only a prompt hand-back gets here
	if r := l.one(id); !r.Success {
		t.Fatalf("after the hand-back: %+v", r)
	}
	t.Logf("handed-back job finished %s after the second worker started (AckWait 60 s)", time.Since(began).Round(100*time.Millisecond))
	if info := l.lane(pipeline.Video); info.Delivered.Consumer != 2 {
		t.Errorf("video lane delivered %d, want 2", info.Delivered.Consumer)
	}
}

// A SIGTERM that arrives while the worker is still starting (connecting, provisioning, before its
// first pull) is a normal stop: exit status 0, which is what systemd and Kubernetes expect of a graceful
// stop. The signal is sent at a different moment of the start-up each time.
func TestTermDuringStartExitsZero(t *testing.T) {
	clamd := testenv.StartClamd(t)
	srv := testenv.StartNATS(t)
	w := startWorker(t, "a", workerOpts{natsURL: srv.ClientURL(), clamd: clamd})
	w.term(30 * time.Second)
	var bad []string
	for i := range 8 {
		w.launch()
		time.Sleep(time.Duration(i) * 40 * time.Millisecond) // 0 … 280 ms into the start-up
		// Killed by the signal itself (-SIGTERM) only happens before main installed its handler, when
		// nothing was started: fine. Anything else must be a clean exit.
		if code := w.term(30 * time.Second); code != 0 && code != -int(syscall.SIGTERM) {
			bad = append(bad, fmt.Sprintf("status %d after %d ms", code, i*40))
		}
	}
	if len(bad) > 0 {
		t.Fatalf("a SIGTERM during start-up made the worker exit non-zero: %v", bad)
	}
}
