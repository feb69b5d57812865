package deploy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/internal/testenv"
)

// TestREADMENatsCLISteps runs the README's "Driving it with the `nats` CLI" block, as written, with the
// real nats CLI against the built worker on its embedded server. Only the photo's path is replaced and the
// `nats sub` lines, which the README runs in other terminals, run in the background until their first
// message. So a README step that the CLI rejects, or a response the worker does not send, fails here.
func TestREADMENatsCLISteps(t *testing.T) {
	natsBin := testenv.NATSCLI(t)
	worker := workerBinary(t)
	clamd := testenv.StartClamd(t)
	dir := t.TempDir()

	block := readmeBlock(t, "## Driving it with the `nats` CLI")
	photo := testenv.MakeJPEG(t, dir, 1600, 1200)

	natsPort, httpPort := testenv.FreePort(t), testenv.FreePort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, worker, "run",
		"--nats-listen", "127.0.0.1:"+strconv.Itoa(natsPort),
		"--http-addr", "127.0.0.1:"+strconv.Itoa(httpPort),
		"--data-dir", filepath.Join(dir, "data"),
		"--tmp-dir", filepath.Join(dir, "scratch"),
		"--clamd-addr", clamd.SocketAddr, // as scripts/run.sh starts it: clamd's unix socket
		"--log-format", "json")
	cmd.Env = cleanEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // a test binary that dies takes its worker along
	var wlog bytes.Buffer
	cmd.Stdout, cmd.Stderr = &wlog, &wlog
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("worker log:\n%s", wlog.String())
		}
	})
	health := fmt.Sprintf("http://127.0.0.1:%d/health/ready", httpPort)
	testenv.Eventually(t, time.Minute, func() error {
		resp, err := http.Get(health)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", health, resp.Status)
		}
		return nil
	})

	script, subs := scriptFromBlock(t, block, photo, dir)
	scriptPath := filepath.Join(dir, "readme-steps.sh")
	if err := os.WriteFile(scriptPath, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	// `nats stream view` pages interactively and refuses to run without a terminal, as a user's has:
	// script(1) gives the steps a pseudo-terminal.
	sh := exec.CommandContext(ctx, "script", "-qec", "bash -euo pipefail "+scriptPath, "/dev/null")
	sh.Dir = dir
	sh.Env = append(cleanEnv(),
		"NATS_URL=nats://127.0.0.1:"+strconv.Itoa(natsPort),
		"PATH="+filepath.Dir(natsBin)+":"+os.Getenv("PATH"))
	out, err := sh.CombinedOutput()
	if err != nil {
		t.Fatalf("the README's nats CLI steps failed: %v\nscript:\n%s\noutput:\n%s", err, script, out)
	}
	idb, err := os.ReadFile(filepath.Join(dir, "readme-id"))
	if err != nil {
		t.Fatal(err)
	}
	id := strings.TrimSpace(string(idb))

	// The plain response subscription got exactly the response to our request: valid, successful, with
	// three WebPs, the high one served by the worker's HTTP and decoding at the configured size.
	var resp map[string]any
	for _, s := range subs {
		if !strings.HasSuffix(s.subject, ".response") {
			continue
		}
		payload := firstPayload(t, s.out)
		if err := contracts.ValidateJSON(contracts.SchemaResponse, payload); err != nil {
			t.Fatalf("response from `nats sub`: %v\n%s", err, payload)
		}
		if err := json.Unmarshal(payload, &resp); err != nil {
			t.Fatal(err)
		}
	}
	if resp == nil {
		t.Fatalf("no `nats sub` on the response subject in the README block:\n%s", block)
	}
	if resp["mediaId"] != id || resp["success"] != true {
		t.Fatalf("response %v, want success for %s", resp, id)
	}
	processed, _ := resp["processed"].([]any)
	if len(processed) != 3 {
		t.Fatalf("want 3 variants, got %v", resp["processed"])
	}
	high, _ := processed[0].(map[string]any)
	url, _ := high["url"].(string)
	got := filepath.Join(dir, "high.webp")
	fetch(t, url, got)
	if info := testenv.DecodeImage(t, got); info.Loader != "webpload" || info.Width != 1600 || info.Height != 1200 {
		t.Fatalf("high variant from %s decodes as %+v, want a 1600×1200 WebP", url, info)
	}

	// The stream views in the README show the response that was kept.
	if !bytes.Contains(out, []byte(id)) {
		t.Errorf("`nats stream view` output never names %s:\n%s", id, out)
	}
}

