package webhooks_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/webhooks"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// rig is a JetStream server with the worker's responses and DLQ streams, shaped as the jetstream
// package makes them (the app's tests check the names agree), and helpers to publish answers.
type rig struct {
	t       *testing.T
	js      jetstream.JetStream
	streams webhooks.Streams
	subj    contracts.Subjects
}

func newRig(t *testing.T) *rig {
	t.Helper()
	nc := testenv.Connect(t, testenv.StartNATS(t))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return rigOn(t, js)
}

// rigOn makes the rig's streams on js (a server of the test's own).
func rigOn(t *testing.T, js jetstream.JetStream) *rig {
	t.Helper()
	r := &rig{t: t, js: js, subj: contracts.SubjectsFor("app"),
		streams: webhooks.Streams{App: "app", Responses: "APP_MEDIA_RESPONSES", DLQStream: "APP_MEDIA_DLQ", Replicas: 1}}
	ctx := context.Background()
	for _, sc := range []jetstream.StreamConfig{
		{Name: r.streams.Responses, Subjects: []string{r.subj.Response, r.subj.Virus}, Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute},
		{Name: r.streams.DLQStream, Subjects: []string{r.subj.DLQ}, Storage: jetstream.FileStorage},
	} {
		if _, err := js.CreateStream(ctx, sc); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// answer publishes one seed-shaped answer for mediaID as the worker does (with a Nats-Msg-Id and the
// bucket header) and returns its body.
func (r *rig) answer(mediaID, bucket, recipe string) []byte {
	r.t.Helper()
	resp := contracts.Response{MediaID: mediaID, OriginalURL: "nats://objectstore/" + bucket + "/u/" + mediaID + ".jpg", Success: true, Recipe: recipe,
		Processed: []contracts.Variant{{Quality: "high", Format: "webp", URL: "http://127.0.0.1/x/" + mediaID + "_high.webp", Size: 1234}}}
	body, _ := json.Marshal(resp)
	m := nats.NewMsg(r.subj.Response)
	m.Data = body
	m.Header.Set(contracts.HeaderBucket, bucket)
	if _, err := r.js.PublishMsg(context.Background(), m, jetstream.WithMsgID(mediaID+"/1/success")); err != nil {
		r.t.Fatal(err)
	}
	return body
}

// virus publishes one virus event.
func (r *rig) virus(mediaID, bucket string) []byte {
	r.t.Helper()
	body, _ := json.Marshal(contracts.VirusEvent{MediaID: mediaID, S3Key: "u/" + mediaID, S3Bucket: bucket, MediaURL: "https://api.example/m/" + mediaID,
		VirusName: "Eicar-Test-Signature", DetectedAt: time.Now().UTC().Format(time.RFC3339), ActionTaken: "deleted"})
	m := nats.NewMsg(r.subj.Virus)
	m.Data = body
	if _, err := r.js.PublishMsg(context.Background(), m, jetstream.WithMsgID(mediaID+"/1/virus-event")); err != nil {
		r.t.Fatal(err)
	}
	return body
}

func (r *rig) start(cfg webhooks.Config, obs webhooks.Observer) *webhooks.Dispatcher {
	r.t.Helper()
	d, err := webhooks.Start(context.Background(), r.js, r.streams, cfg, obs, zerolog.Nop())
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(d.Close)
	return d
}

func newSecret(t *testing.T) string {
	t.Helper()
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return "whsec_" + base64.StdEncoding.EncodeToString(b)
}

// receiver is a loopback endpoint that verifies every request with the reference Standard Webhooks
// library, processes each webhook-id once (as the spec asks a receiver to), and answers what
// answer says.
type receiver struct {
	t   *testing.T
	srv *httptest.Server
	wh  *standardwebhooks.Webhook

	answer atomic.Value // func(*http.Request) int

	mu        sync.Mutex
	requests  int                 // every request
	attempts  map[string]int      // requests per webhook-id
	okTimes   map[string]int      // 2xx answers per webhook-id
	processed map[string][]byte   // first body per webhook-id that was accepted
	bad       []string            // requests that failed verification
	headers   map[string][]string // the last request's headers, per id
	times     map[string][]time.Time
	release   chan struct{} // closed at cleanup: lets blocked handlers go
}

func newReceiver(t *testing.T, secret string) *receiver {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	rc := &receiver{t: t, wh: wh, attempts: map[string]int{}, okTimes: map[string]int{}, processed: map[string][]byte{},
		headers: map[string][]string{}, times: map[string][]time.Time{}, release: make(chan struct{})}
	rc.setAnswer(func(*http.Request) int { return http.StatusNoContent })
	rc.srv = httptest.NewServer(http.HandlerFunc(rc.serve))
	t.Cleanup(func() {
		close(rc.release)
		rc.srv.Close()
	})
	return rc
}

func (rc *receiver) setAnswer(f func(*http.Request) int) { rc.answer.Store(f) }

func (rc *receiver) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	id := r.Header.Get("webhook-id")
	rc.mu.Lock()
	rc.requests++
	rc.attempts[id]++
	rc.times[id] = append(rc.times[id], time.Now())
	rc.headers[id] = r.Header.Values("webhook-signature")
	rc.mu.Unlock()
	if err := rc.wh.Verify(body, r.Header); err != nil {
		rc.mu.Lock()
		rc.bad = append(rc.bad, fmt.Sprintf("%s: %v", id, err))
		rc.mu.Unlock()
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	code := rc.answer.Load().(func(*http.Request) int)(r)
	if code >= 200 && code < 300 {
		rc.mu.Lock()
		if _, dup := rc.processed[id]; !dup {
			rc.processed[id] = body
		}
		rc.okTimes[id]++
		rc.mu.Unlock()
	}
	w.WriteHeader(code)
}

func (rc *receiver) url() string { return rc.srv.URL + "/hook?token=x" }

func (rc *receiver) processedCount() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.processed)
}

func (rc *receiver) check() {
	rc.t.Helper()
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if len(rc.bad) > 0 {
		rc.t.Fatalf("%d requests failed verification, first: %s", len(rc.bad), rc.bad[0])
	}
	for id, n := range rc.okTimes {
		if n != 1 {
			rc.t.Fatalf("webhook-id %s was accepted %d times: a delivery was repeated after it succeeded", id, n)
		}
	}
}

// counter is an Observer.
type counter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counter) WebhookDelivery(endpoint, result string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[endpoint+"/"+result]++
}

func (c *counter) get(k string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[k]
}

func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, d, func() error {
		if !cond() {
			return fmt.Errorf("not yet: %s", what)
		}
		return nil
	})
}

// steps is a compressed retry schedule: n waits of d.
func steps(n int, d time.Duration) []time.Duration {
	s := make([]time.Duration, n)
	for i := range s {
		s[i] = d
	}
	return s
}
