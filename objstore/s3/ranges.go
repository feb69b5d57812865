package s3

import (
	"context"
	"fmt"
	"io"

	"github.com/minio/minio-go/v7"

	"github.com/mediaworker/mediaworker/objstore"
)

var _ objstore.RangeGetter = (*Store)(nil)

// GetRange streams bytes [off, off+n) of the object with one ranged GET: the store sends only those.
func (s reader) GetRange(ctx context.Context, info objstore.Info, off, n int64, w io.Writer) (int64, error) {
	bucket, key := info.Bucket, info.Key
	if err := objstore.CheckRange(info.Size, off, n); err != nil {
		return 0, fmt.Errorf("getting a range of %s/%s: %w", bucket, key, err)
	}
	if n == 0 {
		return 0, nil
	}
	if err := s.check(bucket, key, true); err != nil {
		return 0, fmt.Errorf("getting a range of %s/%s: %w", bucket, key, err)
	}
	opts := minio.GetObjectOptions{}
	if err := opts.SetRange(off, off+n-1); err != nil {
		return 0, fmt.Errorf("getting a range of %s/%s: %w", bucket, key, err)
	}
	wctx, watch := s.watchBody(ctx)
	defer watch.stop()
	obj, err := s.client.GetObject(wctx, bucket, key, opts)
	if err != nil {
		return 0, fmt.Errorf("getting a range of %s/%s: %w", bucket, key, mapErr(err))
	}
	defer obj.Close()
	// Stat sends the GET and reads the headers, so a missing object fails here before w sees a byte.
	if _, err := obj.Stat(); err != nil {
		return 0, fmt.Errorf("getting a range of %s/%s: %w", bucket, key, mapErr(err))
	}
	got, err := io.Copy(w, io.LimitReader(watch.reader(obj), n))
	if err != nil {
		return got, fmt.Errorf("getting a range of %s/%s: %w", bucket, key, watch.explain(wctx, mapErr(err)))
	}
	if got != n {
		// The object shrank since the Stat: the server answered with fewer bytes than the range.
		return got, fmt.Errorf("getting a range of %s/%s: got %d of %d bytes", bucket, key, got, n)
	}
	return got, nil
}
