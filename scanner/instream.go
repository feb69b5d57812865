package scanner

// The clamd protocol is implemented here rather than with github.com/dutchcoders/go-clamd: nothing of
// go-clamd's I/O can be made correct from the outside, so none of it is used.
//
//   - ScanStream ends the stream on any reader error and sends the terminating chunk anyway, so clamd
//     answers "stream: OK" for a truncated download. We count bytes and never terminate a short stream.
//   - It ignores the errors of its length-prefix writes (and the command write), so a broken connection
//     can still yield a verdict for bytes clamd never saw. We check every write.
//   - It sends 1 KiB chunks (≈500,000 writes for a 500 MiB video). We send Config.ChunkSize (256 KiB).
//   - It sets no read or write deadlines (only a 2 s TCP dial timeout, none for unix sockets), so a
//     stalled clamd hangs a job forever. We put one on every read and write.
//   - Its abort goroutine leaks unless the caller closes the channel, and its reply goroutine blocks
//     forever on an unbuffered channel the caller stops reading. Our only goroutine ends when the
//     connection is closed, which every return path does.
//   - Ping panics (nil dereference) when clamd closes the connection without a reply.
//   - Its parser turns "INSTREAM size limit exceeded. ERROR" (no "stream: " prefix) into a PARSE
//     ERROR and Heuristics.Limits.Exceeded.* into an ordinary FOUND: neither comes out as a refusal,
//     and the second would delete a good upload as a virus. ParseReply knows both.
//
// Tests keep the reasons checked: the first defect against a real clamd (scanner_test.go), the Ping
// panic against a fake one (fault_test.go). We use the z-prefixed commands (NUL-terminated command and reply), which clamd
// documents as the recommended form, and a fresh connection per command.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

const (
	// maxReply bounds a reply we are willing to read; clamd's replies are one short line.
	maxReply = 4 << 10
	// writeFailureGrace is how long we wait, after a write fails, for a reply clamd may have sent
	// before closing (its "INSTREAM size limit exceeded" arrives this way).
	writeFailureGrace = 2 * time.Second
)

// Scan streams exactly size bytes from r to clamd with zINSTREAM and returns clamd's verdict. If r
// yields fewer or more bytes than size, or any read or write fails, the result is an error, never a
// clean verdict. Inputs larger than Config.MaxStreamBytes are refused (IsRefused) before connecting.
//
// Canceling ctx closes the connection, so Scan returns promptly unless it is blocked in r.Read itself:
// r should honor the same ctx (an HTTP body or a file does).
func (s *Scanner) Scan(ctx context.Context, r io.Reader, size int64) (Verdict, error) {
	const op = "scanning stream"
	if size < 0 {
		return Verdict{}, &Error{Kind: Truncated, Op: op, Err: fmt.Errorf("input size %d is unknown or invalid", size)}
	}
	conn, err := s.connectFor(ctx, op, size)
	if err != nil {
		return Verdict{}, err
	}
	// The reply is read concurrently with the upload: clamd answers "INSTREAM size limit exceeded"
	// and closes while we are still sending, and a reply still unread when its RST arrives is lost.
	replies := make(chan reply, 1)
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		replies <- readReply(conn.Conn)
	}()
	// Closing the connection unblocks the reader, so this goroutine never outlives Scan.
	defer func() {
		conn.close()
		<-readerDone
	}()

	if err := conn.write([]byte("zINSTREAM\x00")); err != nil {
		return Verdict{}, s.writeFailed(ctx, conn, op, "sending INSTREAM", err, replies)
	}
	buf := make([]byte, 4+min(int64(s.cfg.ChunkSize), size))
	var sent int64
	for sent < size {
		select {
		case rep := <-replies:
			return Verdict{}, s.earlyReply(ctx, op, rep, sent, size)
		default:
		}
		n := int(min(int64(len(buf)-4), size-sent))
		got, err := io.ReadFull(r, buf[4:4+n])
		if err != nil {
			return Verdict{}, s.inputFailed(ctx, op, sent+int64(got), size, err)
		}
		binary.BigEndian.PutUint32(buf[:4], uint32(n))
		if err := conn.write(buf[:4+n]); err != nil {
			return Verdict{}, s.writeFailed(ctx, conn, op, "sending chunk", err, replies)
		}
		sent += int64(n)
	}
	// The input must end exactly here: more bytes mean size was wrong, and clamd would have scanned a
	// prefix of the input.
	if err := expectEOF(r); err != nil {
		return Verdict{}, s.inputFailed(ctx, op, size, size, err)
	}
	if err := conn.write([]byte{0, 0, 0, 0}); err != nil {
		return Verdict{}, s.writeFailed(ctx, conn, op, "ending stream", err, replies)
	}

	// Now clamd scans; the verdict may take a while for a large file.
	if err := conn.SetReadDeadline(time.Now().Add(s.cfg.ScanTimeout)); err != nil {
		return Verdict{}, s.ioFailed(ctx, op, fmt.Errorf("setting read deadline: %w", err))
	}
	rep := <-replies
	if rep.err != nil {
		return Verdict{}, s.replyFailed(ctx, op, rep.err)
	}
	v, perr := parseReply(rep.line, op)
	if perr != nil {
		return Verdict{}, perr
	}
	return v, nil
}

