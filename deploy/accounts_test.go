package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/objstore"
	"github.com/mediaworker/mediaworker/objstore/natsobj"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

var rolePasswords = map[string]string{"worker": "pw-worker-1", "api": "pw-api-2", "ops": "pw-ops-3"}

func roleEnv() []string {
	return []string{"NATS_WORKER_PASSWORD=" + rolePasswords["worker"], "NATS_API_PASSWORD=" + rolePasswords["api"],
		"NATS_OPS_PASSWORD=" + rolePasswords["ops"]}
}

// worker is a `mediaworker run` process of the built binary.
type workerProcess struct {
	cmd  *exec.Cmd
	log  *testenv.LockedBuffer
	done chan struct{}
}

func startWorkerBinary(t *testing.T, env []string, args ...string) *workerProcess {
	t.Helper()
	cmd := exec.Command(workerBinary(t), append([]string{"run", "--log-format", "json"}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // a test binary that dies takes its worker along
	cmd.Env = append(os.Environ(), env...)
	var log testenv.LockedBuffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &workerProcess{cmd: cmd, log: &log, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("worker log:\n%s", p.log.String())
		}
	})
	return p
}

// deniedPublish publishes on nc and waits for the server's permissions violation naming subject.
func deniedPublish(t *testing.T, url, user, subject string) {
	t.Helper()
	errs := make(chan error, 4)
	nc, err := nats.Connect(url, nats.UserInfo(user, rolePasswords[user]),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err }))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.Publish(subject, []byte("{}"))
	_ = nc.Flush()
	select {
	case err := <-errs:
		if !strings.Contains(err.Error(), "Permissions Violation") || !strings.Contains(err.Error(), subject) {
			t.Errorf("%s publishing %s: %v, want a permissions violation", user, subject, err)
		}
	case <-time.After(10 * time.Second):
		t.Errorf("%s may publish to %s; the account layout must refuse it", user, subject)
	}
}