// sub is one `nats sub` line of the README block, run in the background until its first message.
type sub struct {
	subject string
	out     string // file with its output
}

var natsSubLine = regexp.MustCompile(`^nats sub '([^']+)'\s*(&)?\s*(#.*)?$`)

// scriptFromBlock turns the README block into a script: the photo path is ours, each `nats sub` runs in
// the background until its first message (the README opens them in other terminals), the script waits
// for them (bounded), and the request's id is saved.
func scriptFromBlock(t *testing.T, block, photo, dir string) (string, []sub) {
	t.Helper()
	var b strings.Builder
	var subs []sub
	sc := bufio.NewScanner(strings.NewReader(block))
	waited := false
	for sc.Scan() {
		line := strings.ReplaceAll(sc.Text(), "/tmp/photo.jpg", photo)
		if !waited && strings.HasPrefix(line, "nats stream view") {
			// The README's reader looks at the stream after the response came; so does the script.
			b.WriteString(waitForResponse(subs))
			waited = true
		}
		if m := natsSubLine.FindStringSubmatch(strings.TrimSpace(line)); m != nil {
			s := sub{subject: m[1], out: filepath.Join(dir, fmt.Sprintf("sub%d.out", len(subs)))}
			subs = append(subs, s)
			fmt.Fprintf(&b, "timeout 60 nats sub %q --count 1 >%q 2>&1 &\n", s.subject, s.out)
			// A subscription must be in place before the request is published.
			fmt.Fprintf(&b, "for i in $(seq 100); do grep -q 'Subscribing on' %q && break; sleep 0.1; done\n", s.out)
			continue
		}
		b.WriteString(line + "\n")
	}
	if len(subs) == 0 {
		t.Fatalf("no `nats sub` line in the README block:\n%s", block)
	}
	if !waited {
		b.WriteString(waitForResponse(subs))
	}
	// The virus-event subscription gets nothing for a photo: stop it.
	b.WriteString("kill $(jobs -p) 2>/dev/null || true\nwait || true\n")
	fmt.Fprintf(&b, "echo \"$id\" >%q\n", filepath.Join(dir, "readme-id"))
	return b.String(), subs
}

// waitForResponse is a bounded shell wait until the last `nats sub` (the README's response subscription)
// has printed a message.
func waitForResponse(subs []sub) string {
	if len(subs) == 0 {
		return ""
	}
	return fmt.Sprintf("for i in $(seq 600); do grep -q '\"mediaId\"' %q && break; sleep 0.1; done\n", subs[len(subs)-1].out)
}

// readmeBlock returns the first ```sh block after the heading.
func readmeBlock(t *testing.T, heading string) string {
	t.Helper()
	doc := readDoc(t, "../README.md")
	i := strings.Index(doc, heading)
	if i < 0 {
		t.Fatalf("README has no %q section", heading)
	}
	rest := doc[i:]
	start := strings.Index(rest, "```sh\n")
	if start < 0 {
		t.Fatalf("no ```sh block after %q", heading)
	}
	rest = rest[start+len("```sh\n"):]
	end := strings.Index(rest, "```")
	if end < 0 {
		t.Fatalf("unterminated block after %q", heading)
	}
	return rest[:end]
}

// firstPayload returns the first JSON line `nats sub` printed.
func firstPayload(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "{") {
			return []byte(strings.TrimSpace(line))
		}
	}
	t.Fatalf("`nats sub` printed no message:\n%s", b)
	return nil
}

func fetch(t *testing.T, url, dst string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
}

// cleanEnv is the environment without any MW_* or NATS_* setting of the machine running the tests.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MW_") && !strings.HasPrefix(kv, "NATS_") {
			env = append(env, kv)
		}
	}
	return env
}
