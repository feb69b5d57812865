package deploy

import (
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
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// startSecuredWorker starts the built worker with an embedded NATS server on natsPort that takes the auth
// flags given, waits until it is ready and checks that an anonymous client is refused.
func startSecuredWorker(t *testing.T, natsPort, httpPort int, clamdAddr string, auth ...string) *workerProcess {
	t.Helper()
	args := append([]string{"--nats-listen", "127.0.0.1:" + strconv.Itoa(natsPort)}, auth...)
	args = append(args, "--data-dir", filepath.Join(t.TempDir(), "data"), "--tmp-dir", filepath.Join(t.TempDir(), "scratch"),
		"--http-addr", "127.0.0.1:"+strconv.Itoa(httpPort), "--clamd-addr", clamdAddr, "--max-video-jobs", "1")
	p := startWorkerBinary(t, nil, args...)
	waitReady(t, p, "http://127.0.0.1:"+strconv.Itoa(httpPort))
	if nc, err := nats.Connect("nats://127.0.0.1:" + strconv.Itoa(natsPort)); err == nil {
		nc.Close()
		t.Fatalf("an anonymous client connected to a worker started with %q", auth)
	}
	return p
}

// waitReady waits until the worker process answers /health/ready with 200, failing at once if it exits.
func waitReady(t *testing.T, p *workerProcess, base string) {
	t.Helper()
	testenv.Eventually(t, 90*time.Second, func() error {
		select {
		case <-p.done:
			t.Fatalf("the worker exited (%v):\n%s", p.cmd.ProcessState, p.log.String())
		default:
		}
		resp, err := http.Get(base + "/health/ready")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("ready: %s", resp.Status)
		}
		return nil
	})
}

// cli runs a mediaworker command of the built binary with env added and returns its exit code, stdout
// and stderr.
func cli(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, workerBinary(t), args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), stdout.String(), stderr.String()
	}
	if err != nil {
		t.Fatalf("running mediaworker %v: %v", args, err)
	}
	return 0, stdout.String(), stderr.String()
}

// `submit`, `dlq` and `streams apply` take the same credentials as `run`, under the nats CLI's names
// (NATS_USER and NATS_PASSWORD) or as flags: against the built binary's authenticated embedded server
// each is refused without them, with a message naming the settings, and does its work with them.
func TestCommandsUseTheWorkerCredentials(t *testing.T) {
	const user, password = "site", "pw-site-9f3"
	clamd := testenv.StartClamd(t)
	natsPort, httpPort := testenv.FreePort(t), testenv.FreePort(t)
	url := "nats://127.0.0.1:" + strconv.Itoa(natsPort)
	startSecuredWorker(t, natsPort, httpPort, clamd.Addr, "--nats-user", user, "--nats-password", password)
	photo := testenv.MakeJPEG(t, t.TempDir(), 800, 600)
	commands := [][]string{{"streams", "apply"}, {"dlq", "ls"}, {"submit", "--wait", "--timeout", "1m", photo}}

	// Without the credentials, or with a wrong password: refused, saying which settings carry them.
	for _, env := range [][]string{{"NATS_URL=" + url}, {"NATS_URL=" + url, "NATS_USER=" + user, "NATS_PASSWORD=wrong"}} {
		for _, args := range commands {
			code, _, stderr := cli(t, env, args...)
			if code == 0 || !strings.Contains(stderr, "NATS_USER") || !strings.Contains(stderr, "NATS_PASSWORD") || !strings.Contains(stderr, "--nats-user") {
				t.Errorf("%s with %v: exit %d, want a refusal naming the credential settings:\n%s", args[0], env[1:], code, stderr)
			}
		}
	}

	// With them, from the nats CLI's variables, from MW_ variables, or as flags.
	byEnv := []string{"NATS_URL=" + url, "NATS_USER=" + user, "NATS_PASSWORD=" + password}
	if code, out, stderr := cli(t, byEnv, "streams", "apply"); code != 0 {
		t.Errorf("streams apply with NATS_USER/NATS_PASSWORD: exit %d\n%s%s", code, out, stderr)
	}
	byMW := []string{"NATS_URL=" + url, "MW_NATS_USER=" + user, "MW_NATS_PASSWORD=" + password}
	if code, out, stderr := cli(t, byMW, "dlq", "ls"); code != 0 {
		t.Errorf("dlq ls with MW_NATS_USER/MW_NATS_PASSWORD: exit %d\n%s%s", code, out, stderr)
	}
	code, out, stderr := cli(t, []string{"NATS_URL=" + url}, "submit", "--nats-user", user, "--nats-password", password,
		"--wait", "--timeout", "1m", photo)
	if code != 0 {
		t.Fatalf("submit --nats-user --nats-password: exit %d\n%s%s", code, out, stderr)
	}
	if err := contracts.ValidateJSON(contracts.SchemaResponse, []byte(strings.TrimSpace(out))); err != nil {
		t.Fatalf("submit printed no valid response: %v\n%s", err, out)
	}
	var r contracts.Response
	if err := json.Unmarshal([]byte(out), &r); err != nil || !r.Success || len(r.Processed) != 3 {
		t.Fatalf("submit's response: %v %+v", err, r)
	}
}

