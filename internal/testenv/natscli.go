package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// NATSCLIVersion is the github.com/nats-io/natscli version whose `nats` command the tests drive, as the
// README tells users to.
const NATSCLIVersion = "v0.5.1"

// natsCLIBuildTimeout bounds a cold `go install` of the nats CLI (about a minute on 2 quiet cores).
const natsCLIBuildTimeout = 15 * time.Minute

// NATSCLI returns the path of the cached `nats` command, building it first if needed. A failed build
// fails the test: the README's steps are tested with the real CLI, never skipped.
func NATSCLI(t testing.TB) string {
	t.Helper()
	bin, err := EnsureNATSCLI(t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// EnsureNATSCLI returns the path of the cached `nats` command at NATSCLIVersion, installing it with
// `go install` from the Go module proxy first if needed. A file lock makes parallel test packages wait
// for one build. scripts/test.sh runs it (internal/testenv/cmd/natscli-build) before the tests.
func EnsureNATSCLI(logf func(format string, args ...any)) (string, error) {
	cache, err := CacheDir()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(cache, "natscli-"+NATSCLIVersion, "nats")
	if isExecutable(bin) { // renamed into place only when complete
		return bin, nil
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", fmt.Errorf("creating cache dir: %w", err)
	}
	unlock, err := lockFile(filepath.Join(cache, "natscli.lock"))
	if err != nil {
		return "", fmt.Errorf("locking the nats CLI build: %w", err)
	}
	defer unlock()
	if isExecutable(bin) {
		return bin, nil
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("the go command is needed to build the nats CLI: %w", err)
	}
	tmp, err := os.MkdirTemp(cache, ".natscli-build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	logf("installing the nats CLI %s from the Go module proxy into %s", NATSCLIVersion, filepath.Dir(bin))
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), natsCLIBuildTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, "install", "github.com/nats-io/natscli/nats@"+NATSCLIVersion)
	// Outside any module, so the repository's go.mod is neither used nor touched.
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), "GOBIN="+tmp, "GOFLAGS=-buildvcs=false", "GO111MODULE=on")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("installing the nats CLI %s: %w\n%s", NATSCLIVersion, err, TailLines(out, 40))
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return "", err
	}
	if err := os.Rename(filepath.Join(tmp, "nats"), bin); err != nil {
		return "", err
	}
	logf("installed the nats CLI in %s", time.Since(start).Round(time.Second))
	return bin, nil
}
