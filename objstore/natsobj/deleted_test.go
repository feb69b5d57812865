package natsobj_test

import (
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/objstore"
)

// A bucket deleted while its objects are read (an operator's `nats obj rm`, another tenant's client)
// ends every read within seconds. nats.go re-creates a failed ordered consumer inside Next until it
// succeeds, deaf to the caller's context: a chunk consumer whose stream was gone held its Get, and
// the job reading it, for ever.
//
// Which way a read ends depends on what its client notices first: its next pull answered with an
// error (then the re-creation, which fails) or nothing until Timeout (stream stalled). Three reads,
// each paused at its first write while the bucket is deleted, hung in three of three runs before the
// re-creation was bounded (one read: in two of three).
func TestGetOfABucketDeletedMidReadEnds(t *testing.T) {
	js, s := mediaStore(t) // the default Timeout (10 s): a shorter one calls the stall first
	ctx := t.Context()
	const size = 8 << 20     // 64 chunks, several batches
	pauses := []int{0, 0, 0} // offsets where each read waits for the delete
	readers := make([]*pauseAt, len(pauses))
	done := make(chan error, len(pauses))
	for i, at := range pauses {
		key := fmt.Sprintf("k%d", i)
		if err := s.Put(ctx, "media", key, io.LimitReader(zeros{}, size), size, "application/octet-stream"); err != nil {
			t.Fatal(err)
		}
		readers[i] = &pauseAt{at: at, paused: make(chan struct{}), goOn: make(chan struct{})}
		go func() { _, err := s.Get(ctx, "media", key, readers[i]); done <- err }()
	}
	for _, r := range readers {
		<-r.paused
	}
	if err := js.DeleteObjectStore(ctx, "media"); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	for _, r := range readers {
		close(r.goOn)
	}
	for range readers {
		select {
		case err := <-done:
			took := time.Since(deleted)
			if err == nil || took > 30*time.Second {
				t.Errorf("a Get of a bucket deleted mid-read = %v after %s, want an error within Timeout (10 s) and the re-creation's 7 s", err, took)
			}
			t.Logf("a Get ended %s after the delete: %v (not found: %t)", took.Round(time.Millisecond), err, errors.Is(err, objstore.ErrNotFound))
		case <-time.After(60 * time.Second):
			t.Fatalf("a Get is still running 60 s after its bucket was deleted")
		}
	}
}

// pauseAt holds the write that reaches offset at until goOn is closed.
type pauseAt struct {
	at           int
	paused, goOn chan struct{}
	n            int
}

func (w *pauseAt) Write(p []byte) (int, error) {
	if w.n <= w.at && w.at < w.n+len(p) {
		close(w.paused)
		<-w.goOn
	}
	w.n += len(p)
	return len(p), nil
}
