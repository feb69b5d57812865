package testenv

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// NPMPackages makes sure the npm packages pinned by dir's package-lock.json are installed (a test's
// reference implementation or player: npm "thumbhash", hls.js) and returns node's path. `npm ci` runs
// in dir only when marker, a file under dir/node_modules, or the stamp of a finished install is
// missing (a fresh clone, CI, an install cut short), and under an exclusive lock on a file in dir: go
// test runs packages' tests in parallel processes, and two installs into one node_modules at once
// would break both. Node and npm are required like every other
// program the tests use (RequireBinary): scripts/install-deps.sh --test installs them.
func NPMPackages(t testing.TB, dir, marker string) (node string) {
	t.Helper()
	node = RequireBinary(t, "node")
	npm := RequireBinary(t, "npm")
	// marker alone is not proof: an `npm ci` killed at its timeout, or with its test run, can leave it
	// extracted and the rest missing, and every later run would trust it. The stamp is written last.
	stamp := filepath.Join(dir, "node_modules", ".mediaworker-npm-ci-done")
	installed := func() bool {
		_, errMarker := os.Stat(filepath.Join(dir, "node_modules", marker))
		_, errStamp := os.Stat(stamp)
		return errMarker == nil && errStamp == nil
	}
	if installed() {
		return node
	}
	lock, err := os.OpenFile(filepath.Join(dir, ".npm-install.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatalf("locking %s for npm ci: %v", dir, err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatalf("locking %s for npm ci: %v", dir, err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) //nolint:errcheck // closing unlocks too
	if installed() {
		return node // another package's test installed it while this one waited
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in %s: %v\n%s", dir, err, out)
	}
	if err := os.WriteFile(stamp, nil, 0o644); err != nil {
		t.Fatalf("npm ci in %s: marking it done: %v", dir, err)
	}
	return node
}

// NodeJSON runs script with node in dir, writes in to its standard input as JSON and decodes what it
// prints into out: the tests' way of asking a reference implementation.
func NodeJSON(t testing.TB, node, dir, script string, in, out any) {
	t.Helper()
	data, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script)
	cmd.Dir = dir
	cmd.Stdin = bytes.NewReader(data)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	answer, err := cmd.Output()
	if err != nil {
		t.Fatalf("node %s: %v\n%s", script, err, stderr.Bytes())
	}
	if err := json.Unmarshal(answer, out); err != nil {
		t.Fatalf("node %s answered %.200s: %v", script, answer, err)
	}
}
