package natsobj_test

import (
	"io"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/objstore/natsobj"
)

// A Put whose chunk acknowledgements never come (a leader change that lost them, a store stuck on
// fsync) fails, and its clean-up gives up on the chunks still in flight within one Timeout in all,
// not one Timeout each: with 16 in flight and the default 10 s, the job, its slot and a shutdown's
// drain waited 170 s for an upload already known to have failed.
func TestPutWithoutAcksGivesUpOnItsChunksTogether(t *testing.T) {
	js := newJetStream(t)
	const timeout = 300 * time.Millisecond
	s := newStore(t, js, natsobj.Config{Timeout: timeout})
	ctx := t.Context()
	if err := s.EnsureBucket(ctx, "media"); err != nil {
		t.Fatal(err)
	}
	// The bucket's stream stores what is published and acknowledges nothing.
	stream, err := js.Stream(ctx, "OBJ_media")
	if err != nil {
		t.Fatal(err)
	}
	cfg := stream.CachedInfo().Config
	cfg.NoAck = true
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}

	const size = 3 << 20 // 24 chunks: the window of 16 fills, and the first ack waited for never comes
	start := time.Now()
	err = s.Put(ctx, "media", "k", io.LimitReader(zeros{}, size), size, "video/mp4")
	took := time.Since(start)
	if err == nil {
		t.Fatal("Put succeeded without a single acknowledgement")
	}
	// One Timeout for the ack that failed the upload and one for all those still in flight (the purge
	// of what was stored is quick here); 16 Timeouts before the change. The bound leaves a loaded
	// machine room for six more.
	if took > 8*timeout {
		t.Errorf("Put without acknowledgements took %s to fail, want about 2 Timeouts (%s): %v", took.Round(time.Millisecond), timeout, err)
	}
	t.Logf("Put failed after %s: %v", took.Round(time.Millisecond), err)
}
