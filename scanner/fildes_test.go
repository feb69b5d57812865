package scanner_test

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/scanner"
)

// TestScanFileInPlace checks FILDES against a real clamd: on its unix socket ScanFile hands clamd the
// open file instead of streaming it. StreamMaxLength is set far below the files scanned, so a verdict
// on them proves the bytes did not go through INSTREAM (the same file over TCP is refused), while
// MaxFileSize still refuses what clamd cannot scan in full.
func TestScanFileInPlace(t *testing.T) {
	t.Parallel()
	c := testenv.StartClamdWith(t, map[string]string{
		"StreamMaxLength": "64K",
		"MaxFileSize":     "1M",
		"MaxScanSize":     "1M",
	})
	ctx := testCtx(t, 60*time.Second)
	local := newScanner(t, c.SocketAddr, nil)
	remote := newScanner(t, c.Addr, nil)
	if !local.ScansInPlace() || remote.ScansInPlace() {
		t.Fatalf("ScansInPlace: unix %v, tcp %v; want true, false", local.ScansInPlace(), remote.ScansInPlace())
	}

	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	jpeg := makeJPEG(t)
	padding := randomBytes(256<<10, 11) // over StreamMaxLength, under MaxFileSize
	clean := write("clean.jpg", append(append([]byte{}, jpeg...), padding...))
	infected := write("infected.jpg", append(append(append([]byte{}, jpeg...), padding...), testenv.EICAR...))
	zipped := write("docs.zip", makeZip(t, "readme.txt", string(padding)+testenv.EICAR))
	tooBig := write("big.bin", randomBytes(1<<20+(512<<10), 12))

	v, err := local.ScanFile(ctx, clean)
	requireClean(t, v, err)
	v, err = local.ScanFile(ctx, infected)
	requireInfected(t, v, err)
	v, err = local.ScanFile(ctx, zipped)
	requireInfected(t, v, err)

	v, err = local.ScanFile(ctx, tooBig)
	requireKind(t, v, err, scanner.LimitExceeded)
	if !scanner.IsRefused(err) || !strings.Contains(err.Error(), "Heuristics.Limits.Exceeded") {
		t.Fatalf("a file over MaxFileSize: %v, want clamd's limits heuristic as a refusal", err)
	}

	// The same clean file streamed over TCP meets StreamMaxLength: the verdict above was FILDES.
	v, err = remote.ScanFile(ctx, clean)
	requireKind(t, v, err, scanner.LimitExceeded)
	if !strings.Contains(err.Error(), "INSTREAM size limit exceeded") {
		t.Fatalf("streaming the file over TCP: %v, want clamd's INSTREAM size limit", err)
	}

	small := newScanner(t, c.SocketAddr, func(cfg *scanner.Config) { cfg.MaxStreamBytes = 1 << 10 })
	v, err = small.ScanFile(ctx, clean)
	requireKind(t, v, err, scanner.LimitExceeded)
}

// fakeUnixClamd is a clamd on a unix socket that receives one FILDES descriptor per connection and
// answers with reply(file), the file being the descriptor it was handed.
func fakeUnixClamd(t *testing.T, reply func(f *os.File) string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "mw-fake-") // short: unix socket paths are limited to ~108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "clamd.ctl")
	f := startFakeOn(t, "unix", path, func(c net.Conn) {
		if cmd, err := readCommand(c); err != nil || cmd != "zFILDES" {
			return
		}
		buf, oob := make([]byte, 1), make([]byte, syscall.CmsgSpace(4))
		_, oobn, _, _, err := c.(*net.UnixConn).ReadMsgUnix(buf, oob)
		if err != nil {
			return
		}
		msgs, err := syscall.ParseSocketControlMessage(oob[:oobn])
		if err != nil || len(msgs) != 1 {
			return
		}
		fds, err := syscall.ParseUnixRights(&msgs[0])
		if err != nil || len(fds) != 1 {
			return
		}
		file := os.NewFile(uintptr(fds[0]), "passed")
		defer file.Close()
		if r := reply(file); r != "" {
			c.Write([]byte(r + "\x00"))
		}
	})
	return f.Addr
}

// TestScanFileInPlaceReplies checks what only a fake clamd can produce on demand: odd replies, a
// descriptor that is never answered, and a file that changes while clamd reads it.
func TestScanFileInPlaceReplies(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 30*time.Second)
	dir := t.TempDir()
	path := filepath.Join(dir, "photo.jpg")
	content := []byte("not really a photo, but bytes to scan")
	if err := os.WriteFile(path, content, 0o600); err != nil {
		t.Fatal(err)
	}

	t.Run("clamd reads the very file", func(t *testing.T) {
		var got []byte
		addr := fakeUnixClamd(t, func(f *os.File) string {
			got = make([]byte, 100)
			n, _ := f.ReadAt(got, 0)
			got = got[:n]
			return "fd[12]: OK"
		})
		v, err := fastScanner(t, addr).ScanFile(ctx, path)
		requireClean(t, v, err)
		if string(got) != string(content) {
			t.Fatalf("clamd read %q through the descriptor, want %q", got, content)
		}
	})

	for _, tc := range []struct {
		reply string
		kind  scanner.Kind
	}{
		{"fd[7]: " + testenv.EICARSignature + " FOUND", 0},
		{"fd[7]: Heuristics.Limits.Exceeded.MaxScanSize FOUND", scanner.LimitExceeded},
		{"stream: OK", scanner.Protocol}, // an INSTREAM reply is not a FILDES verdict
		{"fd[x]: OK", scanner.Protocol},
		{"fd[7]: OK trailing", scanner.Protocol},
		{"fd[7]: lstat() failed: No such file or directory. ERROR", scanner.Protocol},
		{"", scanner.Unavailable}, // closed without a reply
	} {
		t.Run(tc.reply, func(t *testing.T) {
			addr := fakeUnixClamd(t, func(*os.File) string { return tc.reply })
			v, err := fastScanner(t, addr).ScanFile(ctx, path)
			if tc.kind == 0 {
				requireInfected(t, v, err)
				return
			}
			requireKind(t, v, err, tc.kind)
		})
	}

	t.Run("a file that changes during the scan", func(t *testing.T) {
		addr := fakeUnixClamd(t, func(*os.File) string {
			if err := os.WriteFile(path, append(content, "more"...), 0o600); err != nil {
				t.Error(err)
			}
			return "fd[9]: OK"
		})
		v, err := fastScanner(t, addr).ScanFile(ctx, path)
		requireKind(t, v, err, scanner.Truncated)
		if !strings.Contains(err.Error(), "changed while clamd scanned it") {
			t.Fatalf("error %v should say the file changed", err)
		}
	})
}
