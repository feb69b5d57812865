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
// on a server, idempotently, with the flags' limits on every consumer and a lane's own where set.
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
		// The lane's subject and, under it, the subjects of copies past a full lane's --max-queued cap.
		if cc.Durable != "mediaworker-"+lane || !slices.Equal(cc.FilterSubjects, []string{subject, subject + ".*"}) || cc.AckWait != 45*time.Second ||
			cc.MaxAckPending != 12 || cc.AckPolicy != server.AckExplicit || cc.InactiveThreshold != 0 {
			t.Errorf("consumer-%s: %+v", lane, cc)
		}
	}
	_, out, _ := run(t, "streams", "print", "requests")
	var sc server.StreamConfig
	if err := json.Unmarshal([]byte(out), &sc); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"app.media.optimize.request", lanes["image"], lanes["video"], lanes["image"] + ".*", lanes["video"] + ".*"} {
		if !slices.Contains(sc.Subjects, want) {
			t.Errorf("the requests stream's subjects %v lack %s", sc.Subjects, want)
		}
	}

	// A lane's own limits go into its consumer only; the other lane keeps the shared ones.
	_, out, _ = run(t, "streams", "print", "consumer-video", "--max-ack-pending", "12", "--video-max-ack-pending", "3", "--video-ack-wait", "2m")
	var video server.ConsumerConfig
	if err := json.Unmarshal([]byte(out), &video); err != nil || video.MaxAckPending != 3 || video.AckWait != 2*time.Minute {
		t.Errorf("consumer-video with its own limits: %+v, %v", video, err)
	}
	_, out, _ = run(t, "streams", "print", "consumer-image", "--max-ack-pending", "12", "--video-max-ack-pending", "3")
	var image server.ConsumerConfig
	if err := json.Unmarshal([]byte(out), &image); err != nil || image.MaxAckPending != 12 {
		t.Errorf("consumer-image beside a video limit: %+v, %v", image, err)
	}
	if code, _, errs := run(t, "streams", "print", "--video-max-ack-pending", "-2"); code != exitUsage || !strings.Contains(errs, "--video-max-ack-pending") {
		t.Errorf("a negative lane limit: exit %d, %q; want a usage error naming --video-max-ack-pending", code, errs)
	}

	srv := testenv.StartNATS(t)
	for range 2 { // idempotent: a second apply changes nothing and succeeds
		code, out, errs := run(t, "streams", "apply", "--nats-url", srv.ClientURL(), "--max-ack-pending", "12", "--video-max-ack-pending", "3")
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
	want := map[string]struct {
		subject    string
		ackPending int
	}{"mediaworker": {"app.media.optimize.request", 12}, "mediaworker-image": {lanes["image"], 12}, "mediaworker-video": {lanes["video"], 3}}
	for durable, w := range want {
		c, err := js.Consumer(ctx, "APP_MEDIA_REQUESTS", durable)
		if err != nil {
			t.Fatalf("after streams apply, consumer %s: %v", durable, err)
		}
		cfg := c.CachedInfo().Config
		filters := cfg.FilterSubjects
		if cfg.FilterSubject != "" {
			filters = []string{cfg.FilterSubject}
		}
		if filters[0] != w.subject || cfg.MaxAckPending != w.ackPending {
			t.Errorf("consumer %s filters %q with max ack pending %d; want %q first and %d", durable, filters, cfg.MaxAckPending, w.subject, w.ackPending)
		}
	}
}

// Issue 31 item 10: `streams apply` creates the key-value buckets too (settled requests, verdicts, and
// the reuse memory with --reuse-ttl and --reuse-max-bytes), so a worker run with --provision=false
// finds them and no job has to create one.
func TestStreamsApplyCreatesTheBuckets(t *testing.T) {
	srv := testenv.StartNATS(t)
	code, out, errs := run(t, "streams", "apply", "--nats-url", srv.ClientURL(), "--reuse-ttl", "3h", "--reuse-max-bytes", "2MiB")
	if code != exitOK {
		t.Fatalf("streams apply: exit %d: %s", code, errs)
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, bucket := range []string{"APP_MEDIA_SETTLED", "APP_MEDIA_VERDICTS", "APP_MEDIA_REUSE"} {
		if !strings.Contains(out, bucket) {
			t.Errorf("streams apply's report lacks %s: %s", bucket, out)
		}
		kv, err := js.KeyValue(ctx, bucket)
		if err != nil {
			t.Errorf("after streams apply, bucket %s: %v", bucket, err)
			continue
		}
		st, err := kv.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if bucket == "APP_MEDIA_REUSE" {
			if cfg := st.(*jetstream.KeyValueBucketStatus).StreamInfo().Config; cfg.MaxAge != 3*time.Hour || cfg.MaxBytes != 2<<20 {
				t.Errorf("reuse bucket: TTL %s, max bytes %d; want --reuse-ttl 3h and --reuse-max-bytes 2MiB", cfg.MaxAge, cfg.MaxBytes)
			}
		}
	}
	if code, _, errs := run(t, "streams", "apply", "--nats-url", srv.ClientURL(), "--reuse-ttl", "1s"); code != exitUsage || !strings.Contains(errs, "reuse TTL") {
		t.Errorf("a reuse TTL below its minimum: exit %d, %q; want a usage error naming the reuse TTL", code, errs)
	}
}
