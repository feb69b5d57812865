package testenv

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// MinIOVersion is the github.com/minio/minio module version the tests build and run. MinIO publishes
// no binaries through the Go module proxy, so the harness builds one once per machine and caches it.
const MinIOVersion = "v0.0.0-20260212201848-7aac2a2c5b7c"

// minioBuildTimeout bounds a cold build (about 5 minutes on 2 cores).
const minioBuildTimeout = 20 * time.Minute

// CacheDir is where the harness keeps built tools: $MW_CACHE_DIR, else $XDG_CACHE_HOME/mediaworker,
// else ~/.cache/mediaworker.
func CacheDir() (string, error) {
	if d := os.Getenv("MW_CACHE_DIR"); d != "" {
		return d, nil
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "mediaworker"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("finding the cache directory: %w", err)
	}
	return filepath.Join(home, ".cache", "mediaworker"), nil
}

// MinIOBinary returns the path of the cached MinIO server binary, building it first if needed (see
// EnsureMinIO). A failed build fails the test.
func MinIOBinary(t testing.TB) string {
	t.Helper()
	bin, err := EnsureMinIO(t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// EnsureMinIO returns the path of the cached MinIO server binary, building it with `go install` from the
// Go module proxy first if needed. A file lock makes parallel test packages wait for one build instead
// of running several. scripts/test.sh calls it (through internal/testenv/cmd/minio-build) before the
// tests, so the build shows up as its own step.
func EnsureMinIO(logf func(format string, args ...any)) (string, error) {
	return goTool{what: "MinIO", pkg: "github.com/minio/minio", version: MinIOVersion, cache: "minio", file: "minio",
		timeout: minioBuildTimeout}.ensure(logf)
}

// lockFile takes an exclusive flock on path, waiting for other holders.
func lockFile(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

func isExecutable(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0
}

// MinIO is a MinIO server process on loopback, with its data in a test temp dir.
type MinIO struct {
	Endpoint  string // host:port of the S3 API
	AccessKey string
	SecretKey string

	serverProc
	bin     string
	dataDir string
	console string
	env     []string // more of MinIO's settings (StartMinIOWith)
}

// StartMinIO starts a MinIO server on free loopback ports and stops it when the test ends. Its output
// goes to a log file that is printed if the test fails.
func StartMinIO(t testing.TB) *MinIO {
	t.Helper()
	return StartMinIOWith(t, nil)
}

// StartMinIOWith starts MinIO as StartMinIO does, with more of its settings as environment variables
// (its NATS notification target: MINIO_NOTIFY_NATS_*).
func StartMinIOWith(t testing.TB, env map[string]string) *MinIO {
	t.Helper()
	dir := t.TempDir()
	m := &MinIO{
		Endpoint:   FreeAddr(t),
		AccessKey:  "mediaworker",
		SecretKey:  "mediaworker-secret",
		serverProc: serverProc{t: t, what: "MinIO", logPath: filepath.Join(dir, "minio.log")},
		bin:        MinIOBinary(t),
		dataDir:    filepath.Join(dir, "data"),
		console:    FreeAddr(t),
	}
	for k, v := range env {
		m.env = append(m.env, k+"="+v)
	}
	m.stopAtEnd()
	m.Start()
	return m
}

// URL is the S3 API's base URL.
func (m *MinIO) URL() string { return "http://" + m.Endpoint }

// Start (re)starts the server on the same ports and data directory, and waits until it is live. It
// does nothing if the server is running.
func (m *MinIO) Start() {
	m.t.Helper()
	m.start(func() *exec.Cmd {
		home := filepath.Join(filepath.Dir(m.logPath), "home")
		cmd := exec.Command(m.bin, "server",
			"--address", m.Endpoint,
			"--console-address", m.console,
			"--certs-dir", filepath.Join(home, "certs"),
			m.dataDir)
		cmd.Env = []string{
			"PATH=" + os.Getenv("PATH"),
			"HOME=" + home,
			"MINIO_ROOT_USER=" + m.AccessKey,
			"MINIO_ROOT_PASSWORD=" + m.SecretKey,
			"MINIO_BROWSER=off",
			"MINIO_UPDATE=off",
		}
		cmd.Env = append(cmd.Env, m.env...)
		return cmd
	}, func(client *http.Client) error {
		// live: the process serves; ready: it can serve S3 requests (its drive is initialised).
		for _, p := range []string{"/minio/health/live", "/minio/health/ready"} {
			resp, err := client.Get(m.URL() + p)
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s: %s", p, resp.Status)
			}
		}
		// Both can answer 200 while the object layer still says "Server not initialized yet" (503) to
		// S3 calls: wait until an anonymous ListBuckets is refused for the usual reason instead.
		resp, err := client.Get(m.URL() + "/")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable {
			return fmt.Errorf("S3 API: %s", resp.Status)
		}
		return nil
	})
}
