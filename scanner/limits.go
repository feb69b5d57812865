package scanner

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"
)

// probeDepth is how deeply the AlertExceedsMax probe nests zips: deeper than any sane MaxRecursion
// (clamd's default is 17), and still only about 8 KB.
const probeDepth = 64

// CheckLimits checks, in a few milliseconds and without sending capBytes, that clamd accepts every
// input up to capBytes (the worker's input cap) and reports what it cannot scan in full instead of
// passing it as clean. Call it at start; it returns nil, a Misconfigured *Error that names the clamd
// setting to change, or the error of talking to clamd (Unavailable, Protocol, Canceled).
//
//   - StreamMaxLength ≥ capBytes. clamd compares each INSTREAM chunk's announced length with what is
//     left of StreamMaxLength as soon as it has read the 4-byte length, before any data. The probe
//     announces one chunk of capBytes and then closes its sending side: a clamd whose limit is smaller
//     answers "INSTREAM size limit exceeded" at once; one whose limit is large enough waits for the
//     data, reads the end of the connection and closes it without a reply. The outcome depends only
//     on the order of the bytes, not on timing (measured with clamd 1.4, exact to the byte).
//   - AlertExceedsMax yes. The probe scans a zip nested probeDepth levels deep. With AlertExceedsMax
//     clamd reports Heuristics.Limits.Exceeded.MaxRecursion (a refusal, see ParseReply); without it,
//     "stream: OK" — and it would equally answer OK for inputs over MaxFileSize, MaxScanSize or
//     MaxScanTime, which are then not scanned in full.
//
// MaxFileSize and MaxScanSize cannot be probed without sending (and clamd storing and scanning)
// capBytes. With AlertExceedsMax on, an input over them is refused (IsRefused), never passed: a
// setting below the cap costs refusals of large uploads, not missed scans. deploy/clamav/clamd.conf
// sets both above the default cap; SECURITY.md says what a deployment must set.
func (s *Scanner) CheckLimits(ctx context.Context, capBytes int64) error {
	if capBytes <= 0 || capBytes > maxStreamLimit {
		return &Error{Kind: Misconfigured, Op: "checking clamd's limits",
			Err: fmt.Errorf("input cap %d must be between 1 and %d bytes (clamd's sizes are 32-bit)", capBytes, int64(maxStreamLimit))}
	}
	if err := s.probeStreamLimit(ctx, capBytes); err != nil {
		return err
	}
	return s.probeAlertExceedsMax(ctx)
}

// probeStreamLimit announces one INSTREAM chunk of capBytes and ends the connection.
func (s *Scanner) probeStreamLimit(ctx context.Context, capBytes int64) error {
	const op = "checking clamd's StreamMaxLength"
	conn, err := s.dial(ctx, op)
	if err != nil {
		return err
	}
	defer conn.close()
	msg := make([]byte, 0, 14)
	msg = append(msg, "zINSTREAM\x00"...)
	msg = binary.BigEndian.AppendUint32(msg, uint32(capBytes))
	if err := conn.write(msg); err != nil {
		return s.ioFailed(ctx, op, fmt.Errorf("sending the probe: %w", err))
	}
	cw, ok := conn.Conn.(interface{ CloseWrite() error })
	if !ok {
		return &Error{Kind: Protocol, Op: op, Err: fmt.Errorf("a %T connection cannot be half-closed", conn.Conn)}
	}
	if err := cw.CloseWrite(); err != nil {
		return s.ioFailed(ctx, op, fmt.Errorf("ending the probe: %w", err))
	}
	if err := conn.SetReadDeadline(time.Now().Add(s.cfg.IOTimeout)); err != nil {
		return s.ioFailed(ctx, op, fmt.Errorf("setting read deadline: %w", err))
	}
	rep := readReply(conn.Conn)
	switch {
	case errors.Is(rep.err, errNoReply):
		return nil // clamd accepted the chunk's length and then saw the connection end
	case rep.err != nil:
		return s.replyFailed(ctx, op, rep.err)
	case rep.line == sizeLimitReply:
		return &Error{Kind: Misconfigured, Op: op, Err: fmt.Errorf(
			"clamd refuses streams of %d bytes, the worker's input cap: set StreamMaxLength in clamd.conf to at least %d (and MaxFileSize to at least that, MaxScanSize to at least twice that), or lower the input cap",
			capBytes, capBytes)}
	default:
		return &Error{Kind: Protocol, Op: op, Err: fmt.Errorf("clamd answered an unfinished stream with %s", quote(rep.line))}
	}
}

// probeAlertExceedsMax scans a deeply nested zip and expects clamd's recursion-limit alert.
func (s *Scanner) probeAlertExceedsMax(ctx context.Context) error {
	const op = "checking clamd's AlertExceedsMax"
	probe := nestedZip(probeDepth)
	v, err := s.Scan(ctx, bytes.NewReader(probe), int64(len(probe)))
	switch {
	case err == nil && !v.Infected:
		return &Error{Kind: Misconfigured, Op: op, Err: fmt.Errorf(
			"clamd reported a zip nested %d levels deep as clean: AlertExceedsMax is off (or MaxRecursion is %d or more), so clamd would also report inputs over MaxFileSize, MaxScanSize or MaxScanTime as clean; set AlertExceedsMax yes in clamd.conf",
			probeDepth, probeDepth)}
	case err == nil:
		return &Error{Kind: Protocol, Op: op, Err: fmt.Errorf("clamd reported the probe (a nested zip of text) as %s", v.Signature)}
	case IsRefused(err) && strings.Contains(err.Error(), limitsHeuristic):
		return nil
	default:
		var e *Error
		if errors.As(err, &e) {
			return &Error{Kind: e.Kind, Op: op, Err: e.Err}
		}
		return err
	}
}

// nestedZip returns a zip holding a zip holding ... (depth levels) a short text file, all stored
// uncompressed.
func nestedZip(depth int) []byte {
	data, name := []byte("mediaworker clamd limit probe\n"), "probe.txt"
	for level := range depth {
		var buf bytes.Buffer
		zw := zip.NewWriter(&buf)
		// Writing to a bytes.Buffer cannot fail.
		w, _ := zw.CreateHeader(&zip.FileHeader{Name: name, Method: zip.Store})
		_, _ = w.Write(data)
		_ = zw.Close()
		data, name = buf.Bytes(), fmt.Sprintf("level%02d.zip", level)
	}
	return data
}
