package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/app"
	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/rs/zerolog"
)

var (
	buildOnce sync.Once
	builtDir  string
	builtBin  string
	buildErr  error
)

// TestMain removes the binary's build dir: 42 MB a run, left in /tmp by every run before it did.
func TestMain(m *testing.M) {
	code := m.Run()
	if builtDir != "" {
		_ = os.RemoveAll(builtDir)
	}
	os.Exit(code)
}

// binary builds cmd/mediaworker once per test run: start-up failures are judged on what operators run.
func binary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		builtDir, buildErr = os.MkdirTemp("", "mw-startup-bin-")
		if buildErr != nil {
			return
		}
		builtBin, buildErr = testenv.BuildWorker(builtDir)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtBin
}

// busyPort returns a loopback address something listens on until the test ends.
func busyPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String()
}

// startAuthNATS runs a server that only admits user "mw" with password "right".
func startAuthNATS(t *testing.T) string {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(),
		NoLog: true, NoSigs: true, Username: "mw", Password: "right"})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server did not become ready")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return "nats://mw:wrong@" + strings.TrimPrefix(s.ClientURL(), "nats://")
}

// Every start-up misconfiguration stops the built binary with exit status ≠ 0 and one human line on
// stderr that names the setting (flag and variable) — never a panic, a JSON record or a stack.
func TestStartupMisconfigurationIsOneLineNamingTheSetting(t *testing.T) {
	bin := binary(t)
	clamd := testenv.StartClamd(t)
	// Debian's packaged clamd.conf leaves StreamMaxLength at 25M, below the default 500 MiB input cap.
	debianClamd := testenv.StartClamdWith(t, map[string]string{"StreamMaxLength": "25M"})
	// clamd's own default: what it cannot scan in full is reported clean.
	lenientClamd := testenv.StartClamdWith(t, map[string]string{"AlertExceedsMax": "no"})
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name string
		args []string
		env  []string
		want []string // each must appear in the line
	}{
		{"clamd limits below the input cap", []string{"--clamd-addr", debianClamd.Addr}, nil,
			[]string{"--max-input-bytes", "MW_MAX_INPUT_BYTES", "StreamMaxLength"}},
		{"clamd passes what it cannot scan", []string{"--clamd-addr", lenientClamd.Addr}, nil,
			[]string{"--clamd-addr", "MW_CLAMD_ADDR", "AlertExceedsMax yes"}},
		{"clamd unreachable", []string{"--clamd-addr", "tcp://" + testenv.FreeAddr(t), "--clamd-wait", "2s"}, nil,
			[]string{"--clamd-addr", "MW_CLAMD_ADDR", "did not answer"}},
		{"nats unreachable", []string{"--clamd-addr", clamd.Addr, "--nats-url", "nats://" + testenv.FreeAddr(t)}, nil,
			[]string{"--nats-url", "NATS_URL"}},
		{"nats refuses the credentials", []string{"--clamd-addr", clamd.Addr, "--nats-url", startAuthNATS(t)}, nil,
			[]string{"--nats-creds", "refused the credentials"}},
		{"nats credentials file missing", []string{"--clamd-addr", clamd.Addr, "--nats-url", "nats://" + testenv.FreeAddr(t), "--nats-creds", filepath.Join(file, "user.creds")}, nil,
			[]string{"--nats-creds", "NATS_CREDS"}},
		{"data dir not writable", []string{"--clamd-addr", clamd.Addr, "--data-dir", filepath.Join(file, "data")}, nil,
			[]string{"--data-dir", "MW_DATA_DIR"}},
		{"scratch dir not writable", []string{"--clamd-addr", clamd.Addr, "--tmp-dir", filepath.Join(file, "tmp")}, nil,
			[]string{"--tmp-dir", "MW_TMP_DIR"}},
		{"http port in use", []string{"--clamd-addr", clamd.Addr, "--http-addr", busyPort(t)}, nil,
			[]string{"--http-addr", "MW_HTTP_ADDR", "address already in use"}},
		{"nats listen port in use", []string{"--clamd-addr", clamd.Addr, "--nats-listen", busyPort(t)}, nil,
			[]string{"--nats-listen", "MW_NATS_LISTEN", "address already in use"}},
		{"negative slots", []string{"--max-image-jobs", "-2"}, nil,
			[]string{"--max-image-jobs", "MW_MAX_IMAGE_JOBS", "at least 1"}},
		{"negative slots from the environment", nil, []string{"MW_MAX_VIDEO_JOBS=-1"},
			[]string{"--max-video-jobs", "MW_MAX_VIDEO_JOBS"}},
		{"two bad lane limits, each blamed on its own setting", []string{"--video-max-ack-pending", "-1", "--image-ack-wait", "100ms"}, nil,
			[]string{"--image-ack-wait (MW_IMAGE_ACK_WAIT): streams: the image lane's ack wait", "--video-max-ack-pending (MW_VIDEO_MAX_ACK_PENDING): streams: the video lane's max ack pending"}},
		{"unparsable duration", []string{"--job-timeout", "ten minutes"}, nil,
			[]string{"--job-timeout", "MW_JOB_TIMEOUT", "not a duration"}},
		{"unparsable duration from the environment", nil, []string{"MW_ACK_WAIT=soon"},
			[]string{"MW_ACK_WAIT", "--ack-wait", "not a duration"}},
		{"unknown storage", []string{"--storage", "ftp"}, nil,
			[]string{"--storage", "MW_STORAGE", `"nats" or "s3"`}},
		{"unparsable size", []string{"--max-input-bytes", "lots"}, nil,
			[]string{"--max-input-bytes", "byte size"}},
		{"negative clamd wait", []string{"--clamd-wait", "-1s"}, nil,
			[]string{"--clamd-wait", "MW_CLAMD_WAIT"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			args := append([]string{"run", "--data-dir", filepath.Join(dir, "data"), "--tmp-dir", filepath.Join(dir, "tmp"),
				"--nats-listen", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--clamd-wait", "30s"}, tc.args...)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, args...)
			cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // a test binary that dies takes its worker along
			cmd.Env = append(os.Environ(), tc.env...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() <= 0 {
				t.Fatalf("want a non-zero exit status, got %v (ctx %v)\nstderr:\n%s", err, ctx.Err(), stderr.String())
			}
			// A clamd that does not answer is announced in the log as soon as the wait begins (the
			// worker's log format: JSON here, stderr is no terminal); the failure is still one line.
			var notices []string
			lines := strings.Split(strings.TrimRight(stderr.String(), "\n"), "\n")
			for len(lines) > 1 && strings.Contains(lines[0], "waiting for clamd at ") {
				notices, lines = append(notices, lines[0]), lines[1:]
			}
			out := strings.Join(lines, "\n")
			if len(lines) != 1 || !strings.HasPrefix(lines[0], "mediaworker run: ") {
				t.Fatalf("want one line \"mediaworker run: …\" on stderr, got %d:\n%s", len(lines), stderr.String())
			}
			if tc.name == "clamd unreachable" && len(notices) != 1 {
				t.Errorf("want the wait for clamd announced once before the failure, got %d notices:\n%s", len(notices), stderr.String())
			}
			for _, bad := range []string{"panic", "goroutine", "{\""} {
				if strings.Contains(out, bad) {
					t.Errorf("stderr contains %q:\n%s", bad, out)
				}
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("stderr lacks %q:\n%s", w, out)
				}
			}
			t.Logf("exit %d: %s", ee.ExitCode(), lines[0])
		})
	}

	// app.New itself (what a program embedding the worker calls) refuses the same clamd with the
	// error, not a nil-pointer panic in its cleanup.
	t.Run("app.New with clamd limits below the cap", func(t *testing.T) {
		cfg := app.DefaultConfig()
		cfg.NATS.Embedded.DataDir = t.TempDir()
		cfg.NATS.Embedded.Listen = "127.0.0.1:0"
		cfg.Pipeline.TmpDir = t.TempDir()
		cfg.HTTPAddr = "127.0.0.1:0"
		cfg.Scanner.Addr = debianClamd.Addr
		a, err := app.New(context.Background(), cfg, zerolog.Nop())
		if err == nil {
			a.Close()
			t.Fatal("app.New accepted a clamd with StreamMaxLength 25M below a 500 MiB cap")
		}
		if !strings.Contains(err.Error(), "clamd") {
			t.Fatalf("error does not name clamd: %v", err)
		}
	})
}

// With clamd not answering, start-up waits for it (up to --clamd-wait), and says so at once: the log
// names the address as the wait begins, and HTTP answers from the first moment — /health/live,
// /health/ready, /health and the console's page 503 naming what start-up waits for (live turns 200 once
// started, which a startup probe waits for) — so neither an operator nor a probe meets a silent process
// and a refused port for two minutes.
func TestStartupWaitingForClamdSaysSoAtOnce(t *testing.T) {
	bin := binary(t)
	dir := t.TempDir()
	clamdAddr := "tcp://" + testenv.FreeAddr(t) // nothing listens there
	httpAddr := testenv.FreeAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "run", "--data-dir", filepath.Join(dir, "data"), "--tmp-dir", filepath.Join(dir, "tmp"),
		"--nats-listen", "127.0.0.1:0", "--http-addr", httpAddr, "--clamd-addr", clamdAddr, "--clamd-wait", "2m", "--log-format", "json")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // a test binary that dies takes its worker along
	var stderr testenv.LockedBuffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("worker stderr:\n%s", stderr.String())
		}
	})
	want := "waiting for clamd at " + clamdAddr
	start := time.Now()
	get := func(path string) (int, string, error) {
		resp, err := http.Get("http://" + httpAddr + path)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), err
	}
	// Well inside the 2-minute wait: the answers come while start-up still waits.
	testenv.Eventually(t, 30*time.Second, func() error {
		select {
		case err := <-done:
			t.Fatalf("the worker exited while waiting for clamd: %v", err)
		default:
		}
		if !strings.Contains(stderr.String(), want) {
			return fmt.Errorf("the log does not say %q yet", want)
		}
		for _, path := range []string{"/health/live", "/health/ready", "/health", "/"} {
			code, body, err := get(path)
			if err != nil {
				return err
			}
			if code != http.StatusServiceUnavailable || !strings.Contains(body, want) {
				return fmt.Errorf("GET %s: %d %s, want 503 saying %q", path, code, body, want)
			}
		}
		return nil
	})
	if took := time.Since(start); took > 60*time.Second {
		t.Errorf("start-up said what it waits for only after %s", took)
	}
	t.Logf("HTTP and the log named the clamd wait %s after start", time.Since(start).Round(time.Millisecond))
}
