package webhooks_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/mediaworker/mediaworker/webhooks"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// 1,000 answers (a tenth of them virus events) → 1,000 deliveries, each verified by the reference
// library, each body the answer as published, each webhook-id processed once.
func TestEveryAnswerDeliveredSigned(t *testing.T) {
	r := newRig(t)
	secret := newSecret(t)
	rc := newReceiver(t, secret)
	var obs counter
	r.start(webhooks.Config{Endpoints: []webhooks.Endpoint{{Name: "api", URL: rc.url(), Secrets: []string{secret}, AllowPrivate: true, Concurrency: 8}}}, &obs)

	const n = 1000
	sent := map[string][]byte{}
	for i := range n {
		id := uuid.NewString()
		if i%10 == 0 {
			sent[id] = r.virus(id, "media")
		} else {
			sent[id] = r.answer(id, "media", "")
		}
	}
	eventually(t, 60*time.Second, "1000 deliveries", func() bool { return rc.processedCount() == n })
	rc.check()
	rc.mu.Lock()
	defer rc.mu.Unlock()
	bodies := map[string]bool{}
	for _, b := range rc.processed {
		bodies[string(b)] = true
	}
	for id, b := range sent {
		if !bodies[string(b)] {
			t.Fatalf("the answer for %s was not delivered as published", id)
		}
	}
	// The observer hears of a delivery once its ack is confirmed, after the receiver has it.
	eventually(t, 10*time.Second, "the observer counting every delivery", func() bool {
		return obs.get("api/"+webhooks.ResultDelivered) == n
	})
}

// Several secrets (a rotation) give one signature each, so a receiver holding either verifies; an
// Ed25519 key adds a v1a signature that verifies with its public key.
func TestRotationAndEd25519(t *testing.T) {
	r := newRig(t)
	oldSecret, newSecretV := newSecret(t), newSecret(t)
	seed := make([]byte, ed25519.SeedSize)
	for i := range seed {
		seed[i] = byte(i)
	}
	edKey := "whsk_" + base64.StdEncoding.EncodeToString(seed)
	rcOld, rcNew := newReceiver(t, oldSecret), newReceiver(t, newSecretV)
	r.start(webhooks.Config{Endpoints: []webhooks.Endpoint{
		{Name: "old", URL: rcOld.url(), Secrets: []string{newSecretV, oldSecret}, Ed25519Key: edKey, AllowPrivate: true},
		{Name: "new", URL: rcNew.url(), Secrets: []string{newSecretV, oldSecret}, AllowPrivate: true},
	}}, nil)
	body := r.answer(uuid.NewString(), "media", "")
	eventually(t, 20*time.Second, "both delivered", func() bool { return rcOld.processedCount() == 1 && rcNew.processedCount() == 1 })
	rcOld.check()
	rcNew.check()

	rcOld.mu.Lock()
	defer rcOld.mu.Unlock()
	for id, sigs := range rcOld.headers {
		parts := strings.Fields(strings.Join(sigs, " "))
		if len(parts) != 3 || !strings.HasPrefix(parts[2], "v1a,") {
			t.Fatalf("signatures %q: want two v1 and one v1a", parts)
		}
		ts := rcOld.times[id][0].Unix()
		sig, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(parts[2], "v1a,"))
		pub := ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)
		// The timestamp header may be a second before the receiver's clock read.
		ok := false
		for _, t0 := range []int64{ts, ts - 1} {
			ok = ok || ed25519.Verify(pub, []byte(id+"."+strconv.FormatInt(t0, 10)+"."+string(body)), sig)
		}
		if !ok {
			t.Fatal("the v1a signature does not verify with the Ed25519 public key")
		}
		pk, err := webhooks.PublicKey(edKey)
		if err != nil || pk != "whpk_"+base64.StdEncoding.EncodeToString(pub) {
			t.Fatalf("PublicKey = %q, %v", pk, err)
		}
	}
}

