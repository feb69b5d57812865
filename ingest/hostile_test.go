package ingest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/objstore"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

const testRequests = "app.media.optimize.request"

// hostileWorld is an in-process NATS with the request stream, and an Ingester running on it.
type hostileWorld struct {
	t  *testing.T
	js jetstream.JetStream
	in *Ingester
}

func startIngest(t *testing.T, cfg Config, opts Options, setup func(jetstream.JetStream)) *hostileWorld {
	t.Helper()
	srv := testenv.StartNATS(t)
	js, err := jetstream.New(testenv.Connect(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "REQ", Subjects: []string{testRequests}}); err != nil {
		t.Fatal(err)
	}
	if setup != nil {
		setup(js)
	}
	cfg.Enabled = true
	opts.App, opts.RequestSubject, opts.Durable, opts.Remember = "app", testRequests, "w", time.Hour
	opts.Log = zerolog.New(zerolog.NewTestWriter(t))
	in, err := New(ctx, js, cfg, opts)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = in.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return &hostileWorld{t: t, js: js, in: in}
}

// waitCount waits (bounded) until the ingester's count of verdict reaches n.
func (w *hostileWorld) waitCount(verdict string, n int64) {
	w.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for w.in.Counts()[verdict] < n {
		if time.Now().After(deadline) {
			w.t.Fatalf("%s stayed %d (want %d) within 20s; counts %v", verdict, w.in.Counts()[verdict], n, w.in.Counts())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// requests are the requests published so far.
func (w *hostileWorld) requests() []string {
	w.t.Helper()
	s, err := w.js.Stream(context.Background(), "REQ")
	if err != nil {
		w.t.Fatal(err)
	}
	var out []string
	info, _ := s.Info(context.Background())
	for seq := uint64(1); seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(context.Background(), seq)
		if err != nil {
			w.t.Fatal(err)
		}
		out = append(out, string(m.Data))
	}
	return out
}

// statStore is a store whose Stat is refused (another tenant's bucket under the worker's credentials)
// and remembers which buckets were asked about.
type statStore struct {
	objstore.Store
	mu      sync.Mutex
	statted []string
	err     error // Stat's answer; nil: "Access Denied." (transient)
}

func (s *statStore) Stat(_ context.Context, bucket, key string) (objstore.Info, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.statted = append(s.statted, bucket+"/"+key)
	if s.err != nil {
		return objstore.Info{}, s.err
	}
	return objstore.Info{}, errors.New("Access Denied.")
}

func (s *statStore) URL(bucket, key string) string { return objstore.ObjectURL("s3://"+bucket, key) }

// versitygw sends the events of every bucket to its one subject, keys as written: an event of a
// bucket no route watches, whose key reads two ways (a '+'), is no business of the worker's. It is
// neither looked up in that bucket (nothing across buckets) nor, when that lookup is refused, sent
// back forever: it is counted unwatched and acknowledged.
func TestIngestUnwatchedBucketIsNotLookedUp(t *testing.T) {
	store := &statStore{}
	w := startIngest(t, Config{Routes: "media/uploads/", Subjects: "s3.events"}, Options{Store: store}, nil)
	ev := strings.NewReplacer("\n", "", `"name":"media"`, `"name":"tenant-b"`, "uploads/u1/my+photo%C3%BC.jpg", "private/a+b.jpg").Replace(awsEvent)
	if _, err := w.js.Publish(context.Background(), "s3.events", []byte(ev)); err != nil {
		t.Fatal(err)
	}
	w.waitCount("unwatched", 1)
	store.mu.Lock()
	defer store.mu.Unlock()
	if len(store.statted) > 0 {
		t.Fatalf("the worker looked up %v, objects of a bucket it does not watch", store.statted)
	}
}

// Whoever may write into one watched object-store bucket may publish any metadata message on its
// subjects. One naming another watched bucket's object, with a fresh NUID, must not make a job of
// that object: the bucket is the one the message was written into, never the record's word.
func TestIngestObjectMetaNamingAnotherBucketIsRefused(t *testing.T) {
	var victim *jetstream.ObjectInfo
	w := startIngest(t, Config{Routes: "tenanta/,tenantb/"}, Options{ObjectStore: true}, func(js jetstream.JetStream) {
		ctx := context.Background()
		for _, b := range []string{"tenanta", "tenantb"} {
			if _, err := js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: b}); err != nil {
				t.Fatal(err)
			}
		}
		os, _ := js.ObjectStore(ctx, "tenantb")
		oi, err := os.PutBytes(ctx, "private/secret.jpg", []byte("tenant b's bytes"))
		if err != nil {
			t.Fatal(err)
		}
		victim = oi
	})
	forged := *victim
	forged.NUID = "FORGEDNUID0000000000000"
	body, _ := json.Marshal(forged)
	subj := "$O.tenanta.M." + base64.URLEncoding.EncodeToString([]byte(forged.Name))
	if _, err := w.js.Publish(context.Background(), subj, body); err != nil {
		t.Fatal(err)
	}
	// A real put into tenant a after it: once it is answered, the forged one was handled.
	osA, _ := w.js.ObjectStore(context.Background(), "tenanta")
	if _, err := osA.PutBytes(context.Background(), "mine.jpg", []byte("a's bytes")); err != nil {
		t.Fatal(err)
	}
	w.waitCount("published", 1)
	for _, r := range w.requests() {
		if strings.Contains(r, `"s3Bucket":"tenantb"`) {
			t.Fatalf("a message written into tenanta made a request of tenantb's object: %s", r)
		}
	}
	if got := w.in.Counts()["malformed"]; got != 1 {
		t.Fatalf("malformed %d, want 1 (the forged notice counted)", got)
	}
}

