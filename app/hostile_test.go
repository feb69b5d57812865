package app_test

// The hostile-upload corpus (issue 4, SECURITY.md): files that lie about what they are, bombs, polyglots
// and malformed requests, each built here and run through a whole worker. The worker runs in a process
// of its own (this test binary re-executed as TestHostileWorkerProcess), so that its peak RSS is the
// worker's alone and not the test harness's, and it checks its own goroutines and file descriptors when
// asked; NATS and clamd are real and on loopback.

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/mediaworker/mediaworker/app"
	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/job"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"
)

const (
	// hostileWorkerEnv carries the worker process's settings (JSON); its presence makes
	// TestHostileWorkerProcess run the worker.
	hostileWorkerEnv = "MW_HOSTILE_WORKER"
	// helperLine prefixes the worker process's protocol lines on stdout.
	helperLine = "MWHELPER "
	// maxWorkerRSS is the peak resident set the worker may reach while it handles the corpus.
	maxWorkerRSS = 300 << 20
	// corpusMaxInput is the worker's --max-input-bytes in this test, small enough to exceed cheaply.
	corpusMaxInput = 8 << 20
	// fdSlack is how many more descriptors the worker may hold after the corpus than before (a
	// reconnecting client may briefly hold one more).
	fdSlack = 3
)

// workerSettings is what the test passes to the worker process.
type workerSettings struct {
	NATSURL       string // "": the embedded server, on NATSListen with its store in DataDir
	NATSListen    string
	DataDir       string
	ClamdAddr     string
	TmpDir        string
	MaxInputBytes int64 // 0: the default
}

// workerReport is the worker process's answer to "check".
type workerReport struct {
	GoroutineLeak string   // goleak's report, "" when none
	FDsBefore     []string // open descriptors at "baseline", as their targets
	FDsAfter      []string
	// VmHWMKiB is the worker's peak resident set. (The children's is not reported: an ffmpeg's
	// ru_maxrss includes the worker's own pages it shared between fork and exec.)
	VmHWMKiB int64
}