// The receiver answers 503 through an outage while the dispatcher is stopped and started twice:
// afterwards every answer is delivered, and none is sent again after it was accepted. The spec's
// schedule (5 s, 5 min, 30 min, 2 h, …) is compressed to 100 ms steps; the outage lasts about 2 s.
func TestOutageAndRestartsLoseNothing(t *testing.T) {
	r := newRig(t)
	secret := newSecret(t)
	rc := newReceiver(t, secret)
	var down atomic.Bool
	down.Store(true)
	rc.setAnswer(func(*http.Request) int {
		if down.Load() {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	cfg := webhooks.Config{Schedule: steps(200, 100*time.Millisecond),
		Endpoints: []webhooks.Endpoint{{Name: "api", URL: rc.url(), Secrets: []string{secret}, AllowPrivate: true}}}
	d := r.start(cfg, nil)
	const n = 200
	for range n / 2 {
		r.answer(uuid.NewString(), "media", "")
	}
	eventually(t, 10*time.Second, "attempts during the outage", func() bool { rc.mu.Lock(); defer rc.mu.Unlock(); return rc.requests > 20 })
	if s := d.States()[0]; s.Status != webhooks.StatusRetrying || !strings.Contains(s.LastError, "503") {
		t.Fatalf("state during the outage: %+v", s)
	}
	d.Close()
	for range n / 2 {
		r.answer(uuid.NewString(), "media", "")
	}
	d = r.start(cfg, nil)
	time.Sleep(500 * time.Millisecond) // let it try (and fail) some more before the second restart
	d.Close()
	d = r.start(cfg, nil)
	down.Store(false)
	eventually(t, 30*time.Second, "every answer delivered after the outage", func() bool { return rc.processedCount() == n })
	rc.check()
	eventually(t, 10*time.Second, "healthy again", func() bool { return d.States()[0].Status == webhooks.StatusHealthy })
}

// 410 Gone disables the endpoint: its consumer is paused (so a restart keeps it disabled), nothing more
// is sent, and enabling it sends what it holds.
func TestGoneDisablesEndpoint(t *testing.T) {
	r := newRig(t)
	secret := newSecret(t)
	rc := newReceiver(t, secret)
	var gone atomic.Bool
	gone.Store(true)
	rc.setAnswer(func(*http.Request) int {
		if gone.Load() {
			return http.StatusGone
		}
		return http.StatusOK
	})
	var obs counter
	cfg := webhooks.Config{Schedule: steps(5, 50*time.Millisecond),
		Endpoints: []webhooks.Endpoint{{Name: "api", URL: rc.url(), Secrets: []string{secret}, AllowPrivate: true, Concurrency: 1}}}
	d := r.start(cfg, &obs)
	r.answer(uuid.NewString(), "media", "")
	eventually(t, 10*time.Second, "disabled", func() bool { return d.States()[0].Status == webhooks.StatusDisabled })
	r.answer(uuid.NewString(), "media", "")
	d.Close()
	d = r.start(cfg, &obs)
	if s := d.States()[0]; s.Status != webhooks.StatusDisabled {
		t.Fatalf("after a restart: %+v", s)
	}
	ci, err := r.js.Consumer(context.Background(), r.streams.Responses, webhooks.Durable("api"))
	if err != nil || !ci.CachedInfo().Paused {
		t.Fatalf("consumer not paused: %v", err)
	}
	time.Sleep(500 * time.Millisecond) // ten retry steps: a live endpoint would have been tried again
	rc.mu.Lock()
	reqs := rc.requests
	rc.mu.Unlock()
	if reqs != 1 {
		t.Fatalf("a disabled endpoint got %d requests, want the one that answered 410", reqs)
	}
	if obs.get("api/"+webhooks.ResultDisabled) != 1 {
		t.Fatalf("observer: %v", obs.n)
	}

	gone.Store(false)
	if err := d.Enable(context.Background(), "api"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "both sent after enabling", func() bool { return rc.processedCount() == 2 })
	rc.check()
}

// An endpoint that never answers 2xx gets len(schedule)+1 attempts with one webhook-id, and then the
// answer is in the DLQ with the endpoint and the last status.
func TestDeadEndpointEndsInDLQ(t *testing.T) {
	r := newRig(t)
	secret := newSecret(t)
	rc := newReceiver(t, secret)
	rc.setAnswer(func(*http.Request) int { return http.StatusInternalServerError })
	var obs counter
	r.start(webhooks.Config{Schedule: steps(3, 50*time.Millisecond),
		Endpoints: []webhooks.Endpoint{{Name: "dead", URL: rc.url(), Secrets: []string{secret}, AllowPrivate: true}}}, &obs)
	body := r.answer(uuid.NewString(), "media", "")
	dlq, err := r.js.Stream(context.Background(), r.streams.DLQStream)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "a DLQ entry", func() bool {
		info, err := dlq.Info(context.Background())
		return err == nil && info.State.Msgs == 1
	})
	m, err := dlq.GetMsg(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	h := m.Header
	if !bytes.Equal(m.Data, body) || h.Get(webhooks.HeaderEndpoint) != "dead" || h.Get(webhooks.HeaderStatus) != "500" ||
		h.Get("Mw-Reason") != webhooks.ReasonWebhook || h.Get("Mw-Deliveries") != "4" || !strings.Contains(h.Get("Mw-Last-Error"), "HTTP 500") ||
		strings.Contains(h.Get("Mw-Last-Error"), "token=") {
		t.Fatalf("DLQ entry: %q %v", m.Data, h)
	}
	rc.mu.Lock()
	attempts := fmt.Sprint(rc.attempts)
	ok := len(rc.attempts) == 1 && rc.attempts[h.Get(webhooks.HeaderWebhookID)] == 4
	rc.mu.Unlock()
	if !ok {
		t.Fatalf("attempts per webhook-id: %s (want 4 with one id)", attempts)
	}
	// The dead letter is stored before the message is terminated and the observer told: both follow
	// a moment later.
	eventually(t, 10*time.Second, "the observer counting 3 retries and 1 dead letter", func() bool {
		return obs.get("dead/"+webhooks.ResultRetry) == 3 && obs.get("dead/"+webhooks.ResultDeadLettered) == 1
	})
	// The message is settled: nothing more to deliver.
	c, _ := r.js.Consumer(context.Background(), r.streams.Responses, webhooks.Durable("dead"))
	eventually(t, 10*time.Second, "the consumer settling the dead-lettered message", func() bool {
		info, err := c.Info(context.Background())
		return err == nil && info.NumAckPending == 0 && info.NumPending == 0
	})
}

// An endpoint that takes 30 s per request does not delay another: the fast one gets every answer
// within seconds while the slow one's requests are all still open.
func TestSlowEndpointDoesNotDelayAnother(t *testing.T) {
	r := newRig(t)
	secret := newSecret(t)
	slow, fast := newReceiver(t, secret), newReceiver(t, secret)
	slow.setAnswer(func(req *http.Request) int {
		select {
		case <-time.After(30 * time.Second):
		case <-slow.release:
		case <-req.Context().Done():
		}
		return http.StatusOK
	})
	r.start(webhooks.Config{Endpoints: []webhooks.Endpoint{
		{Name: "slow", URL: slow.url(), Secrets: []string{secret}, AllowPrivate: true, Timeout: time.Minute},
		{Name: "fast", URL: fast.url(), Secrets: []string{secret}, AllowPrivate: true},
	}}, nil)
	const n = 100
	start := time.Now()
	for range n {
		r.answer(uuid.NewString(), "media", "")
	}
	eventually(t, 15*time.Second, "the fast endpoint has every answer", func() bool { return fast.processedCount() == n })
	took := time.Since(start)
	fast.check()
	if got := slow.processedCount(); got != 0 {
		t.Fatalf("the slow endpoint answered %d already: the test did not hold it", got)
	}
	t.Logf("fast endpoint: %d deliveries in %s beside a 30 s endpoint", n, took.Round(time.Millisecond))
}

// Recipe and bucket filters: an endpoint for one bucket gets only that bucket's answers and virus
// events; one for a recipe gets only that recipe's answers; events narrow by subject.
func TestFilters(t *testing.T) {
	r := newRig(t)
	secret := newSecret(t)
	tenant, avatars, virusOnly := newReceiver(t, secret), newReceiver(t, secret), newReceiver(t, secret)
	r.start(webhooks.Config{Endpoints: []webhooks.Endpoint{
		{Name: "tenant-a", URL: tenant.url(), Secrets: []string{secret}, AllowPrivate: true, Buckets: []string{"a"}},
		{Name: "avatars", URL: avatars.url(), Secrets: []string{secret}, AllowPrivate: true, Recipes: []string{"avatar"}, Events: []string{webhooks.EventResponse}},
		{Name: "virus", URL: virusOnly.url(), Secrets: []string{secret}, AllowPrivate: true, Events: []string{webhooks.EventVirus}},
	}}, nil)
	r.answer(uuid.NewString(), "a", "")
	r.answer(uuid.NewString(), "b", "")
	r.answer(uuid.NewString(), "b", "avatar")
	r.virus(uuid.NewString(), "a")
	r.virus(uuid.NewString(), "b")
	// The last answer is for everyone: once each has it, each has seen all before it.
	last := uuid.NewString()
	r.answer(last, "a", "avatar")
	r.virus(uuid.NewString(), "a")
	eventually(t, 20*time.Second, "filtered deliveries", func() bool {
		return tenant.processedCount() == 4 && avatars.processedCount() == 2 && virusOnly.processedCount() == 3
	})
	time.Sleep(300 * time.Millisecond)
	for name, rc := range map[string]*receiver{"tenant-a": tenant, "avatars": avatars, "virus": virusOnly} {
		rc.check()
		rc.mu.Lock()
		for _, b := range rc.processed {
			s := string(b)
			switch {
			case name == "tenant-a" && !strings.Contains(s, "/a/") && !strings.Contains(s, `"s3Bucket":"a"`),
				name == "avatars" && !strings.Contains(s, `"recipe":"avatar"`),
				name == "virus" && !strings.Contains(s, "virusName"):
				t.Errorf("%s got %s", name, s)
			}
		}
		rc.mu.Unlock()
	}
	if tenant.processedCount() != 4 || avatars.processedCount() != 2 || virusOnly.processedCount() != 3 {
		t.Fatalf("counts: %d %d %d", tenant.processedCount(), avatars.processedCount(), virusOnly.processedCount())
	}
}

// Retry-After is honoured: the next attempt waits for it even though the schedule says 50 ms.
func TestRetryAfterHonoured(t *testing.T) {
	r := newRig(t)
	secret := newSecret(t)
	rc := newReceiver(t, secret)
	var calls atomic.Int32
	rc.setAnswer(func(*http.Request) int {
		if calls.Add(1) == 1 {
			return http.StatusTooManyRequests
		}
		return http.StatusOK
	})
	// Retry-After needs the header: wrap the receiver's handler.
	inner := rc.srv.Config.Handler
	rc.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if calls.Load() == 0 {
			w.Header().Set("Retry-After", "2")
		}
		inner.ServeHTTP(w, req)
	})
	r.start(webhooks.Config{Schedule: steps(5, 50*time.Millisecond),
		Endpoints: []webhooks.Endpoint{{Name: "api", URL: rc.url(), Secrets: []string{secret}, AllowPrivate: true}}}, nil)
	r.answer(uuid.NewString(), "media", "")
	eventually(t, 20*time.Second, "delivered", func() bool { return rc.processedCount() == 1 })
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, ts := range rc.times {
		if len(ts) != 2 || ts[1].Sub(ts[0]) < 1900*time.Millisecond {
			t.Fatalf("attempts at %v: the second should wait for Retry-After (2 s)", ts)
		}
	}
}

// Progress is delivered only to endpoints that ask for it, signed like the rest, each event once
// across instances (two dispatchers here); endpoints that did not ask get none.
func TestProgressOnlyWhenAsked(t *testing.T) {
	r := newRig(t)
	secret := newSecret(t)
	progressOnly, both, answersOnly := newReceiver(t, secret), newReceiver(t, secret), newReceiver(t, secret)
	cfg := webhooks.Config{Endpoints: []webhooks.Endpoint{
		{Name: "progress", URL: progressOnly.url(), Secrets: []string{secret}, AllowPrivate: true, Events: []string{webhooks.EventProgress}},
		{Name: "both", URL: both.url(), Secrets: []string{secret}, AllowPrivate: true, Events: []string{webhooks.EventResponse, webhooks.EventProgress}},
		{Name: "answers", URL: answersOnly.url(), Secrets: []string{secret}, AllowPrivate: true},
	}}
	r.start(cfg, nil)
	r.start(cfg, nil) // a second instance
	nc := r.js.Conn()
	const n = 5
	for i := range n {
		id := uuid.NewString()
		if err := nc.Publish(r.subj.ProgressSubject(id), []byte(`{"mediaId":"`+id+`","percent":`+strconv.Itoa(i*20)+`,"stage":"transcoding"}`)); err != nil {
			t.Fatal(err)
		}
	}
	r.answer(uuid.NewString(), "media", "")
	eventually(t, 20*time.Second, "progress and answers delivered", func() bool {
		return progressOnly.processedCount() == n && both.processedCount() == n+1 && answersOnly.processedCount() == 1
	})
	time.Sleep(300 * time.Millisecond)
	for _, rc := range []*receiver{progressOnly, both, answersOnly} {
		rc.check()
		rc.mu.Lock()
		reqs := rc.requests
		rc.mu.Unlock()
		if reqs != rc.processedCount() {
			t.Errorf("%d requests for %d events: an event was sent twice", reqs, rc.processedCount())
		}
	}
	if progressOnly.processedCount() != n || both.processedCount() != n+1 || answersOnly.processedCount() != 1 {
		t.Fatalf("counts: %d %d %d", progressOnly.processedCount(), both.processedCount(), answersOnly.processedCount())
	}
}

// A Retry-After shorter than the schedule's wait does not shorten it: a receiver answering 429 with
// "Retry-After: 1" must not spend the whole schedule in seconds and send the answer to the DLQ.
func TestShortRetryAfterKeepsSchedule(t *testing.T) {
	r := newRig(t)
	secret := newSecret(t)
	rc := newReceiver(t, secret)
	rc.setAnswer(func(*http.Request) int { return http.StatusTooManyRequests })
	inner := rc.srv.Config.Handler
	rc.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Retry-After", "1")
		inner.ServeHTTP(w, req)
	})
	obs := &counter{}
	r.start(webhooks.Config{Schedule: steps(2, 3*time.Second),
		Endpoints: []webhooks.Endpoint{{Name: "api", URL: rc.url(), Secrets: []string{secret}, AllowPrivate: true}}}, obs)
	r.answer(uuid.NewString(), "media", "")
	eventually(t, 30*time.Second, "dead-lettered", func() bool { return obs.get("api/"+webhooks.ResultDeadLettered) == 1 })
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, ts := range rc.times {
		if len(ts) != 3 || ts[1].Sub(ts[0]) < 2900*time.Millisecond || ts[2].Sub(ts[1]) < 2900*time.Millisecond {
			t.Fatalf("attempts at %v: each retry should wait the schedule's 3 s, not Retry-After's 1 s", ts)
		}
	}
}