// connectFor refuses an input over MaxStreamBytes before connecting, and otherwise dials clamd.
func (s *Scanner) connectFor(ctx context.Context, op string, size int64) (*conn, error) {
	if size > s.cfg.MaxStreamBytes {
		words := fmt.Sprintf("input is %d bytes, over the %d-byte scan limit", size, s.cfg.MaxStreamBytes)
		return nil, &Error{Kind: LimitExceeded, Op: op, Err: errors.New(words), Words: words}
	}
	return s.dial(ctx, op)
}

// command sends one quick z-command on a fresh connection and returns its reply without the NUL.
func (s *Scanner) command(ctx context.Context, op, cmd string) (string, error) {
	conn, err := s.dial(ctx, op)
	if err != nil {
		return "", err
	}
	defer conn.close()
	if err := conn.write([]byte(cmd)); err != nil {
		return "", s.ioFailed(ctx, op, fmt.Errorf("sending command: %w", err))
	}
	if err := conn.SetReadDeadline(time.Now().Add(s.cfg.IOTimeout)); err != nil {
		return "", s.ioFailed(ctx, op, fmt.Errorf("setting read deadline: %w", err))
	}
	rep := readReply(conn.Conn)
	if rep.err != nil {
		return "", s.replyFailed(ctx, op, rep.err)
	}
	return rep.line, nil
}

// conn is one connection to clamd, closed when its context ends.
type conn struct {
	net.Conn
	ioTimeout time.Duration
	stop      func() bool
}

// dial connects to clamd. Until close, canceling ctx closes the connection, which fails any pending
// read or write at once; context.AfterFunc leaves no goroutine behind once stopped.
func (s *Scanner) dial(ctx context.Context, op string) (*conn, error) {
	d := net.Dialer{Timeout: s.cfg.DialTimeout}
	c, err := d.DialContext(ctx, s.network, s.address)
	if err != nil {
		return nil, s.ioFailed(ctx, op, fmt.Errorf("connecting to %s: %w", s.cfg.Addr, err))
	}
	return &conn{Conn: c, ioTimeout: s.cfg.IOTimeout, stop: context.AfterFunc(ctx, func() { c.Close() })}, nil
}

// write sends p in full within IOTimeout.
func (c *conn) write(p []byte) error {
	if err := c.SetWriteDeadline(time.Now().Add(c.ioTimeout)); err != nil {
		return err
	}
	_, err := c.Write(p)
	return err
}

// close is idempotent.
func (c *conn) close() {
	c.stop()
	c.Close()
}

// reply is one NUL-terminated reply read from clamd, or why there is none.
type reply struct {
	line string
	err  error
}

// errNoReply: clamd closed the connection without answering (e.g. it was stopped or crashed).
var errNoReply = errors.New("clamd closed the connection without a reply")

// badReplyError: clamd sent bytes that are not one NUL-terminated reply.
type badReplyError struct{ msg string }

func (e *badReplyError) Error() string { return e.msg }