// decentralisedAuth writes what nsc would: a nats-server config trusting a new operator, with one
// account (JetStream on) preloaded in a memory resolver, and a user's credentials file in that account.
func decentralisedAuth(t *testing.T) (serverConfig, creds string) {
	t.Helper()
	dir := t.TempDir()
	op, _ := nkeys.CreateOperator()
	opPub, _ := op.PublicKey()
	opJWT, err := jwt.NewOperatorClaims(opPub).Encode(op)
	if err != nil {
		t.Fatal(err)
	}
	acc, _ := nkeys.CreateAccount()
	accPub, _ := acc.PublicKey()
	ac := jwt.NewAccountClaims(accPub)
	ac.Name = "APP"
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
	accJWT, err := ac.Encode(op)
	if err != nil {
		t.Fatal(err)
	}
	// JetStream in operator mode needs a system account.
	sys, _ := nkeys.CreateAccount()
	sysPub, _ := sys.PublicKey()
	sc := jwt.NewAccountClaims(sysPub)
	sc.Name = "SYS"
	sysJWT, err := sc.Encode(op)
	if err != nil {
		t.Fatal(err)
	}
	user, _ := nkeys.CreateUser()
	userPub, _ := user.PublicKey()
	userSeed, _ := user.Seed()
	uc := jwt.NewUserClaims(userPub)
	uc.Name = "site"
	userJWT, err := uc.Encode(acc)
	if err != nil {
		t.Fatal(err)
	}
	credsText, err := jwt.FormatUserConfig(userJWT, userSeed)
	if err != nil {
		t.Fatal(err)
	}
	creds = filepath.Join(dir, "site.creds")
	serverConfig = filepath.Join(dir, "operator.conf")
	conf := fmt.Sprintf("operator: %q\nsystem_account: %s\nresolver: MEMORY\nresolver_preload: {\n  %s: %q\n  %s: %q\n}\n",
		opJWT, sysPub, accPub, accJWT, sysPub, sysJWT)
	if err := os.WriteFile(creds, credsText, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(serverConfig, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	return serverConfig, creds
}

// Decentralised auth on the embedded server: with an operator config the built binary may listen
// beyond loopback, runs on a user's credentials file, refuses anonymous clients, and its commands take
// the same file from NATS_CREDS.
func TestDecentralisedAuth(t *testing.T) {
	serverConfig, creds := decentralisedAuth(t)
	code, _, stderr := cli(t, nil, "config", "--nats-listen", "0.0.0.0:4222", "--nats-server-config", serverConfig, "--nats-creds", creds)
	if code != 0 {
		t.Errorf("an operator config beyond loopback was refused: exit %d\n%s", code, stderr)
	}

	clamd := testenv.StartClamd(t)
	natsPort, httpPort := testenv.FreePort(t), testenv.FreePort(t)
	url := "nats://127.0.0.1:" + strconv.Itoa(natsPort)
	dirs := []string{"--data-dir", filepath.Join(t.TempDir(), "data"), "--tmp-dir", filepath.Join(t.TempDir(), "scratch")}

	// Without a system account JetStream cannot start: said at once, with the fix, not as a listener
	// that never came.
	conf, err := os.ReadFile(serverConfig)
	if err != nil {
		t.Fatal(err)
	}
	noSys := filepath.Join(t.TempDir(), "no-system-account.conf")
	if err := os.WriteFile(noSys, regexp.MustCompile(`(?m)^system_account: .*\n`).ReplaceAll(conf, nil), 0o600); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	code, _, stderr = cli(t, nil, append([]string{"run", "--nats-listen", "127.0.0.1:" + strconv.Itoa(natsPort), "--nats-server-config", noSys,
		"--nats-creds", creds, "--http-addr", "", "--clamd-addr", clamd.Addr}, dirs...)...)
	if took := time.Since(start); code == 0 || took > 10*time.Second || !strings.Contains(stderr, "needs a system_account") {
		t.Errorf("an operator config without a system account: exit %d after %s:\n%s", code, took, stderr)
	}

	startSecuredWorker(t, natsPort, httpPort, clamd.Addr, "--nats-server-config", serverConfig, "--nats-creds", creds)
	photo := testenv.MakeJPEG(t, t.TempDir(), 640, 480)
	code, out, stderr := cli(t, []string{"NATS_URL=" + url, "NATS_CREDS=" + creds}, "submit", "--wait", "--timeout", "1m", photo)
	var r contracts.Response
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil || !r.Success {
		t.Fatalf("submit with NATS_CREDS: exit %d\n%s%s", code, out, stderr)
	}
	if code, out, stderr := cli(t, []string{"NATS_URL=" + url}, "dlq", "ls"); code == 0 {
		t.Errorf("dlq ls without the credentials file: exit 0\n%s%s", out, stderr)
	}
}