// A retry schedule longer than the responses stream keeps an answer is refused at start: the late
// retries would find the answer expired, and it would be lost without a DLQ entry.
func TestScheduleLongerThanRetentionRefused(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	if _, err := r.js.UpdateStream(ctx, jetstream.StreamConfig{Name: r.streams.Responses, Subjects: []string{r.subj.Response, r.subj.Virus},
		Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute, MaxAge: time.Hour}); err != nil {
		t.Fatal(err)
	}
	secret := newSecret(t)
	ep := webhooks.Endpoint{Name: "api", URL: "https://api.example/hooks", Secrets: []string{secret}}
	_, err := webhooks.Start(ctx, r.js, r.streams, webhooks.Config{Schedule: []time.Duration{5 * time.Second, 30 * time.Minute, 40 * time.Minute}, Endpoints: []webhooks.Endpoint{ep}}, nil, zerolog.Nop())
	if err == nil || !strings.Contains(err.Error(), "spans 1h10m5s") || !strings.Contains(err.Error(), "only 1h0m0s") {
		t.Fatalf("a 70 min schedule on a stream keeping answers 1 h: %v", err)
	}
	d, err := webhooks.Start(ctx, r.js, r.streams, webhooks.Config{Schedule: []time.Duration{5 * time.Second, 30 * time.Minute}, Endpoints: []webhooks.Endpoint{ep}}, nil, zerolog.Nop())
	if err != nil {
		t.Fatalf("a 30 min schedule on a stream keeping answers 1 h: %v", err)
	}
	d.Close()
}