// A watched record whose key reads two ways, each of which the store refuses for good (a segment
// longer than its file system takes, a name it cannot hold): no lookup can ever succeed, so the event
// is not sent back every 2 seconds forever. It becomes its request, whose job answers what the store
// says.
func TestIngestPermanentlyRefusedLookupIsNoPoison(t *testing.T) {
	store := &statStore{err: fmt.Errorf("%w: KeyTooLongError", objstore.ErrRefused)}
	w := startIngest(t, Config{Routes: "media/uploads/", Subjects: "s3.events"}, Options{Store: store}, nil)
	ev := strings.NewReplacer("\n", "", "uploads/u1/my+photo%C3%BC.jpg", "uploads/"+strings.Repeat("x", 300)+"+a.jpg").Replace(awsEvent)
	if _, err := w.js.Publish(context.Background(), "s3.events", []byte(ev)); err != nil {
		t.Fatal(err)
	}
	w.waitCount("published", 1)
}

// An operator's stream (Config.Stream) may hold days of events from before ingest was turned on:
// as documented, turning it on makes no jobs of uploads made before, only of what arrives after.
func TestIngestOperatorStreamStartsAtNewEvents(t *testing.T) {
	event := func(key string) []byte {
		return []byte(strings.NewReplacer("\n", "", "uploads/u1/my+photo%C3%BC.jpg", key).Replace(awsEvent))
	}
	w := startIngest(t, Config{Routes: "media/uploads/", Stream: "OPS"}, Options{}, func(js jetstream.JetStream) {
		ctx := context.Background()
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "OPS", Subjects: []string{"ops.events"}}); err != nil {
			t.Fatal(err)
		}
		if _, err := js.Publish(ctx, "ops.events", event("uploads/before.jpg")); err != nil {
			t.Fatal(err)
		}
	})
	if _, err := w.js.Publish(context.Background(), "ops.events", event("uploads/after.jpg")); err != nil {
		t.Fatal(err)
	}
	w.waitCount("published", 1)
	reqs := w.requests()
	if len(reqs) != 1 || !strings.Contains(reqs[0], "uploads/after.jpg") {
		t.Fatalf("requests %q, want only the upload made after ingest was turned on", reqs)
	}
}

// On a server whose max_payload was raised (up to 64 MB), a neighbour could publish events far bigger
// than any S3 server sends; the consumer pulls 16 at a time, so the worker would hold 16 of them in
// memory only to refuse each. The worker's own events stream refuses what ingest would not read.
func TestIngestEventsStreamRefusesOversizedEvents(t *testing.T) {
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(),
		NoLog: true, NoSigs: true, MaxPayload: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server did not become ready")
	}
	js, err := jetstream.New(testenv.Connect(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := New(ctx, js, Config{Enabled: true, Routes: "media/uploads/", Subjects: "s3.events"},
		Options{App: "app", RequestSubject: testRequests, Durable: "w", Remember: time.Hour, Log: zerolog.Nop()}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "s3.events", []byte(awsEvent)); err != nil {
		t.Fatalf("an ordinary event: %v", err)
	}
	big := `{"Records":[],"pad":"` + strings.Repeat("x", 4<<20) + `"}`
	if _, err := js.Publish(ctx, "s3.events", []byte(big)); err == nil {
		t.Fatal("the events stream took a 4 MB event, which ingest refuses to read")
	}
}
