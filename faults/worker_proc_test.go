package faults

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/pipeline"
)

// ---------------------------------------------------------------------------------------------------
// The worker as a process.

// workerOpts says how to run one `mediaworker run` process.
type workerOpts struct {
	natsURL string
	clamd   *testenv.Clamd
	s3      *testenv.VersityGW // nil: --storage nats
	s3Addr  string             // "": the S3 server's own endpoint (a fault proxy's otherwise)
	tmpDir  string             // "" : a new temp dir
	ffmpeg  *ffmpegWrapper     // nil: the real ffmpeg
	args    []string           // extra flags; they come last, so they win over the defaults below
}

// workerProc is one mediaworker process; start, kill and restart it like an operator (or a crash) would.
type workerProc struct {
	t       *testing.T
	name    string
	opts    workerOpts
	logPath string

	mu       sync.Mutex
	cmd      *exec.Cmd
	done     chan struct{}
	httpAddr string
	exitCode int
}

// startWorker runs a worker and waits until it serves /health/live (it has connected and provisioned
// the streams by then). The process is killed when the test ends; its log is printed if the test failed.
func startWorker(t *testing.T, name string, o workerOpts) *workerProc {
	t.Helper()
	w := newWorkerProc(t, name, o)
	w.start()
	return w
}

// newWorkerProc is startWorker without the start: launch it (several at once) and waitLive.
func newWorkerProc(t *testing.T, name string, o workerOpts) *workerProc {
	t.Helper()
	if o.tmpDir == "" {
		o.tmpDir = t.TempDir()
	}
	w := &workerProc{t: t, name: name, opts: o, logPath: filepath.Join(t.TempDir(), name+".log")}
	t.Cleanup(func() {
		dumped := false
		if t.Failed() && w.pid() != 0 {
			// What was it doing? /health, then SIGQUIT for the Go runtime's goroutine dump in the log.
			t.Logf("worker %s /health at failure: %s", name, w.health())
			w.signal(syscall.SIGQUIT, 10*time.Second)
			dumped = true
		}
		w.kill()
		b, _ := os.ReadFile(w.logPath)
		if d := os.Getenv("FAULTS_KEEP_LOGS"); d != "" {
			_ = os.WriteFile(filepath.Join(d, strings.ReplaceAll(t.Name(), "/", "_")+"-"+name+".log"), b, 0o644)
		}
		switch {
		case dumped:
			// The dump's idle NATS and runtime goroutines would push the stuck job out of CI's
			// truncated output: the log before the dump, then only the goroutines in our code.
			before, ours := testenv.GoroutinesOf(b, 150, "github.com/mediaworker/mediaworker/")
			t.Logf("worker %s log (%s):\n%s", name, w.logPath, before)
			t.Logf("worker %s goroutines running mediaworker code at failure:\n%s", name, ours)
		case t.Failed() || os.Getenv("FAULTS_LOGS") != "":
			t.Logf("worker %s log (%s):\n%s", name, w.logPath, testenv.TailLines(b, 60))
		}
	})
	return w
}

func (w *workerProc) argv() []string {
	o := w.opts
	args := []string{"run",
		"--nats-url", o.natsURL,
		"--clamd-addr", o.clamd.Addr,
		"--tmp-dir", o.tmpDir,
		"--http-addr", w.httpAddr,
		"--log-format", "json",
		"--log-level", "info",
		"--max-image-jobs", "2",
		"--max-video-jobs", "1",
		"--ack-wait", "5s",
		"--backoff-base", "200ms",
		"--backoff-max", "2s",
		"--drain-timeout", "5s",
		// The fault tests upload the same generated file again and again and each time need the work
		// itself (an encode to hold, a scan to fail): the reuse memory would answer the repeats.
		// TestRepeatedUploadsAreReused turns it back on.
		"--no-reuse",
	}
	if o.s3 != nil {
		endpoint := o.s3.Endpoint
		if o.s3Addr != "" {
			endpoint = o.s3Addr
		}
		args = append(args, "--storage", "s3", "--s3-endpoint", endpoint,
			"--s3-access-key", o.s3.AccessKey, "--s3-secret-key", o.s3.SecretKey)
	} else {
		args = append(args, "--storage", "nats")
	}
	if o.ffmpeg != nil {
		args = append(args, "--ffmpeg", o.ffmpeg.path)
	}
	return append(args, o.args...)
}

// start launches the process (again) and waits until it is live. Call it from the test goroutine.
func (w *workerProc) start() {
	w.t.Helper()
	if w.launch() {
		w.waitLive()
	}
}

