package testenv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// goTool is a command the tests build once from the Go module proxy (`go install pkg@version`) and keep
// in the cache dir: the S3 servers and the nats CLI. One build per version, whatever number of test
// packages ask at once: a file lock makes the others wait, and the binary is renamed into place only
// when complete, so its existence is enough.
type goTool struct {
	what    string // for messages: "MinIO"
	pkg     string // what go install builds, without the version
	version string
	cache   string // the cache's subdirectory and lock are named after it: <cache>/<name>-<version>/
	file    string // the command's file name
	timeout time.Duration
	// module, when set, is the module pkg belongs to, built as its own main module in its downloaded
	// source (`go mod download`, then `go build` there) instead of by `go install pkg@version`, which
	// refuses a module whose go.mod has replace directives (imgproxy's) and asks the proxy for the
	// module's version list (to warn of deprecation), which the proxy may not serve.
	module string
}

// ensure returns the path of the cached binary, building it first if needed.
func (g goTool) ensure(logf func(format string, args ...any)) (string, error) {
	cache, err := CacheDir()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(cache, g.cache+"-"+g.version, g.file)
	if isExecutable(bin) {
		return bin, nil
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", fmt.Errorf("creating cache dir: %w", err)
	}
	unlock, err := lockFile(filepath.Join(cache, g.cache+".lock"))
	if err != nil {
		return "", fmt.Errorf("locking the %s build: %w", g.what, err)
	}
	defer unlock()
	if isExecutable(bin) { // built by another package while this one waited for the lock
		return bin, nil
	}
	if err := g.build(logf, bin); err != nil {
		return "", fmt.Errorf("building %s %s: %w", g.what, g.version, err)
	}
	return bin, nil
}

func (g goTool) build(logf func(format string, args ...any), bin string) error {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("the go command is needed to build %s: %w", g.what, err)
	}
	dir := filepath.Dir(bin)
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "."+g.cache+"-build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	logf("building %s %s from the Go module proxy into %s", g.what, g.version, dir)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), g.timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, "install", g.pkg+"@"+g.version)
	// Outside any module, so the repository's go.mod is neither used nor touched.
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), "GOBIN="+tmp, "GOFLAGS=-buildvcs=false", "GO111MODULE=on")
	if g.module != "" {
		src, err := downloadModule(ctx, goBin, tmp, g.module+"@"+g.version)
		if err != nil {
			return err
		}
		// Its own go.mod and go.sum, replace directives included, as its authors build it.
		cmd = exec.CommandContext(ctx, goBin, "build", "-o", filepath.Join(tmp, g.file), "."+strings.TrimPrefix(g.pkg, g.module))
		cmd.Dir = src
		cmd.Env = append(os.Environ(), "GOFLAGS=-buildvcs=false -mod=readonly", "GO111MODULE=on")
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %s: %w\n%s", cmd.Args[1], err, TailLines(out, 40))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.Rename(filepath.Join(tmp, g.file), bin); err != nil {
		return err
	}
	logf("built %s in %s", g.what, time.Since(start).Round(time.Second))
	return nil
}

// downloadModule fetches mod (path@version) into the module cache, outside any module (dir), and
// returns the directory of its source there (read-only).
func downloadModule(ctx context.Context, goBin, dir, mod string) (string, error) {
	cmd := exec.CommandContext(ctx, goBin, "mod", "download", "-json", mod)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GO111MODULE=on")
	out, err := cmd.Output()
	var m struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &m); jerr != nil || m.Error != "" || err != nil || m.Dir == "" {
		var stderr []byte
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			stderr = ee.Stderr
		}
		return "", fmt.Errorf("go mod download %s: %v %s%s", mod, err, m.Error, TailLines(stderr, 20))
	}
	return m.Dir, nil
}
