package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// WorkerOptions says how to start a `mediaworker run` subprocess on its embedded default (in-process
// NATS JetStream server, JetStream object store) with clamd at ClamdAddr.
type WorkerOptions struct {
	Bin       string   // the built mediaworker binary
	Dir       string   // gets data/, tmp/ and worker.log; created if missing
	ClamdAddr string   // tcp://127.0.0.1:PORT
	ImageJobs int      // --max-image-jobs
	VideoJobs int      // --max-video-jobs
	Args      []string // more flags, e.g. --ffmpeg /path/to/wrapper
	Env       []string // more environment, e.g. MALLOC_ARENA_MAX=2
	// Reuse keeps the worker's reuse memory on (repeated uploads answered from what they became
	// before). Off by default: the benchmarks send the same files again and again, and every upload a
	// site receives is new (as clamd's clean-file cache is off in them), so each job must do the work.
	// A binary older than the memory has no --no-reuse and is started without it.
	Reuse bool
}

// Worker is a running `mediaworker run` process. It runs as a subprocess (not in the benchmark's own
// process) so that its RSS is its own: the embedded NATS server, the pipeline and libvips, nothing of
// the load generator.
type Worker struct {
	Args     []string      // the full command line
	NATSURL  string        // nats://127.0.0.1:PORT of the embedded server
	HTTPBase string        // http://127.0.0.1:PORT
	LogPath  string        // the worker's stderr (JSON log lines)
	Ready    time.Duration // from exec to the first 200 of GET /health/ready

	cmd     *exec.Cmd
	done    chan struct{}
	exitErr error
	logFile *os.File
}

// StartWorker starts the worker on free loopback ports and waits until /health/ready answers 200
// (NATS, the consumer, the object store, clamd and the scratch disk all checked). A start that fails
// because a port was taken in the meantime is retried on new ports.
func StartWorker(ctx context.Context, o WorkerOptions) (*Worker, error) {
	var err error
	for range 3 {
		var w *Worker
		if w, err = startWorker(ctx, o); err == nil {
			return w, nil
		}
		if !errors.Is(err, errExitedEarly) {
			return nil, err
		}
	}
	return nil, err
}

var errExitedEarly = errors.New("worker exited during start")

// KnowsFlag says whether bin's `run` command has --name (its help lists it), asked once per binary.
func KnowsFlag(bin, name string) bool {
	key := bin + " --" + name
	flagsKnown.Lock()
	defer flagsKnown.Unlock()
	if v, ok := flagsKnown.m[key]; ok {
		return v
	}
	out, _ := exec.Command(bin, "run", "--help").CombinedOutput()
	v := strings.Contains(string(out), "-"+name+" ") || strings.Contains(string(out), "-"+name+"\n")
	flagsKnown.m[key] = v
	return v
}

var flagsKnown = struct {
	sync.Mutex
	m map[string]bool
}{m: map[string]bool{}}

func startWorker(ctx context.Context, o WorkerOptions) (*Worker, error) {
	natsPort, err := FreePort()
	if err != nil {
		return nil, err
	}
	httpPort, err := FreePort()
	if err != nil {
		return nil, err
	}
	data := filepath.Join(o.Dir, "data")
	tmp := filepath.Join(o.Dir, "tmp")
	for _, d := range []string{data, tmp} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("creating %s: %w", d, err)
		}
	}
	args := []string{"run",
		"--nats-listen", "127.0.0.1:" + strconv.Itoa(natsPort),
		"--data-dir", data,
		"--tmp-dir", tmp,
		"--http-addr", "127.0.0.1:" + strconv.Itoa(httpPort),
		"--clamd-addr", o.ClamdAddr,
		"--max-image-jobs", strconv.Itoa(o.ImageJobs),
		"--max-video-jobs", strconv.Itoa(o.VideoJobs),
		"--log-format", "json", "--log-level", "warn",
	}
	if !o.Reuse && KnowsFlag(o.Bin, "no-reuse") {
		args = append(args, "--no-reuse")
	}
	args = append(args, o.Args...)
	w := &Worker{
		Args:     append([]string{o.Bin}, args...),
		NATSURL:  fmt.Sprintf("nats://127.0.0.1:%d", natsPort),
		HTTPBase: fmt.Sprintf("http://127.0.0.1:%d", httpPort),
		LogPath:  filepath.Join(o.Dir, "worker.log"),
		done:     make(chan struct{}),
	}
	if w.logFile, err = os.OpenFile(w.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
		return nil, fmt.Errorf("opening worker log: %w", err)
	}
	w.cmd = exec.Command(o.Bin, args...)
	// Only what the worker needs: an inherited NATS_URL or MW_* variable would change what is measured.
	w.cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}, o.Env...)
	w.cmd.Stdout = w.logFile
	w.cmd.Stderr = w.logFile
	// If the benchmark dies, the worker must not outlive it holding ports.
	w.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	start := time.Now()
	if err := w.cmd.Start(); err != nil {
		w.logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", o.Bin, err)
	}
	go func() {
		w.exitErr = w.cmd.Wait()
		close(w.done)
	}()

	hc := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-w.done:
			w.logFile.Close()
			return nil, fmt.Errorf("%w: %v; log tail:\n%s", errExitedEarly, w.exitErr, tailFile(w.LogPath, 2048))
		default:
		}
		if ok, _ := w.ready(ctx, hc); ok {
			w.Ready = time.Since(start)
			return w, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			w.Kill()
			return nil, fmt.Errorf("worker not ready within 60s; log tail:\n%s", tailFile(w.LogPath, 2048))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (w *Worker) ready(ctx context.Context, hc *http.Client) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.HTTPBase+"/health/ready", nil)
	if err != nil {
		return false, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return false, err
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK, nil
}

// Pid is the worker's process id.
func (w *Worker) Pid() int { return w.cmd.Process.Pid }

// Memory reads the worker's VmRSS and VmHWM.
func (w *Worker) Memory() (Memory, error) { return ReadMemory(w.Pid()) }

// Stop sends SIGTERM and waits for the drain (at most 30 s, then SIGKILL). Idempotent.
func (w *Worker) Stop() error {
	select {
	case <-w.done:
		return nil
	default:
	}
	_ = w.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-w.done:
	case <-time.After(30 * time.Second):
		w.Kill()
		return errors.New("worker did not stop within 30s of SIGTERM; killed")
	}
	w.logFile.Close()
	var ee *exec.ExitError
	if errors.As(w.exitErr, &ee) {
		return fmt.Errorf("worker exited with %v; log tail:\n%s", w.exitErr, tailFile(w.LogPath, 2048))
	}
	return nil
}

// Kill stops the worker at once.
func (w *Worker) Kill() {
	_ = w.cmd.Process.Kill()
	<-w.done
	w.logFile.Close()
}

// Metrics scrapes /metrics into a map from "name{labels}" to value.
func (w *Worker) Metrics(ctx context.Context) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.HTTPBase+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scraping metrics: %w", err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[line[:i]] = v
	}
	return out, sc.Err()
}

// FreePort asks the kernel for a free TCP port on 127.0.0.1.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
