package scanner

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"
)

// Scanning a file in place: when clamd listens on a unix socket (so it runs on this machine), ScanFile
// hands clamd the open file with zFILDES instead of streaming its bytes with zINSTREAM. clamd then
// reads the file through the descriptor: no copy through the socket on either side, and no temporary
// copy that clamd writes to its TemporaryDirectory before it scans (INSTREAM always makes one). With
// the dev signatures that is about a fifth of clamd's CPU per byte (20 → 16 ms per MiB of a PNG,
// clamdscan --stream vs --fdpass, measured on the CI machine; the rest is its pattern matchers), and it
// needs no StreamMaxLength. clamd's MaxFileSize and MaxScanSize still apply, and with AlertExceedsMax
// an input over them is refused, as with INSTREAM.
//
// The descriptor is passed as SCM_RIGHTS ancillary data with one dummy byte (clamd(8), FILDES). clamd
// gets only this read-only descriptor, not a path, so it needs no permission on the worker's scratch
// directory.

// ScansInPlace says whether ScanFile passes the file to clamd (a unix socket address) rather than
// streaming it. The pipeline then writes the download to disk only and scans the finished file.
func (s *Scanner) ScansInPlace() bool { return s.network == "unix" }

// scanDescriptor scans exactly size bytes of f with zFILDES. f must be a regular file of that size,
// which nothing writes while it is scanned: its size and modification time are compared before and
// after, so a file that changed is an error, never a verdict.
func (s *Scanner) scanDescriptor(ctx context.Context, f *os.File, before os.FileInfo) (Verdict, error) {
	const op = "scanning file"
	size := before.Size()
	conn, err := s.connectFor(ctx, op, size)
	if err != nil {
		return Verdict{}, err
	}
	defer conn.close()
	uc, ok := conn.Conn.(*net.UnixConn)
	if !ok {
		return Verdict{}, &Error{Kind: Unavailable, Op: op, Err: errors.New("FILDES needs a unix socket")}
	}
	if err := conn.write([]byte("zFILDES\x00")); err != nil {
		return Verdict{}, s.ioFailed(ctx, op, fmt.Errorf("sending FILDES: %w", err))
	}
	if err := uc.SetWriteDeadline(time.Now().Add(s.cfg.IOTimeout)); err != nil {
		return Verdict{}, s.ioFailed(ctx, op, fmt.Errorf("setting write deadline: %w", err))
	}
	if _, _, err := uc.WriteMsgUnix([]byte{0}, syscall.UnixRights(int(f.Fd())), nil); err != nil {
		return Verdict{}, s.ioFailed(ctx, op, fmt.Errorf("passing the file descriptor: %w", err))
	}
	// Now clamd scans; the verdict may take a while for a large file.
	if err := uc.SetReadDeadline(time.Now().Add(s.cfg.ScanTimeout)); err != nil {
		return Verdict{}, s.ioFailed(ctx, op, fmt.Errorf("setting read deadline: %w", err))
	}
	rep := readReply(uc)
	if rep.err != nil {
		return Verdict{}, s.replyFailed(ctx, op, rep.err)
	}
	v, perr := parseVerdict(rep.line, op, cutDescriptorPrefix)
	if perr != nil {
		return Verdict{}, perr
	}
	after, err := f.Stat()
	if err != nil {
		return Verdict{}, &Error{Kind: Truncated, Op: op, Err: fmt.Errorf("inspecting the file after its scan: %w", err)}
	}
	if after.Size() != size || !after.ModTime().Equal(before.ModTime()) {
		return Verdict{}, &Error{Kind: Truncated, Op: op,
			Err: fmt.Errorf("the file changed while clamd scanned it (%d bytes before, %d after)", size, after.Size())}
	}
	return v, nil
}
