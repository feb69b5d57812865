package faults

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/internal/testenv"
	natsjs "github.com/mediaworker/mediaworker/jetstream"
	"github.com/mediaworker/mediaworker/job"
	"github.com/nats-io/nats.go/jetstream"
)

// Issue 12 item 6, against the built binary: requests queued by the previous version are processed
// after an upgrade. The NATS holds the previous layout (the requests stream with the request subject
// only, one durable "mediaworker" on it, no lanes) with a photo and a clip queued, and one more held
// unacked by a worker that died. The new binary provisions over that layout in place and answers
// every one, once.
func TestUpgradeProcessesWhatThePreviousVersionQueued(t *testing.T) {
	clamd := testenv.StartClamd(t)
	srv := testenv.StartNATS(t)
	l := newLedger(t, srv.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// The previous version's layout: the same streams, but the requests stream holds only the request
	// subject and the advisories only its one durable's; one consumer, no lanes.
	for i, sc := range streams.StreamConfigs() {
		switch i {
		case 0:
			sc.Subjects = []string{streams.Subjects().Request}
		case 3:
			sc.Subjects = []string{fmt.Sprintf("$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.%s.%s", streams.RequestsStream(), streams.Durable)}
		}
		if _, err := l.js.CreateStream(ctx, sc); err != nil {
			t.Fatalf("creating the previous layout's stream %s: %v", sc.Name, err)
		}
	}
	old, err := l.js.CreateConsumer(ctx, streams.RequestsStream(), jetstream.ConsumerConfig{Durable: streams.Durable,
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: 5 * time.Second, MaxDeliver: 10, MaxAckPending: 64,
		FilterSubject: streams.Subjects().Request, DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, l, nil, 1)
	photo := testenv.MakeJPEG(t, t.TempDir(), 640, 480)
	ids := []string{c.submit(photo, "held/photo.jpg")}
	// The previous version's worker took the first request and died with it.
	if _, err := old.Next(jetstream.FetchMaxWait(5 * time.Second)); err != nil {
		t.Fatalf("the previous version's pull: %v", err)
	}
	ids = append(ids, c.submit(photo, "queued/photo.jpg"), c.submit(videoFile(t), "queued/clip.mov"))

	// The new version starts on that NATS (it provisions, as `run` does by default) and runs.
	startWorker(t, "new", workerOpts{natsURL: srv.ClientURL(), clamd: clamd})
	l.await(ids, 2*time.Minute)
	expectSuccess(t, l, ids)
	l.awaitEmptyQueue(30 * time.Second)
	for _, id := range ids {
		if n := l.count(id); n != 1 {
			t.Errorf("%s answered %d times, want once", id, n)
		}
	}
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, lane := range []string{"image", "video"} {
		if _, err := l.js.Consumer(ctx, streams.RequestsStream(), streams.Durable+"-"+lane); err != nil {
			t.Errorf("after the upgrade, the %s lane's consumer: %v", lane, err)
		}
	}
}

// The documents kind came with a lane of its own, which only recipes that ask for documents turn on.
// A site that provisions its streams by hand (`--provision=false`) and names no such recipe has no
// consumer for that lane after the upgrade, and its worker must start and answer as before.
func TestWorkerWithoutDocumentsStartsOnStreamsProvisionedBeforeThem(t *testing.T) {
	clamd := testenv.StartClamd(t)
	srv := testenv.StartNATS(t)
	l := newLedger(t, srv.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := natsjs.Provision(ctx, l.js, streams); err != nil {
		t.Fatal(err)
	}
	durable := streams.Lane(job.Document).Durable()
	if err := l.js.DeleteConsumer(ctx, streams.RequestsStream(), durable); err != nil {
		t.Fatalf("deleting %s, which the previous version never made: %v", durable, err)
	}
	startWorker(t, "by-hand", workerOpts{natsURL: srv.ClientURL(), clamd: clamd, args: []string{"--provision=false"}})
	c := newClient(t, l, nil, 1)
	ids := []string{c.submit(testenv.MakeJPEG(t, t.TempDir(), 640, 480), "by-hand/photo.jpg")}
	l.await(ids, time.Minute)
	expectSuccess(t, l, ids)
}
