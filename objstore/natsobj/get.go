package natsobj

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mediaworker/mediaworker/objstore"
)

// Reading objects: chunk by chunk through a consumer, or with one direct get when there is one chunk.

// reader is a Store's reading side: whole objects here, ranges in getrange.go. It shares the Store's
// bound buckets, and reads every version through them without keeping state of its own.
type reader struct{ *buckets }

// Get streams the object's chunks into w as they arrive.
//
// It reads the chunks with its own ordered consumer instead of ObjectStore.Get, which caps a whole
// transfer at the client's default timeout (5 s) when ctx has no deadline, reacts to cancellation
// only between chunks or after that timeout, and uses the legacy JetStreamContext. Here ctx ends the
// transfer at once, a stream that stalls for Timeout fails, and the size and SHA-256 digest recorded
// by Put are checked at the end.
func (s reader) Get(ctx context.Context, bucket, key string, w io.Writer) (int64, error) {
	n, err := s.get(ctx, bucket, key, w)
	if err != nil {
		return n, fmt.Errorf("getting %s/%s: %w", bucket, key, err)
	}
	return n, nil
}

// GetStatted is Get of the version info (from Stat) describes, read without looking the object up
// again: a one-chunk object is then a single direct get. If that version is gone (overwritten or
// deleted since the Stat) it reads the object as Get does, so a caller sees what it would have seen
// without the shortcut.
func (s reader) GetStatted(ctx context.Context, info objstore.Info, w io.Writer) (int64, error) {
	oi, ok := info.Sys.(*jetstream.ObjectInfo)
	if !ok || oi.Bucket != info.Bucket || oi.Name != info.Key {
		return s.Get(ctx, info.Bucket, info.Key, w)
	}
	n, err := s.read(ctx, oi, w)
	if errors.Is(err, errGone) && n == 0 {
		return s.Get(ctx, info.Bucket, info.Key, w)
	}
	if err != nil {
		return n, fmt.Errorf("getting %s/%s: %w", info.Bucket, info.Key, err)
	}
	return n, nil
}

// orderedResetAttempts bounds how often a chunk consumer is re-created within one read (see read).
const orderedResetAttempts = 4

// errGone says the chunks of the version being read are no longer in the stream.
var errGone = errors.New("object data is gone (overwritten or deleted meanwhile)")

func (s reader) get(ctx context.Context, bucket, key string, w io.Writer) (int64, error) {
	octx, cancel := s.opContext(ctx)
	info, err := s.info(octx, bucket, key)
	cancel()
	if err != nil {
		return 0, err
	}
	return s.read(ctx, info, w)
}

// read streams the chunks of the version info describes into w and checks them against its size and
// digest.
func (s reader) read(ctx context.Context, info *jetstream.ObjectInfo, w io.Writer) (int64, error) {
	bucket := info.Bucket
	want, err := jetstream.DecodeObjectDigest(info.Digest)
	if err != nil {
		return 0, fmt.Errorf("reading digest %q: %w", info.Digest, err)
	}
	sum := sha256.New()
	if info.Size == 0 {
		return 0, checkDigest(sum.Sum(nil), want)
	}

	chunks := fmt.Sprintf(chunkSubjectFmt, bucket, info.NUID)
	if info.Chunks == 1 {
		return s.getOneChunk(ctx, bucket, chunks, info.Size, want, w)
	}
	stream := streamPrefix + bucket
	octx, cancel := s.opContext(ctx)
	cons, err := s.js.OrderedConsumer(octx, stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{chunks},
		// A backstop only: the consumer is deleted below unless ctx ended first.
		InactiveThreshold: time.Minute,
		// nats.go re-creates an ordered consumer that failed (deleted, heartbeats missed, a reconnect)
		// inside Next, by default until it succeeds and deaf to Next's context: a bucket deleted
		// mid-read held the Get, and its job, for ever. Four attempts span 7 s of backoff, enough to
		// ride out a server restart; past them the Get fails and the job is retried.
		MaxResetAttempts: orderedResetAttempts,
	})
	cancel()
	if err != nil {
		return 0, fmt.Errorf("creating chunk consumer: %w", err)
	}
	defer s.deleteConsumer(ctx, stream, cons)
	if ci := cons.CachedInfo(); ci != nil && ci.NumPending == 0 {
		return 0, errGone
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(getBatch))
	if err != nil {
		return 0, fmt.Errorf("reading chunks: %w", err)
	}
	defer it.Stop()

	var n int64
	size := int64(info.Size)
	for n < size {
		msg, err := s.next(ctx, it)
		if err != nil {
			return n, s.mapErr(bucket, err) // a bucket deleted meanwhile: not found
		}
		data := msg.Data()
		if n+int64(len(data)) > size {
			return n, fmt.Errorf("chunks hold more than the recorded %d bytes", size)
		}
		sum.Write(data)
		m, err := w.Write(data)
		n += int64(m)
		if err != nil {
			return n, err
		}
		if md, err := msg.Metadata(); err == nil && md.NumPending == 0 && n < size {
			return n, fmt.Errorf("object data ends after %d of %d bytes (overwritten or deleted meanwhile)", n, size)
		}
	}
	return n, checkDigest(sum.Sum(nil), want)
}

// getOneChunk reads an object stored in a single chunk (up to 128 KiB: thumbnails, small photos,
// the test and benchmark files) with one direct get of its chunk subject, instead of creating and
// deleting a consumer: a third of the JetStream API calls of a small Get, and none that changes
// server state (in a cluster, consumer creation is a replicated operation).
func (s reader) getOneChunk(ctx context.Context, bucket, subject string, size uint64, want []byte, w io.Writer) (int64, error) {
	octx, cancel := s.opContext(ctx)
	defer cancel()
	var msg *jetstream.RawStreamMsg
	err := s.withStream(octx, bucket, true, func(st jetstream.Stream) (err error) {
		msg, err = st.GetLastMsgForSubject(octx, subject)
		return err
	})
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return 0, errGone
	case err != nil:
		return 0, fmt.Errorf("reading chunk: %w", err)
	case uint64(len(msg.Data)) != size:
		return 0, fmt.Errorf("the object's one chunk holds %d bytes, not the recorded %d", len(msg.Data), size)
	}
	sum := sha256.Sum256(msg.Data)
	if err := checkDigest(sum[:], want); err != nil {
		return 0, err
	}
	n, err := w.Write(msg.Data)
	return int64(n), err
}

// next waits for the next chunk, at most Timeout, and reports ctx's own error when ctx ended.
func (s reader) next(ctx context.Context, it jetstream.MessagesContext) (jetstream.Msg, error) {
	wctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	msg, err := it.Next(jetstream.NextContext(wctx))
	if err == nil {
		return msg, nil
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if wctx.Err() != nil {
		return nil, fmt.Errorf("no data for %s: stream stalled", s.cfg.Timeout)
	}
	return nil, fmt.Errorf("reading chunks: %w", err)
}

// deleteConsumer removes the ephemeral chunk consumer now rather than after its inactive threshold.
// It is skipped when ctx ended: a cancelled Get returns at once, and the threshold cleans up.
func (s reader) deleteConsumer(ctx context.Context, stream string, cons jetstream.Consumer) {
	ci := cons.CachedInfo()
	if ctx.Err() != nil || ci == nil {
		return
	}
	dctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	_ = s.js.DeleteConsumer(dctx, stream, ci.Name)
}

func checkDigest(got, want []byte) error {
	if string(got) != string(want) {
		return errors.New("object data does not match its SHA-256 digest")
	}
	return nil
}
