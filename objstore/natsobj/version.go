package natsobj

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mediaworker/mediaworker/objstore"
)

// Copying and deleting the version of an object Stat found (objstore.StattedRemover). The object store
// keeps no versions, but every Put writes its chunks under a fresh NUID, and the metadata record names
// it: that NUID is the version. A copy reads that NUID's chunks (checked against its digest); a delete
// writes the delete marker only if the metadata record is still the one naming that NUID (the publish
// expects the record's stream sequence), so an upload that replaced it meanwhile is never deleted.

var _ objstore.StattedRemover = (*Store)(nil)

// statted returns the object-store record Stat put in info, if info is this store's.
func statted(info objstore.Info) (*jetstream.ObjectInfo, bool) {
	oi, ok := info.Sys.(*jetstream.ObjectInfo)
	return oi, ok && oi.Bucket == info.Bucket && oi.Name == info.Key && oi.NUID != ""
}

// CopyStatted streams the version info describes through this client into dstBucket/dstKey (creating
// the bucket if needed), with its content type; if that version's chunks are gone (the object was
// overwritten or deleted since the Stat) it fails with objstore.ErrChanged and stores nothing.
func (s *Store) CopyStatted(ctx context.Context, info objstore.Info, dstBucket, dstKey string) error {
	oi, ok := statted(info)
	if !ok {
		// Not a record of this store's Stat (an Info made by the caller): look the object up.
		fresh, err := s.Stat(ctx, info.Bucket, info.Key)
		if err != nil {
			return fmt.Errorf("copying: %w", err)
		}
		if oi, ok = statted(fresh); !ok {
			return fmt.Errorf("copying %s/%s: its metadata names no version", info.Bucket, info.Key)
		}
		info = fresh
	}
	if info.Bucket == dstBucket && info.Key == dstKey {
		return nil
	}
	if err := checkKey(dstKey, false); err != nil {
		return fmt.Errorf("copying to %s/%s: %w", dstBucket, dstKey, err)
	}
	if err := s.EnsureBucket(ctx, dstBucket); err != nil {
		return fmt.Errorf("copying: %w", err)
	}

	pr, pw := io.Pipe()
	getErr := make(chan error, 1)
	go func() {
		_, err := s.read(ctx, oi, pw)
		if errors.Is(err, errGone) {
			err = fmt.Errorf("%w: %w", objstore.ErrChanged, err)
		}
		pw.CloseWithError(err) // nil: EOF for the reader
		getErr <- err
	}()
	// A copy is what its source is, as S3's CopyObject keeps x-amz-meta-*: a variant's copy (a reused
	// answer's outputs) is a variant, an upload's (quarantine) is not, whatever ctx says. A read that
	// fails fails the put before its metadata is written, so nothing half-copied is ever visible.
	variant := oi.Headers.Get(objstore.VariantHeader) == "1"
	putErr := s.put(ctx, dstBucket, dstKey, pr, int64(oi.Size), info.ContentType, variant)
	// Unblock the reader side if Put stopped early, then wait so no goroutine outlives the copy.
	pr.CloseWithError(errors.New("copy aborted"))
	if err := <-getErr; err != nil {
		return fmt.Errorf("copying %s/%s: %w", info.Bucket, info.Key, err)
	}
	if putErr != nil {
		return fmt.Errorf("copying: putting %s/%s: %w", dstBucket, dstKey, putErr)
	}
	return nil
}

// DeleteStatted removes the object if it is still the version info describes: the delete marker is
// published only over that version's metadata record, then its chunks are purged. Another version in
// its place fails with objstore.ErrChanged and stays; a version gone already is not an error.
func (s *Store) DeleteStatted(ctx context.Context, info objstore.Info) error {
	oi, ok := statted(info)
	if !ok {
		return s.Delete(ctx, info.Bucket, info.Key)
	}
	ctx, cancel := s.opContext(ctx)
	defer cancel()
	err := s.withStream(ctx, info.Bucket, true, func(stream jetstream.Stream) error {
		return s.deleteVersion(ctx, stream, oi)
	})
	if err != nil && !errors.Is(err, objstore.ErrNotFound) {
		return fmt.Errorf("deleting %s/%s: %w", info.Bucket, info.Key, err)
	}
	return nil
}

func (s *Store) deleteVersion(ctx context.Context, stream jetstream.Stream, oi *jetstream.ObjectInfo) error {
	metaSubj := fmt.Sprintf(metaSubjectFmt, oi.Bucket, base64.URLEncoding.EncodeToString([]byte(oi.Name)))
	last, err := stream.GetLastMsgForSubject(ctx, metaSubj)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the object's metadata: %w", err)
	}
	var cur jetstream.ObjectInfo
	if err := json.Unmarshal(last.Data, &cur); err != nil {
		return fmt.Errorf("reading the object's metadata: %w", err)
	}
	switch {
	case cur.Deleted:
		return nil
	case cur.NUID != oi.NUID:
		return fmt.Errorf("%w (now version %s, was %s)", objstore.ErrChanged, cur.NUID, oi.NUID)
	}
	// The marker nats.go's ObjectStore.Delete writes, so every reader of the layout sees a deletion.
	cur.Deleted = true
	cur.Size, cur.Chunks, cur.Digest = 0, 0, ""
	data, err := json.Marshal(cur)
	if err != nil {
		return fmt.Errorf("encoding the delete marker: %w", err)
	}
	mm := nats.NewMsg(metaSubj)
	mm.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	mm.Data = data
	if _, err := s.js.PublishMsg(ctx, mm, jetstream.WithExpectLastSequencePerSubject(last.Sequence)); err != nil {
		if isWrongLastSequence(err) {
			return fmt.Errorf("%w (its metadata was rewritten while it was being deleted)", objstore.ErrChanged)
		}
		return fmt.Errorf("publishing the delete marker: %w", err)
	}
	// The object is deleted; chunks left here cost only space, as after an overwrite.
	_ = stream.Purge(ctx, jetstream.WithPurgeSubject(fmt.Sprintf(chunkSubjectFmt, oi.Bucket, oi.NUID)))
	return nil
}

func isWrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}
