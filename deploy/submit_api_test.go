package deploy

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/internal/testenv"
)

// composeSubmit returns the `submit --wait` command deploy/compose.yaml's header tells a user to paste,
// joined into one shell line.
func composeSubmit(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	in := false
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(l, "#") {
			break
		}
		l = strings.TrimSpace(strings.TrimPrefix(l, "#"))
		if strings.HasPrefix(l, "NATS_URL=") && strings.Contains(l, "NATS_PASSWORD") && !in {
			in = true
		}
		if !in {
			continue
		}
		lines = append(lines, strings.TrimSuffix(l, "\\"))
		if !strings.HasSuffix(l, "\\") {
			break
		}
	}
	if len(lines) == 0 || !strings.Contains(lines[len(lines)-1], "submit --wait") {
		t.Fatalf("compose.yaml's header shows no `submit --wait` command: %q", lines)
	}
	return strings.Join(lines, " ")
}

// The compose header's `submit --wait`, pasted as it stands, as the api user of nats/accounts.conf
// against a worker on that account layout and S3 as compose runs it (versitygw; the worker with the
// account s3-init makes, the upload with root's keys, as the header says): every answer arrives (the photo's response,
// the EICAR file's virus event and its failure), and submit exits 3 (not all succeeded). The api user
// may subscribe only to the answer subjects, not to the app's wildcard: a listener on that is refused.
func TestComposeSubmitWaitAsAPI(t *testing.T) {
	clamd := testenv.StartClamd(t)
	s3, workerAccess, workerSecret := composeS3(t)
	natsPort, httpPort := testenv.FreePort(t), testenv.FreePort(t)
	base := "http://127.0.0.1:" + strconv.Itoa(httpPort)
	p := startWorkerBinary(t, append(roleEnv(), "MW_S3_ACCESS_KEY="+workerAccess, "MW_S3_SECRET_KEY="+workerSecret),
		"--nats-listen", "127.0.0.1:"+strconv.Itoa(natsPort), "--nats-server-config", "nats/accounts.conf",
		"--nats-user", "worker", "--nats-password", rolePasswords["worker"],
		"--storage", "s3", "--s3-endpoint", s3.Endpoint,
		"--data-dir", filepath.Join(t.TempDir(), "data"), "--tmp-dir", filepath.Join(t.TempDir(), "scratch"),
		"--http-addr", "127.0.0.1:"+strconv.Itoa(httpPort), "--clamd-addr", clamd.Addr,
		"--max-image-jobs", "1", "--max-video-jobs", "1")
	waitReady(t, p, base)

	line := composeSubmit(t)
	if !strings.Contains(line, "NATS_USER=api") {
		t.Errorf("compose.yaml's submit runs as %q, want the api user (it is the API's job)", line)
	}
	dir := t.TempDir()
	photo := testenv.MakeJPEG(t, dir, 800, 600)
	eicar := filepath.Join(dir, "eicar.txt")
	if err := os.WriteFile(eicar, []byte(testenv.EICAR), 0o600); err != nil {
		t.Fatal(err)
	}
	// The command as pasted, with this test's ports, binary and files in place of the published ones.
	line = strings.NewReplacer("127.0.0.1:4222", "127.0.0.1:"+strconv.Itoa(natsPort), "127.0.0.1:7070", s3.Endpoint,
		"bin/mediaworker", workerBinary(t)).Replace(line)
	line = regexp.MustCompile(`photo\.jpg$`).ReplaceAllString(line, "--timeout 2m "+photo+" "+eicar)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", line)
	cmd.Dir = dir
	cmd.Env = append(cleanEnv(), "NATS_API_PASSWORD="+rolePasswords["api"], "S3_ACCESS_KEY="+s3.AccessKey,
		"S3_SECRET_KEY="+s3.SecretKey)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := cmd.ProcessState.ExitCode()
	if code != 3 {
		t.Fatalf("%s: exit %d (%v), want 3 (the EICAR file did not succeed)\nstdout:\n%s\nstderr:\n%s", line, code, err, stdout.String(), stderr.String())
	}
	var responses, viruses, succeeded int
	for _, l := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		var probe struct {
			VirusName string `json:"virusName"`
			Success   bool   `json:"success"`
		}
		if err := json.Unmarshal([]byte(l), &probe); err != nil {
			t.Fatalf("submit printed %q: %v", l, err)
		}
		schema := contracts.SchemaResponse
		if probe.VirusName != "" {
			schema, viruses = contracts.SchemaVirusEvent, viruses+1
		} else {
			responses++
			if probe.Success {
				succeeded++
			}
		}
		if err := contracts.ValidateJSON(schema, []byte(l)); err != nil {
			t.Errorf("submit printed an answer its schema refuses: %v\n%s", err, l)
		}
	}
	if responses != 2 || viruses != 1 || succeeded != 1 {
		t.Errorf("submit --wait as api printed %d responses (%d succeeded) and %d virus events, want 2 (1) and 1:\n%s",
			responses, succeeded, viruses, stdout.String())
	}
}
