package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/app"
	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/ingest"
	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/job"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/notification"
)

// Sites that still run MinIO: its own NATS notification target, whose payload wraps the records as
// {"EventName","Key","Records"}, feeds ingest the same way. An upload (keys escaped in the record) is
// answered once; the variants the worker writes under the watched prefix start nothing.
func TestIngestMinIOEvents(t *testing.T) {
	clamd := testenv.StartClamd(t)
	srv := testenv.StartNATS(t)
	const topic = "minio.events"
	m := testenv.StartMinIOWith(t, map[string]string{
		"MINIO_NOTIFY_NATS_ENABLE_MW":  "on",
		"MINIO_NOTIFY_NATS_ADDRESS_MW": srv.Addr().String(),
		"MINIO_NOTIFY_NATS_SUBJECT_MW": topic,
	})
	cfg := app.DefaultConfig()
	cfg.NATS.URL = srv.ClientURL()
	cfg.Storage = app.StorageS3
	cfg.S3.Endpoint, cfg.S3.AccessKey, cfg.S3.SecretKey = m.Endpoint, m.AccessKey, m.SecretKey
	cfg.Scanner.Addr = clamd.Addr
	cfg.Pipeline.TmpDir = t.TempDir()
	cfg.HTTPAddr = ""
	cfg.PerLane[job.Image].Slots, cfg.PerLane[job.Video].Slots = 2, 1
	cfg.Ingest = ingest.Config{Enabled: true, Routes: "media/uploads/", Subjects: topic}

	w := &world{t: t, cfg: cfg, subj: contracts.SubjectsFor(cfg.Streams.App), bucket: "media",
		responses: map[string][]contracts.Response{}, viruses: map[string][]contracts.VirusEvent{}}
	w.observe(srv)
	mc, err := minio.New(m.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(m.AccessKey, m.SecretKey, "")})
	if err != nil {
		t.Fatal(err)
	}
	qc := notification.NewConfig(notification.NewArn("minio", "sqs", "", "MW", "nats"))
	qc.AddEvents(notification.ObjectCreatedAll)
	qc.AddFilterPrefix("uploads/")
	var nc notification.Configuration
	nc.AddQueue(qc)
	// MinIO refuses a notification whose target is not online yet (its NATS target connects in the
	// background after start), so a busy machine can get "ARN does not exist" at first: ask again.
	testenv.Eventually(t, 30*time.Second, func() error {
		if err := mc.SetBucketNotification(context.Background(), "media", nc); err != nil {
			return fmt.Errorf("setting MinIO's bucket notification: %w", err)
		}
		return nil
	})
	events, err := w.nc.SubscribeSync(topic)
	if err != nil {
		t.Fatal(err)
	}
	startStoppable(t, cfg)

	media := t.TempDir()
	w.upload(testenv.MakeJPEG(t, media, 800, 600), "uploads/u1/a b+c.jpg")
	w.upload(testenv.MakeJPEG(t, media, 320, 240), "elsewhere/x.jpg")
	var r contracts.Response
	testenv.Eventually(t, 2*time.Minute, func() error {
		w.mu.Lock()
		defer w.mu.Unlock()
		if len(w.responses) != 1 {
			return fmt.Errorf("%d uploads answered, want 1", len(w.responses))
		}
		for _, rs := range w.responses {
			r = rs[0]
		}
		return nil
	})
	if src := r.Metadata.Source; !r.Success || src == nil || src.Key != "uploads/u1/a b+c.jpg" || src.Kind != contracts.SourceS3Event {
		t.Fatalf("answer %+v", r)
	}
	// What MinIO sent is its wrapper, not AWS's bare Records.
	m1, err := events.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var wrapper struct {
		EventName, Key string
		Records        []json.RawMessage
	}
	if err := json.Unmarshal(m1.Data, &wrapper); err != nil || wrapper.EventName == "" || wrapper.Key == "" || len(wrapper.Records) != 1 {
		t.Fatalf("MinIO's event is not its documented wrapper: %v\n%s", err, m1.Data)
	}
	// The barrier: the next upload's answer comes after the first job's variants' events were seen.
	w.upload(testenv.MakeJPEG(t, media, 320, 240), "uploads/u2/b.jpg")
	testenv.Eventually(t, 2*time.Minute, func() error {
		w.mu.Lock()
		defer w.mu.Unlock()
		for id, rs := range w.responses {
			if len(rs) != 1 {
				t.Fatalf("%d answers for %s", len(rs), id)
			}
		}
		switch n := len(w.responses); {
		case n > 2:
			t.Fatalf("%d uploads answered, want 2: a variant or an upload outside the prefix started a job", n)
		case n < 2:
			return fmt.Errorf("%d uploads answered, want 2", n)
		}
		return nil
	})
}