// launch starts the process without waiting for it; false if it was running already.
func (w *workerProc) launch() bool {
	w.t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cmd != nil {
		return false
	}
	w.httpAddr = testenv.FreeAddr(w.t)
	logf, err := os.OpenFile(w.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		w.t.Fatal(err)
	}
	fmt.Fprintf(logf, "=== %s: mediaworker %s\n", time.Now().Format(time.RFC3339Nano), strings.Join(w.argv(), " "))
	cmd := exec.Command(workerBin, w.argv()...)
	cmd.Env = workerEnv()
	cmd.Stdout, cmd.Stderr = logf, logf
	// A worker must not outlive the test binary, whatever happens to it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		w.t.Fatalf("starting worker %s: %v", w.name, err)
	}
	done := make(chan struct{})
	go func() {
		err := cmd.Wait()
		logf.Close()
		w.mu.Lock()
		w.exitCode = exitCode(err)
		w.mu.Unlock()
		close(done)
	}()
	w.cmd, w.done = cmd, done
	return true
}

// waitLive waits until the worker serves /health/live (it has connected and provisioned the streams).
func (w *workerProc) waitLive() {
	w.t.Helper()
	w.mu.Lock()
	addr, done := w.httpAddr, w.done
	w.mu.Unlock()
	client := &http.Client{Timeout: 2 * time.Second}
	testenv.Eventually(w.t, 60*time.Second, func() error {
		select {
		case <-done:
			b, _ := os.ReadFile(w.logPath)
			w.t.Fatalf("worker %s exited during start-up (status %d):\n%s", w.name, w.exitStatus(), testenv.TailLines(b, 30))
		default:
		}
		resp, err := client.Get("http://" + addr + "/health/live")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("live: %s", resp.Status)
		}
		return nil
	})
}

// pid is the running process's id (0 when not running).
func (w *workerProc) pid() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cmd == nil {
		return 0
	}
	return w.cmd.Process.Pid
}

// kill SIGKILLs the worker, like a crash or the OOM killer, and waits until it is gone.
func (w *workerProc) kill() { w.signal(syscall.SIGKILL, 10*time.Second) }

// term sends SIGTERM (a graceful drain) and returns the exit status.
func (w *workerProc) term(timeout time.Duration) int {
	w.signal(syscall.SIGTERM, timeout)
	return w.exitStatus()
}

func (w *workerProc) signal(sig syscall.Signal, timeout time.Duration) {
	w.mu.Lock()
	cmd, done := w.cmd, w.done
	w.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(timeout):
		w.t.Errorf("worker %s did not exit within %s of %s; killing it", w.name, timeout, sig)
		_ = cmd.Process.Kill()
		<-done
	}
	w.mu.Lock()
	w.cmd, w.done = nil, nil
	w.mu.Unlock()
}

func (w *workerProc) exitStatus() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.exitCode
}

// workerEnv is the test's environment without anything that would configure the worker behind the
// flags' back (MW_*, NATS_URL, AWS credentials).
func workerEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "MW_") || strings.HasPrefix(k, "NATS_") || strings.HasPrefix(k, "AWS_") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return -int(ws.Signal())
		}
		return ee.ExitCode()
	}
	return -1
}

// scratchDirs lists the per-job scratch dirs in a worker's --tmp-dir.
func scratchDirs(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("reading %s: %v", dir, err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() && strings.HasPrefix(e.Name(), pipeline.ScratchPrefix) {
			out = append(out, e.Name())
		}
	}
	return out
}

func (w *workerProc) health() string {
	w.mu.Lock()
	addr := w.httpAddr
	w.mu.Unlock()
	resp, err := (&http.Client{Timeout: 3 * time.Second}).Get("http://" + addr + "/health")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return strings.TrimSpace(b.String())
}

// state describes the streams and the consumer, for failure messages.

// settled reads the worker's log: the outcome of every job it settled in a lane, by mediaId (triage's
// routing is not an outcome).
func (w *workerProc) settled() map[string]string {
	w.t.Helper()
	b, err := os.ReadFile(w.logPath)
	if err != nil {
		w.t.Fatal(err)
	}
	outcomes := map[string]string{"job succeeded": "success", "job failed permanently": "failed",
		"virus detected": "infected", "job gave up; request moved to the dead-letter stream": "dead_lettered"}
	out := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		var e struct{ Message, MediaID, Lane string }
		if json.Unmarshal([]byte(line), &e) != nil || e.Lane == "triage" {
			continue
		}
		if o, ok := outcomes[e.Message]; ok && e.MediaID != "" {
			out[e.MediaID] = o
		}
	}
	return out
}
