package objstore

import (
	"context"
	"errors"
	"fmt"
)

// Reading the first bytes of an object: triage sniffs an upload's type from its head before the job
// is routed to the pool that will download all of it.

// HeadReader is implemented by stores that can fetch a byte range (S3's ranged GET). ReadHead uses it
// when it is there.
type HeadReader interface {
	// ReadHead returns the object's first n bytes (fewer when it is shorter).
	ReadHead(ctx context.Context, bucket, key string, n int) ([]byte, error)
}

// ReadHead returns the first n bytes of an object (fewer when it is shorter): a ranged read where the
// store has one, otherwise a Get that stops as soon as n bytes arrived (the JetStream object store sends
// chunks of 128 KiB, so that is one chunk).
func ReadHead(ctx context.Context, s Store, bucket, key string, n int) ([]byte, error) {
	if hr, ok := s.(HeadReader); ok {
		return hr.ReadHead(ctx, bucket, key, n)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the transfer the writer cut short
	w := &headWriter{buf: make([]byte, 0, n)}
	if _, err := s.Get(ctx, bucket, key, w); err != nil && !errors.Is(err, errHeadFull) {
		return nil, fmt.Errorf("reading the first %d bytes: %w", n, err)
	}
	return w.buf, nil
}

var errHeadFull = errors.New("head read: enough bytes")

// headWriter keeps the first cap(buf) bytes, then refuses more so the Get stops.
type headWriter struct{ buf []byte }

func (w *headWriter) Write(p []byte) (int, error) {
	room := cap(w.buf) - len(w.buf)
	if len(p) < room {
		w.buf = append(w.buf, p...)
		return len(p), nil
	}
	w.buf = append(w.buf, p[:room]...)
	return room, errHeadFull
}
