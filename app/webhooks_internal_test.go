package app

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/console"
	"github.com/mediaworker/mediaworker/internal/testenv"
	natsjs "github.com/mediaworker/mediaworker/jetstream"
	"github.com/mediaworker/mediaworker/webhooks"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
)

// The webhooks as the app wires them: on the streams the jetstream package provisions, counted in
// /metrics by endpoint and result, each endpoint's state on the console (healthy, retrying with the
// last error, disabled), and dead letters that the DLQ reader understands.
func TestWebhooksMetricsConsoleAndDLQ(t *testing.T) {
	js, err := jetstream.New(testenv.Connect(t, testenv.StartNATS(t)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cfg := DefaultConfig()
	if err := natsjs.Provision(ctx, js, cfg.Streams); err != nil {
		t.Fatal(err)
	}
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	secret := "whsec_" + base64.StdEncoding.EncodeToString(key)
	var okHits atomic.Int32
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { okHits.Add(1) }))
	defer ok.Close()
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusBadGateway) }))
	defer down.Close()
	gone := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusGone) }))
	defer gone.Close()
	cfg.Webhooks = webhooks.Config{Schedule: []time.Duration{50 * time.Millisecond, 50 * time.Millisecond}, Endpoints: []webhooks.Endpoint{
		{Name: "ok", URL: ok.URL, Secrets: []string{secret}, AllowPrivate: true},
		{Name: "down", URL: down.URL, Secrets: []string{secret}, AllowPrivate: true},
		{Name: "gone", URL: gone.URL, Secrets: []string{secret}, AllowPrivate: true},
	}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	a := &App{cfg: cfg, js: js, log: zerolog.Nop(), metrics: newMetrics()}
	if err := a.startWebhooks(ctx); err != nil {
		t.Fatal(err)
	}
	defer a.webhooks.Close()

	m := nats.NewMsg(cfg.Streams.Subjects().Response)
	m.Data = []byte(`{"mediaId":"00000000-0000-4000-8000-000000000001","originalUrl":"nats://objectstore/media/a.jpg","success":true,"processed":[]}`)
	if _, err := js.PublishMsg(ctx, m, jetstream.WithMsgID("00000000-0000-4000-8000-000000000001/1/success")); err != nil {
		t.Fatal(err)
	}
	dlq := natsjs.NewDLQ(js, cfg.Streams)
	testenv.Eventually(t, 20*time.Second, func() error {
		list, err := dlq.List(ctx, 0)
		if err != nil || len(list) != 1 || okHits.Load() != 1 {
			return fmt.Errorf("dlq %d entries (%v), ok endpoint %d hits", len(list), err, okHits.Load())
		}
		return nil
	})
	list, _ := dlq.List(ctx, 0)
	dl := list[0]
	if dl.Reason != webhooks.ReasonWebhook || dl.Deliveries != 3 || !strings.Contains(dl.LastError, "HTTP 502") || dl.MediaID != "00000000-0000-4000-8000-000000000001" ||
		dl.Header.Get(natsjs.HeaderConsumer) != webhooks.Durable("down") || dl.Header.Get(natsjs.HeaderStream) != cfg.Streams.ResponsesStream() {
		t.Fatalf("dead letter as the DLQ reader sees it: %+v", dl)
	}

	// The dead letter is stored before its message is terminated and the dispatcher's observer (the
	// console's state, the metrics) told, and the ok endpoint's hit before its ack: both a moment later.
	testenv.Eventually(t, 10*time.Second, func() error {
		deps := map[string]console.Dependency{}
		for _, d := range webhookDeps(a.webhooks) {
			deps[d.Name] = d
		}
		if d := deps["webhook ok"]; d.State != console.OK {
			return fmt.Errorf("ok: %+v", d)
		}
		if d := deps["webhook down"]; d.State != console.Warn || !strings.Contains(d.Reason, "HTTP 502") {
			return fmt.Errorf("down: %+v", d)
		}
		if d := deps["webhook gone"]; d.State != console.Fail || !strings.Contains(d.Reason, "disabled") || !strings.Contains(d.Reason, "410") {
			return fmt.Errorf("gone: %+v", d)
		}
		rec := httptest.NewRecorder()
		promhttp.HandlerFor(a.metrics.reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		for _, want := range []string{
			`mediaworker_webhook_deliveries_total{endpoint="ok",result="delivered"} 1`,
			`mediaworker_webhook_deliveries_total{endpoint="down",result="retry"} 2`,
			`mediaworker_webhook_deliveries_total{endpoint="down",result="dead_lettered"} 1`,
			`mediaworker_webhook_deliveries_total{endpoint="gone",result="disabled"} 1`,
		} {
			if !strings.Contains(rec.Body.String(), want) {
				return fmt.Errorf("metrics lack %s", want)
			}
		}
		return nil
	})
}