func TestHostileUploads(t *testing.T) {
	clamd := testenv.StartClamd(t)
	srv := testenv.StartNATS(t)
	tmp := t.TempDir()
	wp := startWorkerProcess(t, workerSettings{NATSURL: srv.ClientURL(), ClamdAddr: clamd.Addr, TmpDir: tmp, MaxInputBytes: corpusMaxInput})

	// The test's side of the world: the same NATS, streams and object store as the worker.
	cfg := app.DefaultConfig()
	cfg.NATS.URL = srv.ClientURL()
	cfg.Storage = app.StorageNATS
	cfg.Pipeline.TmpDir = tmp
	w := &world{t: t, cfg: cfg, subj: contracts.SubjectsFor(cfg.Streams.App), bucket: "media",
		responses: map[string][]contracts.Response{}, viruses: map[string][]contracts.VirusEvent{}}
	w.observe(srv)

	// Every path through the worker once before the baseline, so that what it sets up lazily is there.
	media := t.TempDir()
	warm := w.request(w.upload(testenv.MakeJPEG(t, media, 640, 480), "warm/p.jpg"))
	if r := w.await(warm, time.Minute); !r.Success {
		t.Fatalf("warm-up job failed: %+v", r)
	}
	wp.command(t, "baseline", nil)

	// An HTTP server on loopback that a playlist names: it must never be asked for anything.
	var httpRequests atomic.Int64
	lure := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		httpRequests.Add(1)
		http.NotFound(rw, r)
	}))
	defer lure.Close()

	// A local video that the playlists try to make ffmpeg read (the worker process can read it).
	secret := testenv.MakeVideo(t, media, "secret.mp4", testenv.VideoOpts{Container: "mp4"})
	validMP4, err := os.ReadFile(testenv.MakeVideo(t, t.TempDir(), "v.mp4", testenv.VideoOpts{Container: "mp4"}))
	if err != nil {
		t.Fatal(err)
	}
	jpeg := testenv.MakeJPEG(t, media, 800, 600)
	write := func(name string, data []byte) string {
		p := filepath.Join(media, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	big := make([]byte, 9_000_000)
	rand.Read(big)

	type outcome int
	const (
		failed outcome = iota
		infected
		succeeded
	)
	cases := []struct {
		name, key, path string
		want            outcome
		err             string // the exact error; with prefix, how it starts
		prefix          bool
	}{
		{name: "mp4 that is an ffconcat list naming a local file", key: "h/concat.mp4",
			path: testenv.MakeFFconcat(t, media, "concat.mp4", secret),
			err:  "detecting: unsupported media type: text/plain; charset=utf-8"},
		{name: "mp4 that is an m3u8 playlist naming file:// and http://", key: "h/playlist.mp4",
			path: testenv.MakeM3U8(t, media, "playlist.mp4", "file://"+secret, lure.URL+"/seg.ts"),
			err:  "detecting: unsupported media type: application/vnd.apple.mpegurl"},
		{name: "png header declaring 100000×100000", key: "h/bomb.png",
			path: testenv.MakePNGHeader(t, media, 100000, 100000),
			err:  "transforming: image is 100000×100000 (10000 MP), limit is 50 MP"},
		{name: "gif with 3000 frames", key: "h/frames.gif",
			path: testenv.MakeGIFFrames(t, media, 16, 16, 3000),
			err:  "transforming: image has 3000 frames, limit is 1000"},
		{name: "truncated jpeg", key: "h/truncated.jpg",
			path: testenv.MakeTruncated(t, jpeg, media, "truncated.jpg", 20_000),
			err:  "transforming: decoding image: ", prefix: true},
		{name: "zero-byte file", key: "h/empty.jpg", path: write("empty.jpg", nil),
			err: "downloading: object is empty (0 bytes)"},
		{name: "text file named .mp4", key: "h/notes.mp4", path: write("notes.mp4", []byte("meeting notes, not a video\n")),
			err: "detecting: unsupported media type: text/plain; charset=utf-8"},
		{name: "EICAR in a zip named .jpg", key: "h/archive.jpg",
			path: testenv.MakeZip(t, media, "archive.jpg", "readme.txt", []byte(testenv.EICAR)), want: infected},
		{name: "EICAR appended to a valid MP4", key: "h/tail.mp4",
			path: write("tail.mp4", append(slices.Clone(validMP4), testenv.EICAR...)), want: infected},
		// More than clamd can scan in full (MaxRecursion): refused, never passed as clean.
		{name: "zip nested 20 deep named .jpg", key: "h/nested.jpg",
			path: testenv.MakeNestedZip(t, media, "nested.jpg", 20),
			err:  "scanning: the file cannot be scanned: scanning stream: over the scan limits: clamd could not scan the whole input: Heuristics.Limits.Exceeded.MaxRecursion"},
		{name: "video claiming 100 hours", key: "h/long.mp4",
			path: testenv.MakeVideoClaimingDuration(t, media, "long.mp4", 100*time.Hour),
			err:  "probing: video is 100h0m0s long, limit is 1h0m0s"},
		{name: "upload over --max-input-bytes", key: "h/big.jpg", path: write("big.jpg", big),
			err: "downloading: input is too large: object is 9.0 MB, limit is 8.4 MB"},
		// A valid key with characters libvips would read as load options if a path came from it.
		{name: "key with brackets", key: "h/photo [1].jpg[shrink=8]", path: jpeg, want: succeeded},
	}
	badKeys := []struct{ name, key, err string }{
		{"dot-dot segment", "h/../../etc/passwd", `invalid request: s3Key has a ".." path segment`},
		{"leading slash", "/etc/passwd", "invalid request: s3Key must not start with '/'"},
		{"NUL", "h/a\x00.jpg", "invalid request: s3Key contains control character U+0000"},
		{"2000 bytes", "h/" + strings.Repeat("k", 1994) + ".jpg", "invalid request: s3Key is 2000 bytes, limit is 1024"},
	}

	start := time.Now()
	ids := make([]string, len(cases))
	for i, c := range cases {
		ids[i] = w.request(w.upload(c.path, c.key))
	}
	keyIDs := make([]string, len(badKeys))
	for i, c := range badKeys {
		// Published as raw JSON: the key never touches the object store.
		keyIDs[i] = uuid.NewString()
		req, _ := json.Marshal(contracts.Request{S3Key: c.key, S3Bucket: w.bucket, MediaID: keyIDs[i], MediaURL: "https://api.example/m/" + keyIDs[i]})
		w.publishRaw(req, keyIDs[i])
	}

	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			switch c.want {
			case infected:
				assertVirus(t, w, ids[i], c.key)
				return
			case succeeded:
				if r := w.await(ids[i], time.Minute); !r.Success || len(r.Processed) != 3 {
					t.Fatalf("want success with 3 variants, got %+v", r)
				}
				return
			}
			r := w.await(ids[i], time.Minute)
			if r.Success || (c.prefix && !strings.HasPrefix(r.Error, c.err)) || (!c.prefix && r.Error != c.err) {
				t.Fatalf("got success=%v error %q, want a failure %q", r.Success, r.Error, c.err)
			}
			t.Logf("%s", r.Error)
			keys := contracts.KeysFor(contracts.Request{S3Key: c.key, MediaID: ids[i]})
			for _, out := range []string{keys.Image("high"), keys.Video(), keys.Poster()} {
				if w.exists(out) {
					t.Errorf("a variant was written for a refused upload: %s", out)
				}
			}
		})
	}
	for i, c := range badKeys {
		t.Run("key with "+c.name, func(t *testing.T) {
			r := w.await(keyIDs[i], time.Minute)
			if r.Success || r.Error != c.err {
				t.Fatalf("got success=%v error %q, want %q", r.Success, r.Error, c.err)
			}
		})
	}
	t.Logf("corpus of %d uploads and %d bad keys answered in %s", len(cases), len(badKeys), time.Since(start).Round(time.Millisecond))
	if n := httpRequests.Load(); n != 0 {
		t.Errorf("the HTTP server named by the playlist saw %d requests, want 0", n)
	}

	// Still healthy: ready, and a photo and a video (ffmpeg under its limits) still go through.
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get("http://" + wp.httpAddr + "/health/ready")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/health/ready after the corpus: %s %s", resp.Status, body)
	}
	// A 12 MP photo is decoded in the worker process (libvips is in-process), so it counts in its RSS.
	photo := w.request(w.upload(testenv.MakeJPEG(t, t.TempDir(), 4000, 3000), "after/p.jpg"))
	clip := w.request(w.upload(testenv.MakeVideo(t, t.TempDir(), "c.mov", testenv.VideoOpts{ACodec: "aac"}), "after/c.mov"))
	if r := w.await(photo, time.Minute); !r.Success {
		t.Errorf("a photo after the corpus failed: %+v", r)
	}
	if r := w.await(clip, 2*time.Minute); !r.Success || len(r.Processed) != 2 {
		t.Errorf("a video after the corpus failed: %+v", r)
	}
	scratchEmpty(t, w)

	var rep workerReport
	wp.command(t, "check", &rep)
	if rep.GoroutineLeak != "" {
		t.Errorf("the worker leaked goroutines:\n%s", rep.GoroutineLeak)
	}
	if len(rep.FDsAfter) > len(rep.FDsBefore)+fdSlack {
		t.Errorf("the worker holds %d file descriptors after the corpus, %d before; new: %v",
			len(rep.FDsAfter), len(rep.FDsBefore), newFDs(rep.FDsBefore, rep.FDsAfter))
	}
	t.Logf("worker: peak RSS %.1f MiB (limit %d MiB); fds %d before the corpus, %d after",
		float64(rep.VmHWMKiB)/1024, maxWorkerRSS>>20, len(rep.FDsBefore), len(rep.FDsAfter))
	if rep.VmHWMKiB<<10 >= maxWorkerRSS {
		if raceEnabled() {
			t.Logf("the race detector multiplies memory use; the %d MiB limit applies to normal builds", maxWorkerRSS>>20)
		} else {
			t.Errorf("the worker's peak RSS is %.1f MiB, limit %d MiB", float64(rep.VmHWMKiB)/1024, maxWorkerRSS>>20)
		}
	}
}

