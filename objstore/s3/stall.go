package s3

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
)

// A response body that stops arriving. net/http sets no deadline on a body once its headers are in
// (minio-go's transport bounds only the wait for headers), so a server, or a proxy before it, that
// keeps the connection open and sends nothing held a job's download for its whole --job-timeout (30
// minutes by default), its slot and its message with it. The JetStream object store calls a stream
// that sends nothing for Timeout stalled; bodyWatch gives reads from S3 the same bound: a single Read
// of the body that waits Timeout for a byte ends the transfer. Time the caller spends writing what was
// read (to a slow disk, to clamd) does not count.

// errStalled is the cause a watched transfer is cancelled with.
var errStalled = errors.New("stream stalled: the S3 server sent nothing")

// bodyWatch cancels its context when a watched Read blocks for timeout.
type bodyWatch struct {
	timeout time.Duration
	timer   *time.Timer
	cancel  context.CancelCauseFunc
}

// watchBody returns a child of ctx for a GET whose body is then read through reader, and the watch;
// call stop when the transfer is over.
func (s *conn) watchBody(ctx context.Context) (context.Context, *bodyWatch) {
	ctx, cancel := context.WithCancelCause(ctx)
	w := &bodyWatch{timeout: s.cfg.Timeout, cancel: cancel}
	w.timer = time.AfterFunc(time.Hour, func() { cancel(errStalled) })
	w.timer.Stop() // armed only while a Read waits
	return ctx, w
}

// reader is r with each Read bounded by the watch's timeout.
func (w *bodyWatch) reader(r io.Reader) io.Reader { return watchedReader{r: r, w: w} }

// stop ends the watch and its context.
func (w *bodyWatch) stop() {
	w.timer.Stop()
	w.cancel(nil)
}

// explain names a stall as the cause of err (the cancelled request's own words for it vary).
func (w *bodyWatch) explain(ctx context.Context, err error) error {
	if err != nil && errors.Is(context.Cause(ctx), errStalled) {
		return fmt.Errorf("no data for %s: %w", w.timeout, errStalled)
	}
	return err
}

type watchedReader struct {
	r io.Reader
	w *bodyWatch
}

func (wr watchedReader) Read(p []byte) (int, error) {
	wr.w.timer.Reset(wr.w.timeout)
	n, err := wr.r.Read(p)
	wr.w.timer.Stop()
	return n, err
}
