package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// Reading part of an object: /objects answers HTTP range requests (a video player seeking, a CDN
// filling its cache in slices), and a range near the end of a large MP4 must not cost reading the
// object from its first byte.

// RangeGetter is implemented by stores that can read part of an object without reading what comes
// before it (S3's ranged GET; the JetStream object store's chunks, fetched by sequence).
type RangeGetter interface {
	// GetRange streams bytes [off, off+n) of the object info (from Stat) describes into w and returns
	// the bytes written; fewer than n is an error. The range must lie within info.Size.
	GetRange(ctx context.Context, info Info, off, n int64, w io.Writer) (int64, error)
}

// GetRange streams bytes [off, off+n) of the object info (from s's Stat) describes into w: with s's
// GetRange where it has one, else by reading the object from its start and keeping only the range
// (stopping the transfer once the range is written). The whole object is read with GetStatted, so it
// is checked as Get checks it.
func GetRange(ctx context.Context, s Store, info Info, off, n int64, w io.Writer) (int64, error) {
	if err := CheckRange(info.Size, off, n); err != nil {
		return 0, fmt.Errorf("getting a range of %s/%s: %w", info.Bucket, info.Key, err)
	}
	switch rg, ok := s.(RangeGetter); {
	case n == 0:
		return 0, nil
	case off == 0 && n == info.Size:
		return GetStatted(ctx, s, info, w)
	case ok:
		return rg.GetRange(ctx, info, off, n, w)
	}
	return ReadWindow(ctx, off, n, w, func(ctx context.Context, w io.Writer) (int64, error) {
		return GetStatted(ctx, s, info, w)
	})
}

// CheckRange reports whether [off, off+n) lies within an object of size bytes.
func CheckRange(size, off, n int64) error {
	if off < 0 || n < 0 || off > size || n > size-off {
		return fmt.Errorf("range of %d bytes at %d is outside the object's %d bytes", n, off, size)
	}
	return nil
}

// ReadWindow runs get, which streams a whole object into the writer it is given, and passes on to w
// only bytes [off, off+n) of it; once they are written it ends the transfer (its context is cancelled)
// and returns n. It is the fallback of stores that cannot start a read in the middle of an object.
func ReadWindow(ctx context.Context, off, n int64, w io.Writer, get func(context.Context, io.Writer) (int64, error)) (int64, error) {
	if n == 0 {
		return 0, nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the transfer the window cut short
	ww := &windowWriter{w: w, skip: off, left: n}
	_, err := get(ctx, ww)
	switch {
	case ww.left == 0:
		return n, nil // the window is full: whatever ended the transfer afterwards is not this read's concern
	case err == nil:
		return n - ww.left, fmt.Errorf("object ended %d bytes before the end of the range", ww.left)
	case errors.Is(err, errWindowFull):
		return n, nil
	}
	return n - ww.left, err
}

var errWindowFull = errors.New("range read: enough bytes")

// windowWriter drops the first skip bytes, passes on the next left, then refuses more so the
// transfer stops.
type windowWriter struct {
	w          io.Writer
	skip, left int64
}

func (ww *windowWriter) Write(p []byte) (int, error) {
	n := len(p)
	if ww.skip >= int64(n) {
		ww.skip -= int64(n)
		return n, nil
	}
	p = p[ww.skip:]
	ww.skip = 0
	if int64(len(p)) > ww.left {
		p = p[:ww.left]
	}
	m, err := ww.w.Write(p)
	ww.left -= int64(m)
	switch {
	case err != nil:
		return 0, err
	case ww.left == 0:
		return n, errWindowFull
	}
	return n, nil
}