// workerProcess is the worker running in a child process.
type workerProcess struct {
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	lines    chan string // protocol lines from stdout, without the prefix
	stderr   *testenv.LockedBuffer
	httpAddr string
}

// startWorkerProcess re-executes this test binary as the worker and waits until it is ready (streams
// provisioned, HTTP listening). The process stops when the test ends.
func startWorkerProcess(t *testing.T, s workerSettings) *workerProcess {
	t.Helper()
	settings, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHostileWorkerProcess$", "-test.timeout=5m")
	cmd.Env = append(os.Environ(), hostileWorkerEnv+"="+string(settings))
	// If this test binary dies, the worker must not outlive it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	wp := &workerProcess{cmd: cmd, lines: make(chan string, 16), stderr: &testenv.LockedBuffer{}}
	cmd.Stderr = wp.stderr
	if wp.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(wp.lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if line, ok := strings.CutPrefix(sc.Text(), helperLine); ok {
				wp.lines <- line
			}
		}
	}()
	t.Cleanup(func() {
		wp.stdin.Close() // the worker drains and exits when its stdin ends
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("worker process: %v", err)
			}
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
			t.Errorf("the worker process did not stop within 30s of its stdin closing")
		}
		if t.Failed() {
			t.Logf("worker process log (tail):\n%s", wp.stderr.Tail(100))
		}
	})
	var ready struct{ HTTP string }
	wp.receive(t, &ready)
	wp.httpAddr = ready.HTTP
	return wp
}

// command sends one command to the worker process and decodes its answer into out (when not nil).
func (wp *workerProcess) command(t *testing.T, cmd string, out any) {
	t.Helper()
	if _, err := io.WriteString(wp.stdin, cmd+"\n"); err != nil {
		t.Fatalf("sending %q to the worker process: %v", cmd, err)
	}
	var raw json.RawMessage
	wp.receive(t, &raw)
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatal(err)
		}
	}
}

