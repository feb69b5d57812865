package testenv

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// moduleDownloadTimeout bounds one `go mod download` (a few MB from the proxy, or the cache).
const moduleDownloadTimeout = 5 * time.Minute

// ModuleDir makes path@version available in the Go module cache (through the module proxy, as
// `go mod download` fetches any module) and returns its directory. Tests use it for the test data
// other projects ship (golang.org/x/image, mimetype): real files that this project did not make.
// The module is not a dependency of this one; the cache keeps it for later runs.
func ModuleDir(t testing.TB, path, version string) string {
	t.Helper()
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goBin); err != nil {
		goBin = RequireBinary(t, "go")
	}
	ctx, cancel := context.WithTimeout(context.Background(), moduleDownloadTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, "mod", "download", "-json", path+"@"+version)
	cmd.Dir = t.TempDir() // outside this module: its go.mod neither limits nor records the download
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	out, err := cmd.Output()
	var info struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &info); jerr != nil || info.Dir == "" {
		t.Fatalf("downloading %s@%s with go mod download: %v %s %s", path, version, err, info.Error, out)
	}
	return info.Dir
}
