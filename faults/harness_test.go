package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/mediaworker/mediaworker/app"
	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/internal/testenv"
	natsjs "github.com/mediaworker/mediaworker/jetstream"
	"github.com/mediaworker/mediaworker/objstore"
	"github.com/mediaworker/mediaworker/pipeline"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// streams are the default stream names and subjects the worker provisions (--app app).
var streams = natsjs.DefaultConfig()

const bucket = "media"

// ---------------------------------------------------------------------------------------------------
// The worker as a process.

// workerOpts says how to run one `mediaworker run` process.
type workerOpts struct {
	natsURL string
	clamd   *testenv.Clamd
	minio   *testenv.MinIO // nil: --storage nats
	s3Addr  string         // "": minio's own endpoint (a fault proxy's otherwise)
	tmpDir  string         // "" : a new temp dir
	ffmpeg  *ffmpegWrapper // nil: the real ffmpeg
	args    []string       // extra flags; they come last, so they win over the defaults below
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
	if o.tmpDir == "" {
		o.tmpDir = t.TempDir()
	}
	w := &workerProc{t: t, name: name, opts: o, logPath: filepath.Join(t.TempDir(), name+".log")}
	t.Cleanup(func() {
		lines := 60
		if t.Failed() && w.pid() != 0 {
			// What was it doing? /health, then SIGQUIT for the Go runtime's goroutine dump in the log.
			t.Logf("worker %s /health at failure: %s", name, w.health())
			w.signal(syscall.SIGQUIT, 10*time.Second)
			lines = 400
		}
		w.kill()
		b, _ := os.ReadFile(w.logPath)
		if d := os.Getenv("FAULTS_KEEP_LOGS"); d != "" {
			_ = os.WriteFile(filepath.Join(d, strings.ReplaceAll(t.Name(), "/", "_")+"-"+name+".log"), b, 0o644)
		}
		if t.Failed() || os.Getenv("FAULTS_LOGS") != "" {
			t.Logf("worker %s log (%s):\n%s", name, w.logPath, tailLines(b, lines))
		}
	})
	w.start()
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
	}
	if o.minio != nil {
		endpoint := o.minio.Endpoint
		if o.s3Addr != "" {
			endpoint = o.s3Addr
		}
		args = append(args, "--storage", "s3", "--s3-endpoint", endpoint,
			"--s3-access-key", o.minio.AccessKey, "--s3-secret-key", o.minio.SecretKey)
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
	w.httpAddr = freeAddr(w.t)
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
			w.t.Fatalf("worker %s exited during start-up (status %d):\n%s", w.name, w.exitStatus(), tailLines(b, 30))
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

// ---------------------------------------------------------------------------------------------------
// A controllable ffmpeg.

// ffmpegWrapper is a stand-in for ffmpeg that records every video encode (pid and the worker's pid) and
// can delay it or hold it until released, then execs the real ffmpeg. Only encodes (libx264) are
// affected; posters, stream-copy remuxes and HLS run at once. The worker gives ffmpeg an environment with PATH only,
// so the wrapper's control files are baked into the script.
type ffmpegWrapper struct {
	path string
	ctl  string
	real string // the ffmpeg it execs
	t    *testing.T
}

type encodeRun struct{ pid, workerPID int }

func newFFmpegWrapper(t *testing.T) *ffmpegWrapper {
	t.Helper()
	real := testenv.RequireBinary(t, "ffmpeg")
	dir := t.TempDir()
	f := &ffmpegWrapper{path: filepath.Join(dir, "ffmpeg"), ctl: filepath.Join(dir, "ctl"), t: t}
	if err := os.Mkdir(f.ctl, 0o755); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf(`#!/bin/sh
# Fault-test stand-in for ffmpeg (faults/harness_test.go).
case "$*" in
*libx264*)
	echo "$$ $PPID" >> '%[1]s/encodes'
	if [ -f '%[1]s/delay' ]; then sleep "$(cat '%[1]s/delay')"; fi
	while [ -e '%[1]s/hold' ]; do sleep 0.05; done
	;;
esac
exec '%[2]s' "$@"
`, f.ctl, real)
	if err := os.WriteFile(f.path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	f.real = real
	// Whatever a test left running (an orphan of a killed worker, a held encode) goes with the test.
	t.Cleanup(func() {
		for _, e := range f.encodes() {
			f.kill(e)
		}
	})
	return f
}

// hold makes encodes wait until release.
func (f *ffmpegWrapper) hold() {
	if err := os.WriteFile(filepath.Join(f.ctl, "hold"), nil, 0o644); err != nil {
		f.t.Fatal(err)
	}
}

func (f *ffmpegWrapper) release() {
	if err := os.Remove(filepath.Join(f.ctl, "hold")); err != nil && !errors.Is(err, os.ErrNotExist) {
		f.t.Fatal(err)
	}
}

// delay makes every encode start d later.
func (f *ffmpegWrapper) delay(d time.Duration) {
	if err := os.WriteFile(filepath.Join(f.ctl, "delay"), []byte(strconv.FormatFloat(d.Seconds(), 'f', 3, 64)), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

// encodes lists the encodes started so far.
func (f *ffmpegWrapper) encodes() []encodeRun {
	b, err := os.ReadFile(filepath.Join(f.ctl, "encodes"))
	if err != nil {
		return nil
	}
	var out []encodeRun
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var e encodeRun
		if _, err := fmt.Sscan(line, &e.pid, &e.workerPID); err == nil {
			out = append(out, e)
		}
	}
	return out
}

// kill stops an encode's process group if it still runs (an orphan of a killed worker, or one a test
// held), checking first that the pid is still the wrapper or the ffmpeg it became, not a reused one.
func (f *ffmpegWrapper) kill(e encodeRun) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", e.pid))
	if err != nil || !alive(e.pid) {
		return
	}
	argv := strings.Split(string(b), "\x00")
	if slices.Contains(argv, f.path) || argv[0] == f.real {
		_ = syscall.Kill(-e.pid, syscall.SIGKILL) // its own process group: ffmpeg, or the script and its sleep
	}
}

// alive reports whether pid is a running (not zombie) process.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// "pid (comm) S ...": the state follows the last ')'.
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X'
}

// ---------------------------------------------------------------------------------------------------
// What the API sees.

// ledger records what the worker tells the API. The durable record is the responses stream (what an
// API consuming it sees: publishes are deduplicated by Nats-Msg-Id there); "wire" counts what a plain
// core-NATS subscriber saw, which may include a republished duplicate after a crash.
type ledger struct {
	t  *testing.T
	nc *nats.Conn
	js jetstream.JetStream

	mu        sync.Mutex
	wire      map[string]int
	respNext  uint64
	responses map[string][]contracts.Response
	viruses   map[string][]contracts.VirusEvent
	dlqNext   uint64
	dlq       []deadLetter
}

type deadLetter struct {
	seq    uint64
	data   []byte
	header nats.Header
}

// newLedger connects to urls (comma-separated) and keeps reconnecting for as long as the test runs.
func newLedger(t *testing.T, urls string) *ledger {
	t.Helper()
	nc, err := nats.Connect(urls, nats.Name("faults:"+t.Name()), nats.MaxReconnects(-1),
		nats.ReconnectWait(200*time.Millisecond), nats.RetryOnFailedConnect(false))
	if err != nil {
		t.Fatalf("connecting to nats: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	l := &ledger{t: t, nc: nc, js: js, wire: map[string]int{}, respNext: 1, dlqNext: 1,
		responses: map[string][]contracts.Response{}, viruses: map[string][]contracts.VirusEvent{}}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("NATS state at failure:\n%s", l.state())
		}
	})
	if _, err := nc.Subscribe(streams.Subjects().Response, func(m *nats.Msg) {
		var r contracts.Response
		_ = json.Unmarshal(m.Data, &r)
		l.mu.Lock()
		l.wire[r.MediaID]++
		l.mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return l
}

// sync reads what was added to the responses and DLQ streams since the last call.
func (l *ledger) sync() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l.mu.Lock()
	defer l.mu.Unlock()
	err := readStream(ctx, l.js, l.nc, streams.ResponsesStream(), &l.respNext, func(m *jetstream.RawStreamMsg) error {
		if m.Subject == streams.Subjects().Virus {
			if err := contracts.ValidateJSON(contracts.SchemaVirusEvent, m.Data); err != nil {
				l.t.Errorf("virus event does not match its schema: %v\n%s", err, m.Data)
			}
			var v contracts.VirusEvent
			_ = json.Unmarshal(m.Data, &v)
			l.viruses[v.MediaID] = append(l.viruses[v.MediaID], v)
			return nil
		}
		if err := contracts.ValidateJSON(contracts.SchemaResponse, m.Data); err != nil {
			l.t.Errorf("response does not match its schema: %v\n%s", err, m.Data)
		}
		var r contracts.Response
		_ = json.Unmarshal(m.Data, &r)
		l.responses[r.MediaID] = append(l.responses[r.MediaID], r)
		return nil
	})
	if err != nil {
		return err
	}
	return readStream(ctx, l.js, l.nc, streams.DLQStream(), &l.dlqNext, func(m *jetstream.RawStreamMsg) error {
		l.dlq = append(l.dlq, deadLetter{seq: m.Sequence, data: m.Data, header: m.Header})
		return nil
	})
}