func (wp *workerProcess) receive(t *testing.T, out any) {
	t.Helper()
	select {
	case line, ok := <-wp.lines:
		if !ok {
			t.Fatalf("the worker process ended; its log:\n%s", wp.stderr.Tail(100))
		}
		var msg struct {
			Error string
			Data  json.RawMessage
		}
		if err := json.Unmarshal([]byte(line), &msg); err != nil {
			t.Fatalf("worker process said %q: %v", line, err)
		}
		if msg.Error != "" {
			t.Fatalf("worker process: %s", msg.Error)
		}
		if err := json.Unmarshal(msg.Data, out); err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("no answer from the worker process within 2m; its log:\n%s", wp.stderr.Tail(100))
	}
}

// TestHostileWorkerProcess is TestHostileUploads' worker. Run directly (without hostileWorkerEnv) it
// does nothing. It runs app.New and Run exactly as `mediaworker run` does, then answers commands on
// stdin: "baseline" records its goroutines and descriptors, "check" compares them and reports its peak
// RSS, "peak" reports the peak RSS alone. When stdin ends it drains and exits.
func TestHostileWorkerProcess(t *testing.T) {
	raw := os.Getenv(hostileWorkerEnv)
	if raw == "" {
		return
	}
	say := func(data any, err error) {
		msg := map[string]any{"Data": data}
		if err != nil {
			msg["Error"] = err.Error()
		}
		b, _ := json.Marshal(msg)
		fmt.Printf("%s%s\n", helperLine, b)
	}
	var s workerSettings
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		say(nil, err)
		return
	}
	cfg := app.DefaultConfig()
	cfg.NATS.URL = s.NATSURL
	if s.NATSURL == "" {
		cfg.NATS.Embedded.Listen, cfg.NATS.Embedded.DataDir = s.NATSListen, s.DataDir
	}
	cfg.Storage = app.StorageNATS
	cfg.Scanner.Addr = s.ClamdAddr
	cfg.Pipeline.TmpDir = s.TmpDir
	if s.MaxInputBytes > 0 {
		cfg.Pipeline.MaxInputBytes = s.MaxInputBytes
	}
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.PerLane[job.Image].Slots, cfg.PerLane[job.Video].Slots = 2, 1
	cfg.Worker.BackoffBase = 200 * time.Millisecond
	cfg.Worker.DrainTimeout = 20 * time.Second

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, err := app.New(ctx, cfg, zerolog.New(os.Stderr).Level(zerolog.InfoLevel).With().Timestamp().Logger())
	if err != nil {
		say(nil, fmt.Errorf("starting the worker: %w", err))
		return
	}
	defer a.Close()
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	say(map[string]string{"HTTP": a.HTTPAddr()}, nil)

	var baseline goleak.Option
	var fdsBefore []string
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		switch sc.Text() {
		case "baseline":
			baseline = goleak.IgnoreCurrent()
			fdsBefore = openFDs()
			say(true, nil)
		case "peak":
			say(vmHWMKiB(), nil)
		case "check":
			rep := workerReport{FDsBefore: fdsBefore}
			// The pull loop always has one fetch waiting for messages; each is a new goroutine that
			// ends with its fetch's expiry, so the one running now is not the one at the baseline.
			if err := goleak.Find(append(testenv.UpstreamLeaks(), baseline, goleak.IgnoreTopFunction("github.com/nats-io/nats.go/jetstream.(*pullConsumer).fetch.func1"))...); err != nil {
				rep.GoroutineLeak = err.Error()
			}
			rep.FDsAfter = openFDs()
			rep.VmHWMKiB = vmHWMKiB()
			say(rep, nil)
		default:
			say(nil, fmt.Errorf("unknown command %q", sc.Text()))
		}
	}
	cancel()
	if err := <-done; err != nil {
		fmt.Fprintf(os.Stderr, "worker stopped with: %v\n", err)
		os.Exit(1)
	}
}

// openFDs lists this process's open file descriptors as "fd → target".
func openFDs() []string {
	entries, _ := os.ReadDir("/proc/self/fd")
	var fds []string
	for _, e := range entries {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err != nil {
			continue // the descriptor ReadDir itself used, now closed
		}
		fds = append(fds, e.Name()+" → "+target)
	}
	return fds
}

func newFDs(before, after []string) []string {
	var added []string
	for _, fd := range after {
		if !slices.Contains(before, fd) {
			added = append(added, fd)
		}
	}
	return added
}

// vmHWMKiB is this process's peak resident set ("VmHWM" in /proc/self/status), in KiB.
func vmHWMKiB() int64 {
	data, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var kib int64
			fmt.Sscanf(strings.TrimSpace(v), "%d", &kib)
			return kib
		}
	}
	return 0
}

// raceEnabled reports whether this binary was built with the race detector.
func raceEnabled() bool {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range info.Settings {
		if s.Key == "-race" && s.Value == "true" {
			return true
		}
	}
	return false
}
