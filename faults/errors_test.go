package faults

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/internal/testenv"
	natsjs "github.com/mediaworker/mediaworker/jetstream"
)

// Issue 22 item 3: a transient cause that outlasts the deliveries is answered "gave up after N
// deliveries: <stage>: <sentence>", in words for the person who uploaded the file: no endpoint, no
// scratch path, no client library's error chain. The operator gets all of it, in the worker's log line
// and the dead letter's Mw-Last-Error.
//
// The dependency watcher holds every pull while the store or the scratch disk fails its probe, so a
// plain outage is waited out, never given up on (TestOutageLongerThanTheRetryBudgetDeadLettersNothing).
// What is given up on is a failure the probes cannot see: a store that answers its probe (ListBuckets,
// GET /) while every request for an object has its connection cut, and a scratch dir that is replaced
// by a file while the disk under it is fine.
func TestGaveUpAnswersAreForPeople(t *testing.T) {
	t.Run("store", func(t *testing.T) {
		clamd := testenv.StartClamd(t)
		srv := testenv.StartNATS(t)
		m := testenv.StartS3(t)
		proxy := startCutProxy(t, m.Endpoint)
		w := startWorker(t, "a", workerOpts{natsURL: srv.ClientURL(), clamd: clamd, s3: m, s3Addr: proxy.Endpoint(),
			args: []string{"--max-deliver", "2", "--backoff-base", "200ms", "--backoff-max", "500ms"}})
		l := newLedger(t, srv.ClientURL())
		c := newClient(t, l, m, 1) // the S3 server itself, not the proxy

		id := c.submit(testenv.MakeJPEG(t, t.TempDir(), 64, 48), "u/photo.jpg")
		gaveUp(t, w, l, id, "gave up after 2 deliveries: downloading: the object store could not be reached", proxy.Endpoint())
	})

	t.Run("scratch", func(t *testing.T) {
		clamd := testenv.StartClamd(t)
		srv := testenv.StartNATS(t)
		m := testenv.StartS3(t)
		tmp := t.TempDir()
		w := startWorker(t, "a", workerOpts{natsURL: srv.ClientURL(), clamd: clamd, s3: m, tmpDir: tmp,
			args: []string{"--max-deliver", "2", "--backoff-base", "200ms", "--backoff-max", "500ms"}})
		l := newLedger(t, srv.ClientURL())
		c := newClient(t, l, m, 1)
		// The scratch dir goes and a file takes its place (a volume unmounted under a running worker,
		// a clean-up script gone wrong): every job's mkdir fails, while the disk the watcher probes
		// (statfs of the path) is fine.
		if err := os.Rename(tmp, tmp+"-gone"); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(tmp, nil, 0o600); err != nil {
			t.Fatal(err)
		}

		id := c.submit(testenv.MakeJPEG(t, t.TempDir(), 64, 48), "u/photo.jpg")
		gaveUp(t, w, l, id, "gave up after 2 deliveries: preparing scratch dir: the scratch directory is missing", tmp)
	})
}

// gaveUp waits for id's answer and dead letter and checks that the answer is want and plain, and that
// the dead letter's Mw-Last-Error and the worker's log line carry detail (an endpoint, a path).
func gaveUp(t *testing.T, w *workerProc, l *ledger, id, want, detail string) {
	t.Helper()
	l.await([]string{id}, 2*time.Minute)
	l.awaitDLQ(1, 30*time.Second)
	resp := l.one(id)
	if err := contracts.Validate(contracts.SchemaResponse, resp); err != nil {
		t.Error(err)
	}
	if resp.Success || resp.Error != want {
		t.Errorf("answer %q, want %q", resp.Error, want)
	}
	for _, re := range publicLeaks {
		if re.MatchString(resp.Error) {
			t.Errorf("answer %q matches %s", resp.Error, re)
		}
	}
	dl := l.deadLetters()
	if len(dl) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dl))
	}
	last := dl[0].header.Get(natsjs.HeaderLastError)
	if !strings.Contains(last, detail) || strings.Contains(last, "\n") {
		t.Errorf("dead letter's %s %q does not carry %q on one line", natsjs.HeaderLastError, last, detail)
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		b, _ := os.ReadFile(w.logPath)
		for _, line := range bytes.Split(b, []byte("\n")) {
			if bytes.Contains(line, []byte("job gave up")) && bytes.Contains(line, []byte(id)) && bytes.Contains(line, []byte(detail)) {
				return nil
			}
		}
		return fmt.Errorf("no log line says the job gave up with %q", detail)
	})
	t.Logf("answer: %s\n%s: %s", resp.Error, natsjs.HeaderLastError, last)
}

// publicLeaks are what an answer must not carry: a port, a path, a client library's or the kernel's
// words, a formatting accident.
var publicLeaks = []*regexp.Regexp{
	regexp.MustCompile(`:\d`), regexp.MustCompile(`/`), regexp.MustCompile(`"`),
	regexp.MustCompile(`(?i)dial tcp|read tcp|connect:|refused|reset by peer|EOF|no such file|not a directory|%!`),
}

// cutProxy is an S3 endpoint in front of the S3 server that passes its probe (GET /, ListBuckets: what the
// worker's dependency watcher asks) and resets the connection of every other request: to the worker
// the store is up, and every object in it unreachable.
type cutProxy struct {
	ln  net.Listener
	srv *http.Server
	tr  *http.Transport
}

func startCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, tr: &http.Transport{}}
	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: target})
	rp.Transport = p.tr
	p.srv = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/" {
			rp.ServeHTTP(w, r)
			return
		}
		conn, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // a reset, not an orderly close
		}
		conn.Close()
	})}
	go func() { _ = p.srv.Serve(ln) }()
	t.Cleanup(func() {
		p.srv.Close()
		p.tr.CloseIdleConnections()
	})
	return p
}

// Endpoint is the proxy's host:port, for --s3-endpoint.
func (p *cutProxy) Endpoint() string { return p.ln.Addr().String() }