// readStream reads messages next..LastSeq of a stream and advances next.
func readStream(ctx context.Context, js jetstream.JetStream, nc *nats.Conn, name string, next *uint64, fn func(*jetstream.RawStreamMsg) error) error {
	s, err := js.Stream(ctx, name)
	if err != nil {
		return fmt.Errorf("looking up stream %s: %w", name, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return fmt.Errorf("stream %s info: %w", name, err)
	}
	for ; *next <= info.State.LastSeq; *next++ {
		m, err := leaderGet(ctx, nc, name, *next)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // deleted (a replayed dead letter)
		}
		if err != nil {
			return fmt.Errorf("reading %s #%d: %w", name, *next, err)
		}
		if err := fn(m); err != nil {
			return err
		}
	}
	return nil
}

// leaderGet fetches one message through the stream leader. The streams allow direct gets, which any
// replica may answer, and a replica that lags a moment after a leader change answers "not found" for a
// message that exists: a ledger that skipped it would report a lost response that was not lost.
func leaderGet(ctx context.Context, nc *nats.Conn, stream string, seq uint64) (*jetstream.RawStreamMsg, error) {
	req, _ := json.Marshal(map[string]uint64{"seq": seq})
	msg, err := nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+stream, req)
	if err != nil {
		return nil, err
	}
	var resp struct {
		Error *struct {
			Code        int    `json:"code"`
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
		Message *struct {
			Subject string    `json:"subject"`
			Seq     uint64    `json:"seq"`
			Header  []byte    `json:"hdrs"`
			Data    []byte    `json:"data"`
			Time    time.Time `json:"time"`
		} `json:"message"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return nil, fmt.Errorf("decoding the message get response: %w", err)
	}
	if resp.Error != nil {
		if resp.Error.ErrCode == 10037 { // JSNoMessageFoundErr
			return nil, jetstream.ErrMsgNotFound
		}
		return nil, fmt.Errorf("getting %s #%d: %s (%d)", stream, seq, resp.Error.Description, resp.Error.ErrCode)
	}
	if resp.Message == nil {
		return nil, fmt.Errorf("getting %s #%d: empty response", stream, seq)
	}
	m := &jetstream.RawStreamMsg{Subject: resp.Message.Subject, Sequence: resp.Message.Seq, Data: resp.Message.Data, Time: resp.Message.Time}
	if len(resp.Message.Header) > 0 {
		h, err := nats.DecodeHeadersMsg(resp.Message.Header)
		if err != nil {
			return nil, fmt.Errorf("decoding headers of %s #%d: %w", stream, seq, err)
		}
		m.Header = h
	}
	return m, nil
}

// await waits until every id has at least one response in the stream.
func (l *ledger) await(ids []string, timeout time.Duration) {
	l.t.Helper()
	testenv.Eventually(l.t, timeout, func() error {
		if err := l.sync(); err != nil {
			return err
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		missing := 0
		for _, id := range ids {
			if len(l.responses[id]) == 0 {
				missing++
			}
		}
		if missing > 0 {
			return fmt.Errorf("%d of %d requests have no response yet", missing, len(ids))
		}
		return nil
	})
}

// awaitDLQ waits until the DLQ holds at least n dead letters.
func (l *ledger) awaitDLQ(n int, timeout time.Duration) {
	l.t.Helper()
	testenv.Eventually(l.t, timeout, func() error {
		if err := l.sync(); err != nil {
			return err
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		if len(l.dlq) < n {
			return fmt.Errorf("dlq holds %d of %d dead letters", len(l.dlq), n)
		}
		return nil
	})
}

// one returns the single response of id, failing the test if there is not exactly one in the stream.
func (l *ledger) one(id string) contracts.Response {
	l.t.Helper()
	if err := l.sync(); err != nil {
		l.t.Fatal(err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	rs := l.responses[id]
	if len(rs) != 1 {
		l.t.Fatalf("%s: %d responses in the stream, want exactly 1: %+v", id, len(rs), rs)
	}
	return rs[0]
}

func (l *ledger) count(id string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.responses[id])
}

func (l *ledger) wireCount(id string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.wire[id]
}

func (l *ledger) total() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, rs := range l.responses {
		n += len(rs)
	}
	return n
}

func (l *ledger) deadLetters() []deadLetter {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]deadLetter(nil), l.dlq...)
}

// consumer returns the shared durable's info.
func (l *ledger) consumer() *jetstream.ConsumerInfo {
	l.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := l.js.Consumer(ctx, streams.RequestsStream(), streams.Durable)
	if err != nil {
		l.t.Fatalf("looking up the consumer: %v", err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		l.t.Fatalf("consumer info: %v", err)
	}
	return info
}

// awaitEmptyQueue waits until the work queue holds nothing and nothing is pending an ack: every
// request was settled and removed.
func (l *ledger) awaitEmptyQueue(timeout time.Duration) {
	l.t.Helper()
	testenv.Eventually(l.t, timeout, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s, err := l.js.Stream(ctx, streams.RequestsStream())
		if err != nil {
			return err
		}
		info, err := s.Info(ctx)
		if err != nil {
			return err
		}
		if info.State.Msgs != 0 {
			return fmt.Errorf("work queue holds %d requests", info.State.Msgs)
		}
		return nil
	})
}

// ---------------------------------------------------------------------------------------------------
// Uploads and requests.

// client is the API side: it uploads media and publishes requests.
type client struct {
	t     *testing.T
	js    jetstream.JetStream
	store objstore.Store
}

// newClient opens the same store the workers use: the JetStream object store of the NATS at urls, or
// MinIO.
func newClient(t *testing.T, l *ledger, m *testenv.MinIO, replicas int) *client {
	t.Helper()
	cfg := app.DefaultConfig()
	cfg.Streams.Replicas = replicas
	if m != nil {
		cfg.Storage = app.StorageS3
		cfg.S3.Endpoint, cfg.S3.AccessKey, cfg.S3.SecretKey = m.Endpoint, m.AccessKey, m.SecretKey
	}
	store, err := app.OpenStore(context.Background(), cfg, l.js)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := store.EnsureBucket(ctx, bucket); err != nil {
		t.Fatalf("creating bucket: %v", err)
	}
	return &client{t: t, js: l.js, store: store}
}

// upload stores path under key.
func (c *client) upload(path, key string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := objstore.UploadFile(ctx, c.store, bucket, key, path, "application/octet-stream"); err != nil {
		c.t.Fatalf("uploading %s: %v", key, err)
	}
}

// submit uploads path under key, publishes a request for it and returns the mediaId.
func (c *client) submit(path, key string) string {
	c.t.Helper()
	c.upload(path, key)
	return c.request(key)
}

func (c *client) request(key string) string {
	c.t.Helper()
	id := uuid.NewString()
	data, _ := json.Marshal(contracts.Request{S3Key: key, S3Bucket: bucket, MediaID: id, MediaURL: "https://api.example/v1/media/" + id})
	c.publish(data, id)
	return id
}

// publish publishes a raw request payload with a Nats-Msg-Id, as the API does.
func (c *client) publish(data []byte, msgID string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.js.PublishMsg(ctx, &nats.Msg{Subject: streams.Subjects().Request, Data: data}, jetstream.WithMsgID(msgID)); err != nil {
		c.t.Fatalf("publishing request: %v", err)
	}
}

func (c *client) exists(key string) bool {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := c.store.Stat(ctx, bucket, key)
	if err != nil && !errors.Is(err, objstore.ErrNotFound) {
		c.t.Fatalf("stat %s: %v", key, err)
	}
	return err == nil
}

// ---------------------------------------------------------------------------------------------------
// Small things.

// freeAddr returns a loopback host:port that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("finding a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().String()
}

func tailLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{"..."}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// writeFile writes b to dir/name and returns the path.
func writeFile(t *testing.T, dir, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// window lets time pass during a fault while checking that nothing that must not happen does.
func window(t *testing.T, d time.Duration, check func() error) {
	t.Helper()
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if err := check(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// responsesOf returns the responses of id in the stream, in order.
func (l *ledger) responsesOf(id string) []contracts.Response {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]contracts.Response(nil), l.responses[id]...)
}

// health returns the worker's /health JSON (jobs per pool, held messages, consumer counts), for
// failure messages.
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
func (l *ledger) state() string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var b strings.Builder
	for _, name := range []string{streams.RequestsStream(), streams.ResponsesStream(), streams.DLQStream(), streams.AdvisoryStream()} {
		s, err := l.js.Stream(ctx, name)
		if err != nil {
			fmt.Fprintf(&b, "  stream %s: %v\n", name, err)
			continue
		}
		info, err := s.Info(ctx)
		if err != nil {
			fmt.Fprintf(&b, "  stream %s: %v\n", name, err)
			continue
		}
		fmt.Fprintf(&b, "  stream %s: %d msgs, seq %d..%d, deleted %d", name, info.State.Msgs, info.State.FirstSeq, info.State.LastSeq, info.State.NumDeleted)
		if info.Cluster != nil {
			fmt.Fprintf(&b, ", leader %s", info.Cluster.Leader)
		}
		b.WriteString("\n")
		if name == streams.RequestsStream() && info.State.Msgs > 0 && info.State.Msgs < 20 {
			for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
				if m, err := s.GetMsg(ctx, seq); err == nil {
					fmt.Fprintf(&b, "    #%d %s\n", seq, m.Data)
				}
			}
		}
	}
	c, err := l.js.Consumer(ctx, streams.RequestsStream(), streams.Durable)
	if err != nil {
		fmt.Fprintf(&b, "  consumer: %v\n", err)
		return b.String()
	}
	info, err := c.Info(ctx)
	if err != nil {
		fmt.Fprintf(&b, "  consumer: %v\n", err)
		return b.String()
	}
	fmt.Fprintf(&b, "  consumer: delivered %d (stream %d), ack floor %d (stream %d), pending %d, ack pending %d, redelivered %d, waiting pulls %d\n",
		info.Delivered.Consumer, info.Delivered.Stream, info.AckFloor.Consumer, info.AckFloor.Stream,
		info.NumPending, info.NumAckPending, info.NumRedelivered, info.NumWaiting)
	return b.String()
}
