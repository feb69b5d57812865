package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"
)

// The worker as a process: tests that judge what operators run (start-up failures, the fault suite,
// the deployment files) build cmd/mediaworker from this checkout and read its output while it runs.

// BuildWorker builds cmd/mediaworker from this checkout into dir and returns the binary's path. It
// takes no testing.TB so a TestMain can build once before any test's time budget starts.
func BuildWorker(dir string) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "mediaworker")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/mediaworker")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building cmd/mediaworker: %w\n%s", err, TailLines(out, 40))
	}
	return bin, nil
}

// moduleRoot walks up from the working directory (a package directory under go test) to the
// directory holding go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("getting working directory: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		} else if !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("looking for go.mod: %w", err)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.mod not found above the working directory")
		}
		dir = parent
	}
}

// LockedBuffer collects a process's output (its stdout and stderr may write at once) while the test
// reads it.
type LockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String is everything written so far.
func (l *LockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Tail is the last n lines written so far, for a failure message.
func (l *LockedBuffer) Tail(n int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return TailLines(l.b.Bytes(), n)
}
