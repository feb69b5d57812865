package app_test

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/app"
	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/webhooks"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// The worker, with real parts, delivers each answer and virus event to a verifying endpoint, exactly as
// it published it, while a second endpoint takes 30 s per request (it holds every request it gets open
// to the end of the test); of two endpoints limited to a bucket, the one for the requests' bucket gets
// everything (the answers name it in Mw-Bucket) and the other tenant's nothing.
func TestWebhooksFromTheRunningWorker(t *testing.T) {
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	secret := "whsec_" + base64.StdEncoding.EncodeToString(key)
	wh, _ := standardwebhooks.NewWebhook(secret)

	var mu sync.Mutex
	got := map[string][]byte{} // webhook-id → body
	var bad atomic.Int32
	verifying := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if wh.Verify(body, r.Header) != nil {
			bad.Add(1)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		mu.Lock()
		got[r.Header.Get("webhook-id")] = body
		mu.Unlock()
	}))
	defer verifying.Close()
	release := make(chan struct{})
	var slowOpen atomic.Int32
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		slowOpen.Add(1)
		defer slowOpen.Add(-1)
		select {
		case <-time.After(30 * time.Second):
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer slow.Close()
	defer close(release)
	var otherHits atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { otherHits.Add(1) }))
	defer other.Close()
	var mineHits atomic.Int32
	mine := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { mineHits.Add(1) }))
	defer mine.Close()

	w := startWorld(t, app.StorageNATS, testenv.StartClamd(t), func(c *app.Config) {
		c.Webhooks.Endpoints = []webhooks.Endpoint{
			{Name: "api", URL: verifying.URL, Secrets: []string{secret}, AllowPrivate: true},
			{Name: "slow", URL: slow.URL, Secrets: []string{secret}, AllowPrivate: true, Timeout: time.Minute, Concurrency: 2},
			{Name: "other-tenant", URL: other.URL, Secrets: []string{secret}, AllowPrivate: true, Buckets: []string{"someone-else"}},
			{Name: "this-tenant", URL: mine.URL, Secrets: []string{secret}, AllowPrivate: true, Buckets: []string{"media"}},
		}
	})
	dir := t.TempDir()
	photo := testenv.MakePhoto(t, dir, "jpeg", 640, 480)
	eicar := filepath.Join(dir, "eicar.txt")
	if err := os.WriteFile(eicar, []byte(testenv.EICAR), 0o600); err != nil {
		t.Fatal(err)
	}
	const images = 6
	start := time.Now()
	var ids []string
	for i := range images {
		ids = append(ids, w.request(w.upload(photo, "wh/photo"+string(rune('a'+i))+".jpg")))
	}
	virusID := w.request(w.upload(eicar, "wh/eicar.jpg"))
	for _, id := range ids {
		if r := w.await(id, 2*time.Minute); !r.Success {
			t.Fatalf("%s: %+v", id, r)
		}
	}
	imagesTook := time.Since(start)
	w.await(virusID, 2*time.Minute)

	// Every answer and the virus event: images + the virus event + the virus response.
	want := images + 2
	testenv.Eventually(t, 30*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(got) != want || int(mineHits.Load()) != want {
			return fmt.Errorf("%d of %d delivered, %d to the endpoint for this bucket", len(got), want, mineHits.Load())
		}
		return nil
	})
	if bad.Load() != 0 {
		t.Fatalf("%d deliveries failed verification", bad.Load())
	}
	mu.Lock()
	for _, body := range got {
		schema := contracts.SchemaResponse
		if bytes.Contains(body, []byte("virusName")) {
			schema = contracts.SchemaVirusEvent
		}
		if err := contracts.ValidateJSON(schema, body); err != nil {
			t.Errorf("delivered body is not the seed contract's: %v\n%s", err, body)
		}
	}
	mu.Unlock()
	if n := slowOpen.Load(); n != 2 {
		t.Errorf("the slow endpoint holds %d requests, want its concurrency, 2", n)
	}
	if otherHits.Load() != 0 {
		t.Errorf("an endpoint for another bucket got %d deliveries", otherHits.Load())
	}
	t.Logf("%d images answered in %s beside a 30 s endpoint", images, imagesTook.Round(time.Millisecond))
}
