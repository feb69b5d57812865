package jetstream_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/internal/testenv"
	natsjs "github.com/mediaworker/mediaworker/jetstream"
	"github.com/mediaworker/mediaworker/pipeline"
	"github.com/nats-io/nats.go"
)

// The client `submit` and the benchmarks use: a request submitted twice (a retried publish) is stored
// once; the listener hears, in order, the virus event before its response, and only the kinds it
// asked for; Follow reads the stored answers back.
func TestClientSubmitListenFollow(t *testing.T) {
	r := newRig(t, nil, func(ctx context.Context, req contracts.Request, call int) pipeline.Outcome {
		if strings.HasSuffix(req.S3Key, "eicar.jpg") {
			ev := &contracts.VirusEvent{MediaID: req.MediaID, S3Key: req.S3Key, S3Bucket: req.S3Bucket,
				VirusName: "Eicar-Test-Signature", ActionTaken: "deleted", DetectedAt: time.Now().UTC().Format(time.RFC3339)}
			return pipeline.Outcome{Kind: pipeline.Infected, Virus: ev, MediaKind: pipeline.Image,
				Response: contracts.Response{MediaID: req.MediaID, OriginalURL: req.MediaURL, Error: "virus detected: " + ev.VirusName}}
		}
		return success(req)
	})
	r.start()
	client := natsjs.NewClient(r.js, r.cfg)

	var mu sync.Mutex
	var heard, responsesOnly []natsjs.AnswerKind
	stop, err := client.Listen(func(a natsjs.Answer) { mu.Lock(); heard = append(heard, a.Kind); mu.Unlock() })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	stopResponses, err := client.Listen(func(a natsjs.Answer) {
		mu.Lock()
		responsesOnly = append(responsesOnly, a.Kind)
		mu.Unlock()
	}, natsjs.AnswerResponse)
	if err != nil {
		t.Fatal(err)
	}
	defer stopResponses()

	photo := testenv.NewRequest("media", "u/a.jpg")
	for range 2 {
		if err := client.Submit(context.Background(), photo); err != nil {
			t.Fatal(err)
		}
	}
	r.awaitResponses(photo.MediaID, 1)
	infected := testenv.NewRequest("media", "u/eicar.jpg")
	if err := client.Submit(context.Background(), infected); err != nil {
		t.Fatal(err)
	}
	r.awaitResponses(infected.MediaID, 1)
	r.awaitEmptyWorkQueue()
	if n := r.proc.callsOf(photo.MediaID); n != 1 {
		t.Errorf("a request submitted twice ran %d times, want once", n)
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		want := []natsjs.AnswerKind{natsjs.AnswerResponse, natsjs.AnswerVirus, natsjs.AnswerResponse}
		only := []natsjs.AnswerKind{natsjs.AnswerResponse, natsjs.AnswerResponse}
		if fmt.Sprint(heard) != fmt.Sprint(want) || fmt.Sprint(responsesOnly) != fmt.Sprint(only) {
			return fmt.Errorf("heard %v (want %v); the responses-only listener heard %v (want %v)", heard, want, responsesOnly, only)
		}
		return nil
	})

	// Follow reads the stored answers back: the photo's response, the virus event, its response.
	ctx, cancel := context.WithCancel(context.Background())
	var stored []string
	begun := 0
	done := make(chan error, 1)
	go func() {
		done <- client.Follow(ctx, time.Now().Add(-time.Hour), 100, func() { begun++ }, func(subject string, _ nats.Header, data []byte, at time.Time) {
			var probe struct{ MediaID string }
			_ = json.Unmarshal(data, &probe)
			mu.Lock()
			stored = append(stored, subject+" "+probe.MediaID)
			mu.Unlock()
		})
	}()
	testenv.Eventually(t, 10*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(stored) != 3 {
			return fmt.Errorf("followed %v", stored)
		}
		return nil
	})
	cancel()
	if err := <-done; err != nil || begun != 1 {
		t.Fatalf("Follow ended with %v after %d beginnings", err, begun)
	}
	subj := r.cfg.Subjects()
	want := []string{subj.Response + " " + photo.MediaID, subj.Virus + " " + infected.MediaID, subj.Response + " " + infected.MediaID}
	if fmt.Sprint(stored) != fmt.Sprint(want) {
		t.Errorf("followed %v, want %v", stored, want)
	}
}

// A client of an app whose streams were never provisioned says what to run.
func TestClientSubmitWithoutStreamsNamesTheFix(t *testing.T) {
	r := newRig(t, nil, nil)
	cfg := r.cfg
	cfg.App = "other"
	err := natsjs.NewClient(r.js, cfg).Submit(context.Background(), testenv.NewRequest("media", "u/a.jpg"))
	if err == nil || !strings.Contains(err.Error(), "mediaworker streams apply") {
		t.Fatalf("submit without streams: %v", err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("submit without streams waited for its timeout: %v", err)
	}
}
