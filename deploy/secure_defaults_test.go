package deploy

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// runBinary runs the built mediaworker with args and returns its exit code and stderr.
func runBinary(t *testing.T, env []string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, workerBinary(t), args...)
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), stderr.String()
	}
	if err != nil {
		t.Fatalf("running mediaworker %v: %v", args, err)
	}
	return 0, stderr.String()
}

// `run --nats-listen 0.0.0.0:PORT` without a credential refuses to start, before it binds anything: the
// test holds PORT on loopback, so a worker that tried to listen would fail with "address in use" instead.
func TestBinaryRefusesAnonymousNATSBeyondLoopback(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	dirs := []string{"--data-dir", filepath.Join(t.TempDir(), "d"), "--tmp-dir", filepath.Join(t.TempDir(), "s"), "--http-addr", ""}
	code, stderr := runBinary(t, nil, append([]string{"run", "--nats-listen", "0.0.0.0:" + port}, dirs...)...)
	if code != 2 || !strings.Contains(stderr, "anonymous clients") || !strings.Contains(stderr, "--nats-token") || strings.Contains(stderr, "in use") {
		t.Fatalf("exit %d, want 2 with the credential rule:\n%s", code, stderr)
	}
	// Only the credential settings, wrongly combined, are named too.
	code, stderr = runBinary(t, []string{"NATS_USER=worker"}, append([]string{"run", "--nats-listen", "0.0.0.0:" + port}, dirs...)...)
	if code != 2 || !strings.Contains(stderr, "--nats-password") {
		t.Fatalf("user without password: exit %d:\n%s", code, stderr)
	}
}

// A scratch or data dir that others may write is refused with the setting named, and left as it was.
func TestBinaryRefusesSharedDirs(t *testing.T) {
	for _, setting := range []string{"--tmp-dir", "--data-dir"} {
		open := filepath.Join(t.TempDir(), "open")
		if err := os.Mkdir(open, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(open, 0o777); err != nil {
			t.Fatal(err)
		}
		args := map[string]string{"--tmp-dir": filepath.Join(t.TempDir(), "s"), "--data-dir": filepath.Join(t.TempDir(), "d")}
		args[setting] = open
		code, stderr := runBinary(t, nil, "run", "--nats-listen", "127.0.0.1:-1", "--http-addr", "",
			"--tmp-dir", args["--tmp-dir"], "--data-dir", args["--data-dir"])
		if code == 0 || !strings.Contains(stderr, open+" is writable by other users") || !strings.Contains(stderr, setting) {
			t.Errorf("%s world-writable: exit %d:\n%s", setting, code, stderr)
		}
		if entries, _ := os.ReadDir(open); len(entries) != 0 {
			t.Errorf("%s: the worker used the refused dir: %v", setting, entries)
		}
	}
}

// dockerfileEnv returns the variables the runtime image sets with ENV.
func dockerfileEnv(t *testing.T) map[string]string {
	t.Helper()
	raw, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(raw), "\\\n", " ")
	env := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "ENV ")
		if !ok {
			continue
		}
		for _, kv := range strings.Fields(rest) {
			if k, v, ok := strings.Cut(kv, "="); ok {
				env[k] = v
			}
		}
	}
	return env
}

// The image bakes in no secret, and with its own settings (NATS on 0.0.0.0) the worker refuses to start
// until a credential is given at run time.
func TestDockerImageNeedsARuntimeCredential(t *testing.T) {
	env := dockerfileEnv(t)
	if env["MW_NATS_LISTEN"] == "" {
		t.Fatal("found no ENV MW_NATS_LISTEN in the Dockerfile; has its layout changed?")
	}
	var imageEnv []string
	for k, v := range env {
		for _, secret := range []string{"PASSWORD", "TOKEN", "SECRET", "CREDS", "NKEY", "SIGNING_KEY"} {
			if strings.Contains(k, secret) {
				t.Errorf("the Dockerfile bakes in %s", k)
			}
		}
		if strings.HasPrefix(k, "MW_") && !strings.HasSuffix(k, "_DIR") {
			imageEnv = append(imageEnv, k+"="+v)
		}
	}
	code, stderr := runBinary(t, imageEnv, "config")
	if code != 2 || !strings.Contains(stderr, "anonymous clients") {
		t.Errorf("the image's settings without a credential: exit %d, want 2 naming the rule:\n%s", code, stderr)
	}
	if code, stderr := runBinary(t, append(imageEnv, "NATS_TOKEN=runtime-secret"), "config"); code != 0 {
		t.Errorf("the image's settings with NATS_TOKEN: exit %d:\n%s", code, stderr)
	}
}
