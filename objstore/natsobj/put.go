package natsobj

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/mediaworker/mediaworker/objstore"
)

// Writing objects: the chunks and the metadata record of the object-store layout (NATS ADR-20),
// published on the Store's own JetStream context.
//
// Why not ObjectStore.Put: it makes a JetStream context per call, whose first async publish starts a
// goroutine (resetPendingAcksOnReconnect) that reads a channel Put's deferred cleanup sets to nil; when
// Put ends before that goroutine first runs (small or failing uploads), it waits forever — about one
// goroutine per 36 jobs, unbounded over weeks (nats.go v1.55.0, jetstream/publish.go). Its purge of a
// failed upload also uses the caller's context, so a cancelled Put leaves its chunks behind, and it
// reuses one chunk buffer for messages a no-responders retry may send again. Here the Store's one
// context publishes (its one such goroutine ends with the connection), failed uploads are purged with
// a live context, and each in-flight chunk has its own buffer. The layout is nats.go's, so its
// ObjectStore.Get, the nats CLI and this package's Get read what Put writes.

const (
	metaSubjectFmt = "$O.%s.M.%s" // bucket, base64url(name)
	chunkSize      = 128 << 10    // nats.go's default object chunk
	putWindow      = 16           // chunks in flight per Put (2 MiB): streams at the link's pace, bounded memory
)

// putObject writes r as bucket/key into the bucket's stream: chunks on a fresh subject, then the
// metadata record (with a subject rollup, replacing the previous version's), then a purge of the
// previous version's chunks. Until the metadata is written, readers see the previous version; a
// failed upload purges the chunks it stored.
func (s *Store) putObject(ctx context.Context, stream jetstream.Stream, bucket string, meta jetstream.ObjectMeta, r io.Reader) (err error) {
	// The previous version, whose chunks go once the new one is in place.
	metaSubj := fmt.Sprintf(metaSubjectFmt, bucket, base64.URLEncoding.EncodeToString([]byte(meta.Name)))
	octx, cancel := s.opContext(ctx)
	var prev *jetstream.ObjectInfo
	last, err := stream.GetLastMsgForSubject(octx, metaSubj)
	cancel()
	switch {
	case err == nil:
		prev = new(jetstream.ObjectInfo)
		if json.Unmarshal(last.Data, prev) != nil {
			prev = nil // unreadable: its chunks cannot be found either
		}
	case errors.Is(err, jetstream.ErrMsgNotFound):
	default:
		return fmt.Errorf("reading the current version's metadata: %w", err)
	}

	id := nuid.Next()
	chunkSubj := fmt.Sprintf(chunkSubjectFmt, bucket, id)
	var inflight [putWindow]jetstream.PubAckFuture
	defer func() {
		if err != nil {
			// With a context of its own: the caller's may be what ended the upload. Chunks still in
			// flight are waited for first, or they would be stored after the purge; one Timeout for
			// them all, not one each: acks lost in a leader change would otherwise hold the failed
			// upload (and a shutdown's drain) 16 Timeouts.
			live := context.WithoutCancel(ctx)
			actx, cancelAcks := context.WithTimeout(live, s.cfg.Timeout)
			for i := range inflight {
				if inflight[i] != nil {
					_ = s.awaitAck(actx, &inflight[i])
				}
			}
			cancelAcks()
			pctx, cancel := context.WithTimeout(live, s.cfg.Timeout)
			defer cancel()
			_ = stream.Purge(pctx, jetstream.WithPurgeSubject(chunkSubj))
		}
	}()

	sum := sha256.New()
	var size uint64
	var chunks uint32
	var bufs [putWindow][]byte
	for i := 0; ; i++ {
		slot := i % putWindow
		if inflight[slot] != nil {
			if err := s.awaitAck(ctx, &inflight[slot]); err != nil {
				return err
			}
		}
		if bufs[slot] == nil {
			bufs[slot] = make([]byte, chunkSize)
		}
		n, rerr := io.ReadFull(r, bufs[slot])
		if rerr != nil && rerr != io.EOF && rerr != io.ErrUnexpectedEOF {
			return rerr
		}
		if n > 0 {
			sum.Write(bufs[slot][:n])
			f, err := s.js.PublishMsgAsync(&nats.Msg{Subject: chunkSubj, Data: bufs[slot][:n]})
			if err != nil {
				return fmt.Errorf("publishing chunk %d: %w", chunks, err)
			}
			inflight[slot] = f
			chunks++
			size += uint64(n)
		}
		if rerr != nil { // EOF
			break
		}
	}
	for i := range inflight {
		if inflight[i] != nil {
			if err := s.awaitAck(ctx, &inflight[i]); err != nil {
				return err
			}
		}
	}

	if meta.Opts == nil {
		meta.Opts = &jetstream.ObjectMetaOptions{}
	}
	meta.Opts.ChunkSize = chunkSize
	info := jetstream.ObjectInfo{ObjectMeta: meta, Bucket: bucket, NUID: id, Size: size, Chunks: chunks,
		Digest: jetstream.GetObjectDigestValue(sum)}
	data, err := json.Marshal(info)
	if err != nil {
		return fmt.Errorf("encoding metadata: %w", err)
	}
	mm := nats.NewMsg(metaSubj)
	mm.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	mm.Data = data
	octx, cancel = s.opContext(ctx)
	_, err = s.js.PublishMsg(octx, mm)
	cancel()
	if err != nil {
		return fmt.Errorf("publishing metadata: %w", err)
	}
	objstore.RecordTag(ctx, tagOf(&info))

	if prev != nil && !prev.Deleted && prev.NUID != "" && prev.NUID != id {
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.Timeout)
		defer cancel()
		// The new version is in place; chunks left here only cost space until the next overwrite.
		_ = stream.Purge(pctx, jetstream.WithPurgeSubject(fmt.Sprintf(chunkSubjectFmt, bucket, prev.NUID)))
	}
	return nil
}

// awaitAck waits for a chunk's acknowledgement, at most Timeout: an ack lost in a leader change must
// not hold the upload for the whole job. It clears *f once the publish is settled either way, so a
// failed upload knows which chunks may still land (and waits for them before purging).
func (s *Store) awaitAck(ctx context.Context, f *jetstream.PubAckFuture) error {
	octx, cancel := s.opContext(ctx)
	defer cancel()
	select {
	case <-(*f).Ok():
		*f = nil
		return nil
	case err := <-(*f).Err():
		*f = nil
		return fmt.Errorf("storing a chunk: %w", err)
	case <-octx.Done():
		if err := ctx.Err(); err != nil {
			return err
		}
		*f = nil // given up on: waiting again would only wait as long again
		return fmt.Errorf("storing a chunk: no acknowledgement within %s: %w", s.cfg.Timeout, octx.Err())
	}
}
