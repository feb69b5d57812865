package s3

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
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

// A request body the server stops taking. Writing has the same hole as reading: net/http bounds the
// upload of a body by nothing but the context, so a server (or a proxy before it) that keeps the
// connection open and stops reading held a job's upload for its whole --job-timeout. A bound on the
// reads of the body the caller hands to Put would be wrong: minio-go reads a multipart part whole
// before sending it, and sending it takes as long as the link needs. What stops is the connection:
// once the socket's buffers are full, a Write waits. sendWatch bounds each Write to the connection by
// Timeout, which a server taking data at all (64 KiB in Timeout, the transport's largest Write)
// always meets.

// errSendStalled is what a Write that waited Timeout returns.
var errSendStalled = errors.New("send stalled: the S3 server took nothing")

// sendWatch is a connection whose every Write must finish within timeout.
type sendWatch struct {
	net.Conn
	timeout time.Duration
}

// watchSends makes every connection dial opens a sendWatch.
func watchSends(dial func(ctx context.Context, network, addr string) (net.Conn, error), timeout time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	if dial == nil {
		dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return sendWatch{Conn: c, timeout: timeout}, nil
	}
}

func (c sendWatch) Write(p []byte) (int, error) {
	if err := c.Conn.SetWriteDeadline(time.Now().Add(c.timeout)); err != nil {
		return 0, err
	}
	n, err := c.Conn.Write(p)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		err = fmt.Errorf("no data taken for %s: %w", c.timeout, errSendStalled)
	}
	return n, err
}
