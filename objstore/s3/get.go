package s3

import (
	"context"
	"fmt"
	"io"

	"github.com/minio/minio-go/v7"

	"github.com/mediaworker/mediaworker/objstore"
)

// reader is a Store's reading side: whole objects, a version Stat saw, an object's head (here) and
// ranges (ranges.go). It shares the Store's conn and keeps no state of its own.
type reader struct{ *conn }

// Get streams the object into w. The response body is copied as it arrives, and a body shorter than
// the announced Content-Length is an error.
func (s reader) Get(ctx context.Context, bucket, key string, w io.Writer) (int64, error) {
	return s.get(ctx, bucket, key, minio.GetObjectOptions{}, w)
}

// get is Get with options: GetStatted names the version to read.
func (s reader) get(ctx context.Context, bucket, key string, opts minio.GetObjectOptions, w io.Writer) (int64, error) {
	if err := s.check(bucket, key, true); err != nil {
		return 0, fmt.Errorf("getting %s/%s: %w", bucket, key, err)
	}
	wctx, watch := s.watchBody(ctx)
	defer watch.stop()
	obj, err := s.client.GetObject(wctx, bucket, key, opts)
	if err != nil {
		return 0, fmt.Errorf("getting %s/%s: %w", bucket, key, mapErr(err))
	}
	defer obj.Close()
	// Stat looks the object up (a HEAD) before the GET, so a missing object fails here before w sees
	// a byte.
	oi, err := obj.Stat()
	if err != nil {
		return 0, fmt.Errorf("getting %s/%s: %w", bucket, key, s.headErr(ctx, bucket, key, opts, err))
	}
	n, err := io.Copy(w, watch.reader(obj))
	if err != nil {
		return n, fmt.Errorf("getting %s/%s: %w", bucket, key, watch.explain(wctx, mapErr(err)))
	}
	if n != oi.Size {
		return n, fmt.Errorf("getting %s/%s: got %d of %d bytes", bucket, key, n, oi.Size)
	}
	return n, nil
}

// GetStatted streams the version info describes into w; an object replaced since (another ETag, or
// the version ID gone) fails with objstore.ErrChanged before w sees a byte.
func (s reader) GetStatted(ctx context.Context, info objstore.Info, w io.Writer) (int64, error) {
	v, ok := versionOf(info)
	if !ok {
		return s.Get(ctx, info.Bucket, info.Key, w)
	}
	opts := minio.GetObjectOptions{VersionID: v.id}
	if v.id == "" {
		if err := opts.SetMatchETag(v.etag); err != nil {
			return 0, fmt.Errorf("getting %s/%s: %w", info.Bucket, info.Key, err)
		}
	}
	return s.get(ctx, info.Bucket, info.Key, opts, w)
}

// ReadHead fetches the object's first n bytes with one ranged GET.
func (s reader) ReadHead(ctx context.Context, bucket, key string, n int) ([]byte, error) {
	if err := s.check(bucket, key, true); err != nil {
		return nil, fmt.Errorf("getting the head of %s/%s: %w", bucket, key, err)
	}
	ctx, cancel := s.opContext(ctx)
	defer cancel()
	opts := minio.GetObjectOptions{}
	if err := opts.SetRange(0, int64(n)-1); err != nil {
		return nil, fmt.Errorf("getting the head of %s/%s: %w", bucket, key, err)
	}
	obj, err := s.client.GetObject(ctx, bucket, key, opts)
	if err != nil {
		return nil, fmt.Errorf("getting the head of %s/%s: %w", bucket, key, mapErr(err))
	}
	defer obj.Close()
	buf, err := io.ReadAll(io.LimitReader(obj, int64(n)))
	if err != nil {
		return nil, fmt.Errorf("getting the head of %s/%s: %w", bucket, key, mapErr(err))
	}
	return buf, nil
}
