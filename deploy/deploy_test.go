package deploy

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/internal/testenv"
)

// drainMargin is the least time a grace period must leave after the drain timeout: cancelled jobs are
// Nak'd, HTTP shuts down (up to 5 s) and the NATS connection drains.
const drainMargin = 10 * time.Second

// scanAPIGuarded refuses an unauthenticated POST /v1/scan (on unless MW_SCAN_API=false) on an address
// other machines or containers can reach.
func scanAPIGuarded(httpAddr, enabled string, token bool) error {
	host, _, err := net.SplitHostPort(httpAddr)
	if err != nil {
		return fmt.Errorf("MW_HTTP_ADDR %q: %v", httpAddr, err)
	}
	if ip := net.ParseIP(host); enabled == "false" || token || host == "localhost" || ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("POST /v1/scan is served on %s without a token: set MW_SCAN_API_TOKEN or MW_SCAN_API=false", httpAddr)
}

// checkSettingNames fails for an MW_* name that `mediaworker run` does not read: the worker ignores
// unknown variables, so a typo would silently fall back to a default.
func checkSettingNames(t *testing.T, where string, names []string) {
	t.Helper()
	known := runSettings(t)
	for _, n := range names {
		if strings.HasPrefix(n, "MW_") && !known[n] {
			t.Errorf("%s sets %s, which is not a `mediaworker run` setting", where, n)
		}
	}
}

var (
	binOnce sync.Once
	binDir  string
	binPath string
	binErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// workerBinary builds cmd/mediaworker once per test run.
func workerBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		if binDir, binErr = os.MkdirTemp("", "mw-deploy-test-"); binErr != nil {
			return
		}
		binPath, binErr = testenv.BuildWorker(binDir)
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

var envInHelp = regexp.MustCompile(`\[(MW_[A-Z0-9_]+)`)

// runSettings returns the MW_* variables `mediaworker run --help` lists.
func runSettings(t *testing.T) map[string]bool {
	t.Helper()
	out, err := exec.Command(workerBinary(t), "run", "--help").Output()
	if err != nil {
		t.Fatalf("mediaworker run --help: %v", err)
	}
	set := map[string]bool{}
	for _, m := range envInHelp.FindAllStringSubmatch(string(out), -1) {
		set[m[1]] = true
	}
	if len(set) < 20 {
		t.Fatalf("found only %d settings in `run --help`; has its format changed?", len(set))
	}
	return set
}

func mustDuration(t *testing.T, what, s string) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("%s %q: %v", what, s, err)
	}
	return d
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%q is not a number: %v", s, err)
	}
	return n
}

// atLeast reports whether a version tag such as "2.14-alpine" or "2.15.2" is at least major.minor.
func atLeast(tag string, major, minor int) bool {
	parts := strings.SplitN(strings.SplitN(tag, "-", 2)[0], ".", 3)
	if len(parts) < 2 {
		return false
	}
	ma, err1 := strconv.Atoi(parts[0])
	mi, err2 := strconv.Atoi(parts[1])
	return err1 == nil && err2 == nil && (ma > major || ma == major && mi >= minor)
}

// volumeTargets returns the container paths of compose volume entries ("name:/path[:ro]").
func volumeTargets(vols []string) []string {
	var out []string
	for _, v := range vols {
		if parts := strings.Split(v, ":"); len(parts) >= 2 {
			out = append(out, parts[1])
		}
	}
	return out
}

// onMount reports whether dir is one of mounts or below one.
func onMount(dir string, mounts []string) bool {
	if dir == "" {
		return false
	}
	for _, m := range mounts {
		if dir == m || strings.HasPrefix(dir, strings.TrimSuffix(m, "/")+"/") {
			return true
		}
	}
	return false
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

func subset(sub, super map[string]string) bool {
	for k, v := range sub {
		if super[k] != v {
			return false
		}
	}
	return true
}
