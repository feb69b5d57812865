package main

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Issue 12: `streams print` shows the lanes (each lane's durable on its work subject, the requests
// stream holding the work subjects) in the form nats-server accepts, and `streams apply` defines them
// on a server, idempotently, with the flags' limits on every consumer.
func TestStreamsDefineTheLanes(t *testing.T) {
	lanes := map[string]string{"image": "app.media.optimize.work.image", "video": "app.media.optimize.work.video"}
	for lane, subject := range lanes {
		code, out, errs := run(t, "streams", "print", "consumer-"+lane, "--ack-wait", "45s", "--max-ack-pending", "12")
		if code != exitOK {
			t.Fatalf("streams print consumer-%s: exit %d: %s", lane, code, errs)
		}
		var cc server.ConsumerConfig
		dec := json.NewDecoder(strings.NewReader(out))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&cc); err != nil {
			t.Fatalf("consumer-%s does not decode into server.ConsumerConfig: %v", lane, err)
		}
		if cc.Durable != "mediaworker-"+lane || cc.FilterSubject != subject || cc.AckWait != 45*time.Second ||
			cc.MaxAckPending != 12 || cc.AckPolicy != server.AckExplicit || cc.InactiveThreshold != 0 {
			t.Errorf("consumer-%s: %+v", lane, cc)
		}
	}
	_, out, _ := run(t, "streams", "print", "requests")
	var sc server.StreamConfig
	if err := json.Unmarshal([]byte(out), &sc); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"app.media.optimize.request", lanes["image"], lanes["video"]} {
		if !slices.Contains(sc.Subjects, want) {
			t.Errorf("the requests stream's subjects %v lack %s", sc.Subjects, want)
		}
	}

	srv := testenv.StartNATS(t)
	for range 2 { // idempotent: a second apply changes nothing and succeeds
		code, out, errs := run(t, "streams", "apply", "--nats-url", srv.ClientURL(), "--max-ack-pending", "12")
		if code != exitOK {
			t.Fatalf("streams apply: exit %d: %s", code, errs)
		}
		for _, durable := range []string{"mediaworker (triage)", "mediaworker-image", "mediaworker-video"} {
			if !strings.Contains(out, durable) {
				t.Errorf("streams apply's report lacks %s: %s", durable, out)
			}
		}
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	want := map[string]string{"mediaworker": "app.media.optimize.request",
		"mediaworker-image": lanes["image"], "mediaworker-video": lanes["video"]}
	for durable, subject := range want {
		c, err := js.Consumer(ctx, "APP_MEDIA_REQUESTS", durable)
		if err != nil {
			t.Fatalf("after streams apply, consumer %s: %v", durable, err)
		}
		if cfg := c.CachedInfo().Config; cfg.FilterSubject != subject || cfg.MaxAckPending != 12 {
			t.Errorf("consumer %s filters %q with max ack pending %d; want %q and 12", durable, cfg.FilterSubject, cfg.MaxAckPending, subject)
		}
	}
}
