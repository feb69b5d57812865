package natsobj_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/objstore"
	"github.com/mediaworker/mediaworker/objstore/natsobj"
	"github.com/mediaworker/mediaworker/objstore/storetest"
)

func newStore(t *testing.T, js jetstream.JetStream, cfg natsobj.Config) *natsobj.Store {
	t.Helper()
	s, err := natsobj.New(js, cfg)
	if err != nil {
		t.Fatalf("natsobj.New: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func newJetStream(t *testing.T) jetstream.JetStream {
	t.Helper()
	nc := testenv.Connect(t, testenv.StartNATS(t))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

func TestContract(t *testing.T) {
	js := newJetStream(t)
	storetest.Run(t, func(t *testing.T) objstore.Store { return newStore(t, js, natsobj.DefaultConfig()) })
}

func TestURL(t *testing.T) {
	s := newStore(t, newJetStream(t), natsobj.Config{})
	if got, want := s.URL("media", "a dir/ü.jpg"), "nats://objectstore/media/a%20dir/%C3%BC.jpg"; got != want {
		t.Errorf("URL = %q, want %q", got, want)
	}
	s = newStore(t, newJetStream(t), natsobj.Config{BaseURL: "https://media.example.com/"})
	if got, want := s.URL("media", "k.webp"), "https://media.example.com/media/k.webp"; got != want {
		t.Errorf("URL = %q, want %q", got, want)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := natsobj.DefaultConfig().Validate(); err != nil {
		t.Fatalf("DefaultConfig is invalid: %v", err)
	}
	js := newJetStream(t)
	for name, cfg := range map[string]natsobj.Config{
		"replicas": {Replicas: 7},
		"storage":  {Storage: 9},
		"base URL": {BaseURL: "objectstore"},
		"timeout":  {Timeout: -1},
	} {
		if _, err := natsobj.New(js, cfg); err == nil {
			t.Errorf("%s: New accepted %+v", name, cfg)
		}
	}
	if _, err := natsobj.New(nil, natsobj.DefaultConfig()); err == nil {
		t.Error("New accepted a nil JetStream")
	}
}

// TestBucketIsObjectStore checks that buckets are ordinary object stores: what the Store writes, the
// nats CLI and other clients read, and the other way round.
func TestBucketIsObjectStore(t *testing.T) {
	js := newJetStream(t)
	s := newStore(t, js, natsobj.Config{Storage: jetstream.MemoryStorage})
	ctx := t.Context()
	if err := s.EnsureBucket(ctx, "media"); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "media", "a/b.c/d e.txt", strings.NewReader("hello"), 5, "text/plain"); err != nil {
		t.Fatal(err)
	}
	obs, err := js.ObjectStore(ctx, "media")
	if err != nil {
		t.Fatal(err)
	}
	st, err := obs.Status(ctx)
	if err != nil || st.Storage() != jetstream.MemoryStorage {
		t.Errorf("bucket status = %v, %v; want memory storage", st, err)
	}
	got, err := obs.GetString(ctx, "a/b.c/d e.txt")
	if err != nil || got != "hello" {
		t.Errorf("object store Get = %q, %v", got, err)
	}
	if _, err := obs.PutString(ctx, "from/cli.txt", "written elsewhere"); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if _, err := s.Get(ctx, "media", "from/cli.txt", &b); err != nil || b.String() != "written elsewhere" {
		t.Errorf("Get of an object written by another client = %q, %v", b.String(), err)
	}
	info, err := s.Stat(ctx, "media", "from/cli.txt")
	if err != nil || info.ContentType != "application/octet-stream" {
		t.Errorf("Stat without a content type = %+v, %v", info, err)
	}
}

// TestBucketDeletedBehindOurBack checks that a cached bucket handle does not outlive its bucket.
func TestBucketDeletedBehindOurBack(t *testing.T) {
	js := newJetStream(t)
	s := newStore(t, js, natsobj.DefaultConfig())
	ctx := t.Context()
	if err := s.EnsureBucket(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "gone", "k", strings.NewReader("v"), 1, "text/plain"); err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteObjectStore(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Stat(ctx, "gone", "k"); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("Stat in a deleted bucket = %v, want ErrNotFound", err)
	}
	if err := s.Put(ctx, "gone", "k", strings.NewReader("v"), 1, "text/plain"); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("Put in a deleted bucket = %v, want ErrNotFound", err)
	}
	if err := s.EnsureBucket(ctx, "gone"); err != nil {
		t.Fatalf("EnsureBucket after deletion: %v", err)
	}
	if err := s.Put(ctx, "gone", "k", strings.NewReader("v"), 1, "text/plain"); err != nil {
		t.Errorf("Put after re-creating the bucket: %v", err)
	}

	// EnsureBucket right after a deletion, with the handle still cached, creates the bucket again.
	if err := js.DeleteObjectStore(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	if err := s.EnsureBucket(ctx, "gone"); err != nil {
		t.Fatalf("EnsureBucket after deletion: %v", err)
	}
	if _, err := js.ObjectStore(ctx, "gone"); err != nil {
		t.Errorf("bucket not re-created: %v", err)
	}

	// Put and Get straight onto a cached handle of a deleted bucket.
	if err := s.Put(ctx, "gone", "k", strings.NewReader("v"), 1, "text/plain"); err != nil {
		t.Fatalf("Put after re-creating the bucket: %v", err)
	}
	if err := js.DeleteObjectStore(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "gone", "k", strings.NewReader("v"), 1, "text/plain"); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("Put via a stale handle = %v, want ErrNotFound", err)
	}
	if err := s.EnsureBucket(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "gone", "k", strings.NewReader("v"), 1, "text/plain"); err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteObjectStore(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "gone", "k", io.Discard); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("Get via a stale handle = %v, want ErrNotFound", err)
	}
}

func TestInvalidBucketName(t *testing.T) {
	s := newStore(t, newJetStream(t), natsobj.DefaultConfig())
	err := s.EnsureBucket(t.Context(), "my.bucket")
	if !errors.Is(err, objstore.ErrInvalidName) || !strings.Contains(err.Error(), "letters, digits") {
		t.Errorf("EnsureBucket(my.bucket) = %v, want a clear ErrInvalidName", err)
	}
	// A name the contract takes (S3's rules allow dots) but the object store cannot hold: a request
	// naming it fails for good at its first lookup instead of being retried.
	_, err = s.Stat(t.Context(), "my.bucket", "u/p.jpg")
	if !errors.Is(err, objstore.ErrInvalidName) || !objstore.IsPermanent(err) {
		t.Errorf("Stat in my.bucket = %v, want a permanent ErrInvalidName", err)
	}
}

// TestCancelledPutLeavesNoChunks checks that an upload abandoned mid-way (a job killed at drain)
// does not leave its chunks in the bucket's stream for good.
func TestCancelledPutLeavesNoChunks(t *testing.T) {
	js, s := mediaStore(t)
	ctx := t.Context()
	if err := s.Put(ctx, "media", "kept", strings.NewReader("v"), 1, "text/plain"); err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(ctx, "OBJ_media")
	if err != nil {
		t.Fatal(err)
	}
	before := streamMsgs(t, stream)

	const size = 8 << 20
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r := &cancelAfter{r: io.LimitReader(zeros{}, size), after: 2 << 20, cancel: cancel}
	if err := s.Put(pctx, "media", "abandoned", r, size, "video/mp4"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Put cancelled mid-way = %v, want context.Canceled", err)
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		if n := streamMsgs(t, stream); n != before {
			return fmt.Errorf("stream holds %d messages, want %d", n, before)
		}
		return nil
	})
	if _, err := s.Stat(ctx, "media", "abandoned"); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("Stat of the abandoned object = %v, want ErrNotFound", err)
	}
}