// readReply reads up to and excluding the first NUL, within whatever read deadline the caller set.
func readReply(r io.Reader) reply {
	buf := make([]byte, 0, 256)
	tmp := make([]byte, 256)
	for {
		n, err := r.Read(tmp)
		for i, b := range tmp[:n] {
			if b == 0 {
				return reply{line: string(append(buf, tmp[:i]...))}
			}
		}
		buf = append(buf, tmp[:n]...)
		if len(buf) > maxReply {
			return reply{err: &badReplyError{fmt.Sprintf("reply longer than %d bytes: %s", maxReply, quote(string(buf)))}}
		}
		switch {
		case err == io.EOF && len(buf) == 0:
			return reply{err: errNoReply}
		case err == io.EOF:
			// Without its terminator we cannot know the reply is complete ("stream: OK" could be the
			// start of anything), so it is not a verdict.
			return reply{err: &badReplyError{fmt.Sprintf("reply %s ended without its NUL terminator", quote(string(buf)))}}
		case err != nil:
			return reply{err: err}
		}
	}
}

// expectEOF checks that r has nothing left. Some readers return (0, nil) a few times before io.EOF;
// like bufio, give up after 100 of those.
func expectEOF(r io.Reader) error {
	var one [1]byte
	for range 100 {
		n, err := r.Read(one[:])
		switch {
		case n > 0:
			return errInputTooLong
		case err == io.EOF:
			return nil
		case err != nil:
			return err
		}
	}
	return io.ErrNoProgress
}

var errInputTooLong = errors.New("input has more bytes than its announced size")

// inputFailed classifies a failure of the caller's reader after got of size bytes.
func (s *Scanner) inputFailed(ctx context.Context, op string, got, size int64, err error) error {
	if ctx.Err() != nil {
		return &Error{Kind: Canceled, Op: op, Err: ctx.Err()}
	}
	switch {
	case errors.Is(err, errInputTooLong):
		err = fmt.Errorf("%w (%d)", err, size)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		err = fmt.Errorf("input ended after %d of %d bytes", got, size)
	default:
		err = fmt.Errorf("reading input after %d of %d bytes: %w", got, size, err)
	}
	return &Error{Kind: Truncated, Op: op, Err: err}
}

// writeFailed classifies a failed write. clamd closes the connection right after some replies (the
// size limit), so a reply that arrived before the failure takes precedence over the write error.
func (s *Scanner) writeFailed(ctx context.Context, c *conn, op, what string, err error, replies <-chan reply) error {
	if ctx.Err() == nil && c.SetReadDeadline(time.Now().Add(min(writeFailureGrace, s.cfg.IOTimeout))) == nil {
		if rep := <-replies; rep.err == nil {
			if _, perr := parseReply(rep.line, op); perr != nil && perr.Kind == LimitExceeded {
				return perr
			}
		}
	}
	return s.ioFailed(ctx, op, fmt.Errorf("%s: %w", what, err))
}

// earlyReply handles a reply (or a broken connection) that came before the stream was complete. Only
// a refusal can legitimately come early; a verdict for part of the input is not a verdict.
func (s *Scanner) earlyReply(ctx context.Context, op string, rep reply, sent, size int64) error {
	if rep.err != nil {
		return s.replyFailed(ctx, op, rep.err)
	}
	if _, perr := parseReply(rep.line, op); perr != nil {
		return perr
	}
	return &Error{Kind: Protocol, Op: op, Err: fmt.Errorf("clamd replied %s after %d of %d bytes, before the stream ended", quote(rep.line), sent, size)}
}

// replyFailed classifies a failure to read a reply.
func (s *Scanner) replyFailed(ctx context.Context, op string, err error) error {
	var bad *badReplyError
	if errors.As(err, &bad) && ctx.Err() == nil {
		return &Error{Kind: Protocol, Op: op, Err: err}
	}
	return s.ioFailed(ctx, op, fmt.Errorf("reading reply: %w", err))
}

// ioFailed classifies a connection failure: Canceled if ctx ended (closing the connection is how we
// abort), Unavailable otherwise.
func (s *Scanner) ioFailed(ctx context.Context, op string, err error) error {
	if ctx.Err() != nil {
		return &Error{Kind: Canceled, Op: op, Err: fmt.Errorf("%w (%v)", ctx.Err(), err)}
	}
	return &Error{Kind: Unavailable, Op: op, Err: err}
}
