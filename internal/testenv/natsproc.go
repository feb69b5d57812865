package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// natsServerModule is the module whose main package is the nats-server binary. It is in go.mod (the
// worker embeds the server), so `go build` of it needs nothing from the network.
const natsServerModule = "github.com/nats-io/nats-server/v2"

// natsBuildTimeout bounds one build of nats-server (seconds when the module cache is warm).
const natsBuildTimeout = 5 * time.Minute

// EnsureNATSServer returns the path of a nats-server binary of the version in go.mod, building it into
// the cache directory first if needed. Tests that restart or kill the broker need it as a separate
// process: an in-process server shares the test's fate and cannot be SIGKILLed.
func EnsureNATSServer(logf func(format string, args ...any)) (string, error) {
	cache, err := CacheDir()
	if err != nil {
		return "", err
	}
	root, err := findRepoRoot()
	if err != nil {
		return "", err
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("the go command is needed to build nats-server: %w", err)
	}
	version, err := natsServerVersion(root, goBin)
	if err != nil {
		return "", err
	}
	bin := filepath.Join(cache, "nats-server-"+version, "nats-server")
	if isExecutable(bin) {
		return bin, nil
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", fmt.Errorf("creating cache dir: %w", err)
	}
	unlock, err := lockFile(filepath.Join(cache, "nats-server.lock"))
	if err != nil {
		return "", fmt.Errorf("locking the nats-server build: %w", err)
	}
	defer unlock()
	if isExecutable(bin) { // built by another package while we waited for the lock
		return bin, nil
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return "", err
	}
	tmp := bin + ".tmp"
	logf("building nats-server %s into %s", version, filepath.Dir(bin))
	ctx, cancel := context.WithTimeout(context.Background(), natsBuildTimeout)
	defer cancel()
	// Inside the repository, so the version is exactly the one go.mod pins (and go.sum vouches for).
	cmd := exec.CommandContext(ctx, goBin, "build", "-o", tmp, natsServerModule)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("building nats-server: %w\n%s", err, TailLines(out, 40))
	}
	// Renamed into place only when complete, so the existence check above is enough.
	if err := os.Rename(tmp, bin); err != nil {
		return "", err
	}
	return bin, nil
}

// natsServerVersion asks the go command which version of nats-server go.mod requires.
func natsServerVersion(root, goBin string) (string, error) {
	cmd := exec.Command(goBin, "list", "-m", "-f", "{{if .Replace}}{{.Replace.Version}}{{else}}{{.Version}}{{end}}", natsServerModule)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("finding the nats-server version in go.mod: %w", err)
	}
	v := strings.TrimSpace(string(out))
	if v == "" {
		return "", fmt.Errorf("go.mod requires no version of %s", natsServerModule)
	}
	return v, nil
}

// findRepoRoot walks up from the working directory to the directory holding go.mod.
func findRepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("go.mod not found above %s", dir)
		}
		dir = parent
	}
}

// NATSProc is a nats-server process with JetStream on file storage, on a fixed loopback port, so it can
// be stopped, killed and started again on the same address and store, like a broker restarting.
type NATSProc struct {
	URL      string // nats://127.0.0.1:PORT
	Port     int
	StoreDir string

	t       testing.TB
	bin     string
	logPath string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// StartNATSProc builds (once) and starts a nats-server process with JetStream on a free loopback port,
// and kills it when the test ends. Its log is printed if the test fails.
func StartNATSProc(t testing.TB) *NATSProc {
	t.Helper()
	bin, err := EnsureNATSServer(t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	port := FreePort(t)
	p := &NATSProc{
		URL:      "nats://127.0.0.1:" + strconv.Itoa(port),
		Port:     port,
		StoreDir: filepath.Join(dir, "store"),
		t:        t,
		bin:      bin,
		logPath:  filepath.Join(dir, "nats-server.log"),
	}
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			if b, err := os.ReadFile(p.logPath); err == nil {
				t.Logf("nats-server log (%s):\n%s", p.logPath, TailLines(b, 60))
			}
		}
	})
	p.Start()
	return p
}

// Start starts the server (again) on the same port and store and waits until it serves JetStream
// requests. It does nothing if the server is running. Call it from the test goroutine.
func (p *NATSProc) Start() {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return
	}
	logf, err := os.OpenFile(p.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		p.t.Fatalf("opening nats-server log: %v", err)
	}
	cmd := exec.Command(p.bin, "-a", "127.0.0.1", "-p", strconv.Itoa(p.Port), "-js", "-sd", p.StoreDir,
		"-n", "faults")
	cmd.Stdout, cmd.Stderr = logf, logf
	// Die with the test binary even if it is killed before cleanups run.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	started := time.Now()
	if err := cmd.Start(); err != nil {
		logf.Close()
		p.t.Fatalf("starting nats-server: %v", err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(done)
	}()
	p.cmd, p.done = cmd, done
	// The port was released by the previous process a moment ago; the server retries nothing, so an
	// exit here means the port is taken and the test cannot go on.
	Eventually(p.t, 30*time.Second, func() error {
		select {
		case <-done:
			b, _ := os.ReadFile(p.logPath)
			p.t.Fatalf("nats-server exited during start-up:\n%s", TailLines(b, 40))
		default:
		}
		return JetStreamReady(p.URL)
	})
	p.t.Logf("nats-server ready on %s in %s", p.URL, time.Since(started).Round(time.Millisecond))
}

// Stop shuts the server down gracefully (SIGTERM: it flushes its store) and waits for it to exit.
func (p *NATSProc) Stop() { p.signal(syscall.SIGTERM) }

// Kill kills the server (SIGKILL: a crash) and waits for it to exit. The store is kept for Start.
func (p *NATSProc) Kill() { p.signal(syscall.SIGKILL) }

func (p *NATSProc) signal(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	p.cmd, p.done = nil, nil
}
