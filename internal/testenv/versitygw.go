package testenv

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// VersityGWVersion is the github.com/versity/versitygw module version the tests build and run: a
// maintained, Apache-2.0 S3 gateway written in Go (so `go install` from the module proxy builds it, as
// for MinIO) that sends S3 event notifications to NATS itself (--event-nats-url, --event-nats-topic), in
// AWS's {"Records":[…]} shape.
const VersityGWVersion = "v1.8.0"

// versityGWBuildTimeout bounds a cold build (see EnsureVersityGW for the time it takes).
const versityGWBuildTimeout = 20 * time.Minute

// VersityGWBinary returns the path of the cached versitygw binary, building it first if needed. A
// failed build fails the test.
func VersityGWBinary(t testing.TB) string {
	t.Helper()
	bin, err := EnsureVersityGW(t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// EnsureVersityGW returns the path of the cached versitygw binary at VersityGWVersion, installing it
// with `go install` from the Go module proxy first if needed (a cold build, module downloads included,
// took 9 min 48 s of wall time and 120 s of CPU on the project's 2 shared, busy cores; the downloads
// were most of the wait). A file lock makes parallel test packages wait for one build.
// scripts/test.sh runs it (internal/testenv/cmd/versitygw-build) before the tests.
func EnsureVersityGW(logf func(format string, args ...any)) (string, error) {
	return goTool{what: "versitygw", pkg: "github.com/versity/versitygw/cmd/versitygw", version: VersityGWVersion,
		cache: "versitygw", file: "versitygw", timeout: versityGWBuildTimeout}.ensure(logf)
}

// VersityGWOptions configures a versitygw process.
type VersityGWOptions struct {
	// EventNATSURL and EventNATSTopic, when set, make versitygw publish an S3 event notification on
	// the topic for every object operation.
	EventNATSURL, EventNATSTopic string
	// Versioning lets buckets version their objects (posix --versioning-dir).
	Versioning bool
	// IAM runs versitygw's internal IAM (--iam-dir, in the test temp dir): accounts besides root, made
	// through the admin API on the S3 port (`versitygw admin create-user`), as deploy/compose.yaml does.
	IAM bool
}

// VersityGW is a versitygw process on loopback serving a posix directory of a test temp dir.
type VersityGW struct {
	Endpoint  string // host:port of the S3 API
	AccessKey string
	SecretKey string

	serverProc
	bin  string
	root string
	opts VersityGWOptions
}

// StartVersityGW starts versitygw on a free loopback port and stops it when the test ends. Its output
// goes to a log file printed if the test fails.
func StartVersityGW(t testing.TB, opts VersityGWOptions) *VersityGW {
	t.Helper()
	dir := t.TempDir()
	g := &VersityGW{
		Endpoint: FreeAddr(t), AccessKey: "mediaworker", SecretKey: "mediaworker-secret",
		serverProc: serverProc{t: t, what: "versitygw", logPath: filepath.Join(dir, "versitygw.log")},
		bin:        VersityGWBinary(t), root: filepath.Join(dir, "root"), opts: opts,
	}
	for _, d := range []string{g.root, filepath.Join(dir, "versions"), filepath.Join(dir, "iam")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	g.stopAtEnd()
	g.Start()
	return g
}

// URL is the S3 API's base URL.
func (g *VersityGW) URL() string { return "http://" + g.Endpoint }

// Start (re)starts the gateway on the same port and directories and waits until it answers. It does
// nothing if it is running.
func (g *VersityGW) Start() {
	g.t.Helper()
	g.start(func() *exec.Cmd {
		args := []string{"--port", g.Endpoint, "--access", g.AccessKey, "--secret", g.SecretKey,
			"--region", "us-east-1", "--health", "/health"}
		if g.opts.IAM {
			args = append(args, "--iam-dir", filepath.Join(filepath.Dir(g.root), "iam"))
		}
		if g.opts.EventNATSURL != "" {
			args = append(args, "--event-nats-url", g.opts.EventNATSURL, "--event-nats-topic", g.opts.EventNATSTopic)
		}
		// Object metadata (content type, x-amz-meta-*) in user xattrs, versitygw's default (the test
		// temp dir's ext4 takes them); its sidecar directory keeps an overwritten object's old metadata.
		args = append(args, "posix")
		if g.opts.Versioning {
			args = append(args, "--versioning-dir", filepath.Join(filepath.Dir(g.root), "versions"))
		}
		args = append(args, g.root)
		cmd := exec.Command(g.bin, args...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + filepath.Dir(g.root)}
		return cmd
	}, func(client *http.Client) error {
		resp, err := client.Get(g.URL() + "/health")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("health: %s", resp.Status)
		}
		return nil
	})
}

// StartS3 starts the S3 server the tests run against: versitygw, maintained and built from the Go
// module proxy. MinIO (StartMinIO) stays for the tests that prove compatibility with sites that still
// run it.
func StartS3(t testing.TB) *VersityGW {
	t.Helper()
	return StartVersityGW(t, VersityGWOptions{})
}