// The account layout of deploy/nats/accounts.conf, on the embedded server of the real binary: the worker
// does its whole job with only its own permissions, the API publishes requests and reads responses
// (through the durable an operator provisions: it may create no consumer), operators read the DLQ; each is
// refused what is not its role. The variants the worker serves over HTTP
// are the only objects it serves.
func TestAccountLayoutAndServedObjects(t *testing.T) {
	clamd := testenv.StartClamd(t)
	natsPort, httpPort := testenv.FreePort(t), testenv.FreePort(t)
	url := "nats://127.0.0.1:" + strconv.Itoa(natsPort)
	base := "http://127.0.0.1:" + strconv.Itoa(httpPort)
	p := startWorkerBinary(t, roleEnv(),
		"--nats-listen", "127.0.0.1:"+strconv.Itoa(natsPort), "--nats-server-config", "nats/accounts.conf",
		"--nats-user", "worker", "--nats-password", rolePasswords["worker"],
		"--data-dir", filepath.Join(t.TempDir(), "data"), "--tmp-dir", filepath.Join(t.TempDir(), "scratch"),
		"--http-addr", "127.0.0.1:"+strconv.Itoa(httpPort), "--clamd-addr", clamd.Addr,
		"--quarantine-bucket", "quarantine", "--max-image-jobs", "1", "--max-video-jobs", "1", "--backoff-base", "200ms")
	waitReady(t, p, base)

	if _, err := nats.Connect(url); err == nil || !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Errorf("anonymous client: %v, want an authorization violation", err)
	}

	// Uploads go in with the worker's object-store rights (an API on --storage nats gets the same block).
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	wnc, err := nats.Connect(url, nats.UserInfo("worker", rolePasswords["worker"]))
	if err != nil {
		t.Fatal(err)
	}
	defer wnc.Close()
	wjs, _ := jetstream.New(wnc)
	store, err := natsobj.New(wjs, natsobj.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := store.EnsureBucket(ctx, "media"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	upload := func(key string, path string) {
		t.Helper()
		if _, err := objstore.UploadFile(ctx, store, "media", key, path, "application/octet-stream"); err != nil {
			t.Fatal(err)
		}
	}
	upload("site/p.jpg", testenv.MakeJPEG(t, dir, 1200, 900))
	html := filepath.Join(dir, "page.jpg")
	_ = os.WriteFile(html, []byte("<html><script>alert(document.domain)</script></html>"), 0o600)
	upload("site/page.jpg", html)
	eicar := filepath.Join(dir, "e.txt")
	_ = os.WriteFile(eicar, []byte(testenv.EICAR), 0o600)
	upload("site/e.png", eicar)

	// The API: requests in, responses out, nothing else.
	anc, err := nats.Connect(url, nats.UserInfo("api", rolePasswords["api"]))
	if err != nil {
		t.Fatal(err)
	}
	defer anc.Close()
	ajs, _ := jetstream.New(anc)
	subj := contracts.SubjectsFor("app")
	responses := make(chan contracts.Response, 8)
	if _, err := anc.Subscribe(subj.Response, func(m *nats.Msg) {
		var r contracts.Response
		_ = json.Unmarshal(m.Data, &r)
		responses <- r
	}); err != nil {
		t.Fatal(err)
	}
	_ = anc.Flush()
	got := map[string]contracts.Response{}
	for _, key := range []string{"site/p.jpg", "site/page.jpg", "site/e.png"} {
		id := uuid.NewString()
		req, _ := json.Marshal(contracts.Request{S3Key: key, S3Bucket: "media", MediaID: id, MediaURL: "https://api.example/m/" + id})
		if _, err := ajs.Publish(ctx, subj.Request, req, jetstream.WithMsgID(id)); err != nil {
			t.Fatalf("the API publishing a request: %v", err)
		}
		select {
		case r := <-responses:
			got[key] = r
		case <-ctx.Done():
			t.Fatalf("no response for %s", key)
		}
	}
	if r := got["site/p.jpg"]; !r.Success || len(r.Processed) != 3 {
		t.Fatalf("photo: %+v", r)
	}
	if got["site/page.jpg"].Success || got["site/e.png"].Success {
		t.Fatalf("the HTML page or EICAR succeeded: %+v", got)
	}
	// The API's durable, provisioned by an operator (the API creates no consumer: accounts_api_test.go),
	// delivers the three responses and the virus event.
	provisionAPIConsumer(t, url)
	if read := countSubjects(readResponsesAsAPI(t, ctx, ajs, 4)); read[subj.Response] != 3 || read[subj.Virus] != 1 {
		t.Errorf("the API read %v from its durable, want 3 responses and 1 virus event", read)
	}

	// Served: the variants, with nosniff. Not served: the originals, the HTML page, the quarantine, climbing out.
	for _, v := range got["site/p.jpg"].Processed {
		resp, err := http.Get(v.URL)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("X-Content-Type-Options") != "nosniff" || resp.Header.Get("Content-Type") != "image/webp" ||
			int64(len(body)) != v.Size || !bytes.HasPrefix(body, []byte("RIFF")) {
			t.Errorf("variant %s: %s %v", v.URL, resp.Status, resp.Header)
		}
	}
	for _, path := range []string{"media/site/p.jpg", "media/site/page.jpg", "quarantine/site/e.png",
		"media/site/images/../p.jpg", "media/%2e%2e/media/site/p.jpg", "quarantine/..%2fmedia/site/p.jpg"} {
		req, _ := http.NewRequest(http.MethodGet, base+"/objects/"+path, nil)
		req.URL.Opaque = "/objects/" + path
		resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 200 || bytes.Contains(body, []byte("<script>")) || bytes.Contains(body, []byte("EICAR")) {
			t.Errorf("GET /objects/%s: %s, want it refused", path, resp.Status)
		}
	}

	// Two stalled uploads to POST /v1/scan (default: 2 scan slots) do not lock out a third.
	for range 2 {
		c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(httpPort))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST /v1/scan HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n%s", strings.Repeat("a", 1000))
	}
	start := time.Now()
	resp, err := http.Post(base+"/v1/scan", "application/octet-stream", strings.NewReader("hello"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	took := time.Since(start)
	if resp.StatusCode != 200 || took > 5*time.Second {
		t.Errorf("a scan beside two stalled uploads: %s after %s, want 200 within a few seconds", resp.Status, took)
	}
	t.Logf("a scan beside two stalled uploads answered %s in %s", resp.Status, took.Round(time.Millisecond))

	// Refused, per role.
	for _, d := range []struct{ user, subject string }{
		{"api", subj.Response},                               // spoofing an answer
		{"api", "$JS.API.STREAM.PURGE.APP_MEDIA_REQUESTS"},   // dropping the queue
		{"api", "$JS.API.DIRECT.GET.OBJ_media.$O.media.M.x"}, // reading uploads and variants from NATS
		{"api", subj.DLQ},
		{"worker", subj.Request},
		{"worker", "$JS.API.STREAM.PURGE.APP_MEDIA_REQUESTS"},
		{"worker", "$JS.API.STREAM.DELETE.APP_MEDIA_RESPONSES"},
		{"ops", subj.Response},
		{"ops", "$JS.API.STREAM.PURGE.APP_MEDIA_REQUESTS"},
		{"ops", "$JS.API.STREAM.DELETE.APP_MEDIA_DLQ"},
	} {
		deniedPublish(t, url, d.user, d.subject)
	}
	checkAPICreatesNoConsumer(t, url)

	// Allowed to the worker: removing an answered request from the work queue (the max-deliveries path)
	// and the progress subjects the console follows. A JetStream API answer (any, even an error about the
	// sequence) or a delivered message shows the server let it through.
	wnc2, err := nats.Connect(url, nats.UserInfo("worker", rolePasswords["worker"]))
	if err != nil {
		t.Fatal(err)
	}
	defer wnc2.Close()
	reply, err := wnc2.Request("$JS.API.STREAM.MSG.DELETE.APP_MEDIA_REQUESTS", []byte(`{"seq":999999}`), 10*time.Second)
	if err != nil || !bytes.Contains(reply.Data, []byte("stream_msg_delete_response")) {
		t.Errorf("worker deleting a request-stream message: %v %s, want JetStream's own answer", err, replyData(reply))
	}
	progress, err := wnc2.SubscribeSync(subj.ProgressWildcard())
	if err != nil {
		t.Fatal(err)
	}
	_ = wnc2.Flush()
	if err := wnc2.Publish(subj.ProgressSubject("11111111-1111-4111-8111-111111111111"), []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := progress.NextMsg(10 * time.Second); err != nil {
		t.Errorf("worker publishing and following progress: %v", err)
	}

	// Operators get the DLQ: an unparseable request is dead-lettered, and `mediaworker dlq ls` as ops lists it.
	if _, err := ajs.Publish(ctx, subj.Request, []byte("not json"), jetstream.WithMsgID("broken-1")); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, func() error {
		cmd := exec.Command(workerBinary(t), "dlq", "ls")
		cmd.Env = append(os.Environ(), "NATS_URL="+url, "NATS_USER=ops", "NATS_PASSWORD="+rolePasswords["ops"])
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("dlq ls as ops: %v\n%s", err, out)
		}
		if !strings.Contains(string(out), "not json") && !strings.Contains(string(out), "invalid") {
			return fmt.Errorf("dlq ls as ops does not list the dead letter yet:\n%s", out)
		}
		return nil
	})
	// The API's credentials on an operator's command: refused at once, saying why, not after the
	// command's 2-minute timeout (NATS answers a denied request with silence).
	start = time.Now()
	code, out, stderr := cli(t, []string{"NATS_URL=" + url, "NATS_USER=api", "NATS_PASSWORD=" + rolePasswords["api"]}, "dlq", "ls")
	took = time.Since(start)
	if code == 0 || took > 20*time.Second || !strings.Contains(stderr, "Permissions Violation") || !strings.Contains(stderr, "ops for dlq") {
		t.Errorf("dlq ls as the API: exit %d after %s, want a prompt refusal naming the permission:\n%s%s", code, took, out, stderr)
	}
	t.Logf("dlq ls with the API's credentials refused in %s: %s", took.Round(time.Millisecond), strings.TrimSpace(stderr))
}

func replyData(m *nats.Msg) string {
	if m == nil {
		return ""
	}
	return string(m.Data)
}
