package natsobj_test

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"runtime"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mediaworker/mediaworker/internal/testenv"
)

// failAfter returns err after n bytes.
type failAfter struct {
	r   io.Reader
	n   int
	err error
}

func (f *failAfter) Read(p []byte) (int, error) {
	if f.n <= 0 {
		return 0, f.err
	}
	if len(p) > f.n {
		p = p[:f.n]
	}
	n, err := f.r.Read(p)
	f.n -= n
	return n, err
}

// Puts of every shape — empty, tiny, one chunk exactly, several chunks, failing mid-way, shorter than
// announced — leave the goroutine count where it was. nats.go's ObjectStore.Put parked one goroutine
// per ~36 such uploads; over a worker's weeks that is unbounded.
func TestPutGoroutinesStayFlat(t *testing.T) {
	_, s := mediaStore(t)
	ctx := t.Context()
	payload := make([]byte, 300<<10)
	_, _ = rand.Read(payload)
	put := func(i int) error {
		key := fmt.Sprintf("k/%d", i%7)
		switch i % 6 {
		case 0:
			return s.Put(ctx, "media", key, bytes.NewReader(nil), 0, "image/webp")
		case 1:
			return s.Put(ctx, "media", key, bytes.NewReader(payload[:17]), 17, "image/webp")
		case 2:
			return s.Put(ctx, "media", key, bytes.NewReader(payload[:128<<10]), 128<<10, "image/webp")
		case 3:
			return s.Put(ctx, "media", key, bytes.NewReader(payload), int64(len(payload)), "video/mp4")
		case 4: // the reader fails: nothing of it may remain
			if err := s.Put(ctx, "media", key, &failAfter{r: bytes.NewReader(payload), n: 200 << 10, err: errors.New("disk read error")}, -1, ""); err == nil {
				return errors.New("a failing reader's Put succeeded")
			}
			return nil
		default: // shorter than announced
			if err := s.Put(ctx, "media", key, bytes.NewReader(payload[:50]), 51, ""); err == nil {
				return errors.New("a short body's Put succeeded")
			}
			return nil
		}
	}
	for i := range 12 { // warm up: bucket bound, the connection's one async-publish goroutine started
		if err := put(i); err != nil {
			t.Fatal(err)
		}
	}
	settle := goleak.IgnoreCurrent()
	before := runtime.NumGoroutine()
	const puts = 600
	start := time.Now()
	for i := range puts {
		if err := put(i); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
	}
	elapsed := time.Since(start)
	// goleak retries while goroutines that are finishing still run, so this is not a timing bet.
	if err := goleak.Find(append(testenv.UpstreamLeaks(), settle)...); err != nil {
		t.Fatalf("goroutines left after %d puts (%d before, %d now): %v", puts, before, runtime.NumGoroutine(), err)
	}
	t.Logf("%d puts in %s; goroutines %d before, %d after", puts, elapsed.Round(time.Millisecond), before, runtime.NumGoroutine())
}

// What Put writes is an ordinary object-store object: nats.go's own ObjectStore reads it (data,
// size, chunk count, digest, headers), and an overwrite leaves only the new version's chunks.
func TestPutIsReadByNatsGoObjectStore(t *testing.T) {
	js, s := mediaStore(t)
	ctx := t.Context()
	first := make([]byte, 300<<10+5) // three chunks, the last one short
	_, _ = rand.Read(first)
	if err := s.Put(ctx, "media", "videos/x/clip.mp4", bytes.NewReader(first), int64(len(first)), "video/mp4"); err != nil {
		t.Fatal(err)
	}
	obs, err := js.ObjectStore(ctx, "media")
	if err != nil {
		t.Fatal(err)
	}
	got, err := obs.GetBytes(ctx, "videos/x/clip.mp4")
	if err != nil || !bytes.Equal(got, first) {
		t.Fatalf("nats.go GetBytes = %d bytes (want %d, equal %v), %v", len(got), len(first), bytes.Equal(got, first), err)
	}
	info, err := obs.GetInfo(ctx, "videos/x/clip.mp4")
	if err != nil {
		t.Fatal(err)
	}
	if info.Size != uint64(len(first)) || info.Chunks != 3 || info.Headers.Get("Content-Type") != "video/mp4" || info.Opts == nil || info.Opts.ChunkSize != 128<<10 {
		t.Errorf("nats.go GetInfo = size %d chunks %d headers %v opts %+v", info.Size, info.Chunks, info.Headers, info.Opts)
	}

	second := first[:1000]
	if err := s.Put(ctx, "media", "videos/x/clip.mp4", bytes.NewReader(second), int64(len(second)), "video/mp4"); err != nil {
		t.Fatal(err)
	}
	if got, err := obs.GetBytes(ctx, "videos/x/clip.mp4"); err != nil || !bytes.Equal(got, second) {
		t.Fatalf("after overwrite nats.go GetBytes = %d bytes, %v; want %d", len(got), err, len(second))
	}
	stream, err := js.Stream(ctx, "OBJ_media")
	if err != nil {
		t.Fatal(err)
	}
	if n := streamMsgs(t, stream); n != 2 {
		t.Errorf("after an overwrite the bucket holds %d messages, want 2 (one chunk, one metadata record)", n)
	}
	// And the other way round, through the contract's reader.
	var b bytes.Buffer
	if n, err := s.Get(ctx, "media", "videos/x/clip.mp4", &b); err != nil || n != int64(len(second)) || !bytes.Equal(b.Bytes(), second) {
		t.Fatalf("Get = %d, %v", n, err)
	}
}
