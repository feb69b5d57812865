package s3

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/minio/minio-go/v7"

	"github.com/mediaworker/mediaworker/objstore"
)

// Reading, copying and deleting the version of an object Stat found (objstore.StattedGetter,
// objstore.StattedRemover): by its version ID on a versioned bucket, else only while the key still
// holds an object with its ETag. So the bytes clamd scanned are the bytes quarantined and removed, and
// on a versioned bucket "deleted" means that version is gone, not hidden under a delete marker.
// Reading it (GetStatted) is the reader's, in get.go; versionOf below names the version for both.

var (
	_ objstore.StattedGetter  = (*Store)(nil)
	_ objstore.StattedRemover = (*Store)(nil)
)

// version is what Stat records in objstore.Info.Sys.
type version struct {
	bucket, key string
	id          string // x-amz-version-id; "" on a bucket that never had versioning
	etag        string
}

// tagOf is a version's objstore.Info.Tag: its ETag (the bytes' MD5 for a plain upload, another
// value unique to the upload for multipart and encrypted ones), and its version ID where the bucket
// keeps versions ("null" and "" name no version: the ETag alone tells uploads apart there).
func tagOf(etag, versionID string) string {
	etag = strings.Trim(etag, `"`)
	if etag == "" {
		return ""
	}
	if versionID == "" || versionID == "null" {
		return "etag:" + etag
	}
	return "etag:" + etag + " version:" + versionID
}

// versionOf returns the version Stat recorded in info, if info is this store's and names one.
func versionOf(info objstore.Info) (version, bool) {
	v, ok := info.Sys.(version)
	return v, ok && v.bucket == info.Bucket && v.key == info.Key && (v.id != "" || v.etag != "")
}

// CopyStatted copies the version info describes (server-side, with its content type) and creates the
// destination bucket if needed; an object replaced since fails with objstore.ErrChanged.
func (s *Store) CopyStatted(ctx context.Context, info objstore.Info, dstBucket, dstKey string) error {
	v, ok := versionOf(info)
	if !ok {
		return s.Copy(ctx, info.Bucket, info.Key, dstBucket, dstKey)
	}
	src := minio.CopySrcOptions{Bucket: info.Bucket, Object: info.Key, VersionID: v.id}
	if v.id == "" {
		src.MatchETag = v.etag
	}
	return s.copy(ctx, info, src, dstBucket, dstKey)
}

// DeleteStatted removes the version info describes. On a versioned bucket that version itself is
// deleted (a delete marker would leave its bytes readable by version ID), whatever is current. On an
// unversioned bucket the object is deleted only if it still has the ETag Stat saw: S3 has no
// conditional delete there, so a replacement uploaded between this check and the delete (a round trip
// apart) would be deleted; it is answered as not found and can be uploaded again.
func (s *Store) DeleteStatted(ctx context.Context, info objstore.Info) error {
	v, ok := versionOf(info)
	if !ok {
		return s.Delete(ctx, info.Bucket, info.Key)
	}
	bucket, key := info.Bucket, info.Key
	if err := s.check(bucket, key, true); err != nil {
		return fmt.Errorf("deleting %s/%s: %w", bucket, key, err)
	}
	ctx, cancel := s.opContext(ctx)
	defer cancel()
	if v.id == "" {
		oi, err := s.client.StatObject(ctx, bucket, key, minio.StatObjectOptions{})
		if err != nil {
			err = s.headErr(ctx, bucket, key, minio.GetObjectOptions{}, err)
		}
		switch {
		case errors.Is(err, objstore.ErrNotFound):
			return nil // gone already
		case err != nil:
			return fmt.Errorf("deleting %s/%s: %w", bucket, key, err)
		case oi.ETag != v.etag:
			return fmt.Errorf("deleting %s/%s: %w (ETag %s, was %s)", bucket, key, objstore.ErrChanged, oi.ETag, v.etag)
		}
	}
	err := s.client.RemoveObject(ctx, bucket, key, minio.RemoveObjectOptions{VersionID: v.id})
	if err := mapErr(err); err != nil && !errors.Is(err, objstore.ErrNotFound) && !errors.Is(err, objstore.ErrChanged) {
		return fmt.Errorf("deleting %s/%s: %w", bucket, key, err)
	}
	return nil // deleted, or that version was gone already (NoSuchVersion)
}