// TestGetCleansUp checks that Get leaves neither consumers on the server nor goroutines behind.
func TestGetCleansUp(t *testing.T) {
	js, s := mediaStore(t)
	ctx := t.Context()
	const size = 1 << 20
	if err := s.Put(ctx, "media", "k", io.LimitReader(zeros{}, size), size, "application/octet-stream"); err != nil {
		t.Fatal(err)
	}
	ignore := goleak.IgnoreCurrent()
	for range 5 {
		if n, err := s.Get(ctx, "media", "k", io.Discard); err != nil || n != size {
			t.Fatalf("Get = %d, %v", n, err)
		}
	}
	stream, err := js.Stream(ctx, "OBJ_media")
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Consumers != 0 {
		t.Errorf("%d consumers left on the bucket's stream", info.State.Consumers)
	}
	goleak.VerifyNone(t, append(testenv.UpstreamLeaks(), ignore)...)
}

func streamMsgs(t *testing.T, stream jetstream.Stream) uint64 {
	t.Helper()
	info, err := stream.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// cancelAfter cancels its context once after bytes have been read, as a caller abandoning a job does.
type cancelAfter struct {
	r      io.Reader
	after  int64
	n      int64
	cancel context.CancelFunc
}

func (c *cancelAfter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if c.n >= c.after {
		c.cancel()
	}
	return n, err
}

// TestSlowWriterOutlivesClientTimeout: the object store's own Get gives up after the client's default
// timeout when the caller set no deadline, however healthy the transfer; a large video written to a
// slow disk must still arrive. The client timeout is made tiny so the test stays fast.
func TestSlowWriterOutlivesClientTimeout(t *testing.T) {
	nc := testenv.Connect(t, testenv.StartNATS(t))
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	s := newStore(t, js, natsobj.DefaultConfig())
	ctx := context.Background() // no deadline, as a caller relying on its own job timeout
	if err := s.EnsureBucket(ctx, "media"); err != nil {
		t.Fatal(err)
	}
	const size = 2 << 20 // 16 chunks
	if err := s.Put(ctx, "media", "k", io.LimitReader(zeros{}, size), size, "video/mp4"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	n, err := s.Get(ctx, "media", "k", slowWriter{delay: 25 * time.Millisecond})
	if err != nil || n != size {
		t.Fatalf("Get with a slow writer = %d, %v (after %s)", n, err, time.Since(start))
	}
	if took := time.Since(start); took < 200*time.Millisecond {
		t.Fatalf("the writer was not slow (%s); the test proves nothing", took)
	}
}

// slowWriter stands for a slow disk.
type slowWriter struct{ delay time.Duration }

func (w slowWriter) Write(p []byte) (int, error) {
	time.Sleep(w.delay)
	return len(p), nil
}

// TestOutage checks what readiness and the pipeline see when NATS goes away: transient errors (not
// ErrNotFound) within the caller's deadline.
func TestOutage(t *testing.T) {
	srv := testenv.StartNATS(t)
	js, err := jetstream.New(testenv.Connect(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	s := newStore(t, js, natsobj.DefaultConfig())
	ctx := t.Context()
	if err := s.EnsureBucket(ctx, "media"); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "media", "k", strings.NewReader("v"), 1, "text/plain"); err != nil {
		t.Fatal(err)
	}

	srv.Shutdown()
	srv.WaitForShutdown()
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	start := time.Now()
	if err := s.Ping(short); err == nil {
		t.Error("Ping succeeded with NATS down")
	}
	if _, err := s.Stat(short, "media", "k"); err == nil || objstore.IsPermanent(err) {
		t.Errorf("Stat with NATS down = %v, want a transient error", err)
	}
	if _, err := s.Get(short, "media", "k", io.Discard); err == nil || objstore.IsPermanent(err) {
		t.Errorf("Get with NATS down = %v, want a transient error", err)
	}
	if err := s.Put(short, "media", "k2", strings.NewReader("v"), 1, "text/plain"); err == nil || objstore.IsPermanent(err) {
		t.Errorf("Put with NATS down = %v, want a transient error", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("calls with NATS down took %s, past the caller's deadline", took)
	}
}

// mediaStore is a store on a fresh in-process JetStream server with the bucket "media" in place.
func mediaStore(t *testing.T) (jetstream.JetStream, *natsobj.Store) {
	t.Helper()
	js := newJetStream(t)
	s := newStore(t, js, natsobj.DefaultConfig())
	if err := s.EnsureBucket(t.Context(), "media"); err != nil {
		t.Fatal(err)
	}
	return js, s
}

// TestGetChecksWhatItReads: whether an object is read with one direct get (one chunk) or through a
// consumer (several), chunk data that does not match the recorded digest, or that is gone, is an
// error, never a silent short or wrong read.
func TestGetChecksWhatItReads(t *testing.T) {
	js, s := mediaStore(t)
	ctx := t.Context()
	stream, err := js.Stream(ctx, "OBJ_media")
	if err != nil {
		t.Fatal(err)
	}
	for _, size := range []int{1000, 300 << 10} { // one chunk; three chunks of 128 KiB
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			key := fmt.Sprintf("k%d", size)
			data := bytes.Repeat([]byte("x"), size)
			if err := s.Put(ctx, "media", key, bytes.NewReader(data), int64(size), "text/plain"); err != nil {
				t.Fatal(err)
			}
			var got bytes.Buffer
			if n, err := s.Get(ctx, "media", key, &got); err != nil || n != int64(size) || !bytes.Equal(got.Bytes(), data) {
				t.Fatalf("Get = %d, %v (same bytes: %v)", n, err, bytes.Equal(got.Bytes(), data))
			}
			// Find the chunk subject from the last chunk message and replace that message's data.
			last, err := stream.GetLastMsgForSubject(ctx, "$O.media.C.>")
			if err != nil {
				t.Fatal(err)
			}
			tampered := bytes.Repeat([]byte("y"), len(last.Data))
			if _, err := js.Publish(ctx, last.Subject, tampered); err != nil {
				t.Fatal(err)
			}
			if err := stream.DeleteMsg(ctx, last.Sequence); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Get(ctx, "media", key, io.Discard); err == nil || !strings.Contains(err.Error(), "digest") {
				t.Errorf("Get of tampered data: %v, want a digest error", err)
			}
			if err := stream.Purge(ctx, jetstream.WithPurgeSubject(last.Subject)); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Get(ctx, "media", key, io.Discard); err == nil {
				t.Error("Get of an object whose data is gone succeeded")
			} else {
				t.Logf("data gone: %v", err)
			}
		})
	}
}
