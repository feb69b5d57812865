package scanner_test

import (
	"archive/zip"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clamd "github.com/dutchcoders/go-clamd"
	"go.uber.org/goleak"

	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/scanner"
)

// TestMain fails the package if any test leaves a goroutine behind (the scanner's reply reader and
// context hooks must all end with the call that started them).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// newScanner returns a Scanner for addr with the default config changed by mod.
func newScanner(t *testing.T, addr string, mod func(*scanner.Config)) *scanner.Scanner {
	t.Helper()
	cfg := scanner.DefaultConfig()
	cfg.Addr = addr
	if mod != nil {
		mod(&cfg)
	}
	s, err := scanner.New(cfg)
	if err != nil {
		t.Fatalf("creating scanner: %v", err)
	}
	return s
}

// testCtx bounds every test: a hung scan fails the test instead of the whole run.
func testCtx(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func scanBytes(ctx context.Context, s *scanner.Scanner, b []byte) (scanner.Verdict, error) {
	return s.Scan(ctx, bytes.NewReader(b), int64(len(b)))
}

func requireInfected(t *testing.T, v scanner.Verdict, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("scan failed: %v", err)
	}
	if !v.Infected || v.Signature != testenv.EICARSignature {
		t.Fatalf("verdict %+v, want infected with %s", v, testenv.EICARSignature)
	}
}

func requireClean(t *testing.T, v scanner.Verdict, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("scan failed: %v", err)
	}
	if v.Infected {
		t.Fatalf("verdict %+v, want clean", v)
	}
}

func requireKind(t *testing.T, v scanner.Verdict, err error, kind scanner.Kind) {
	t.Helper()
	var se *scanner.Error
	if !errors.As(err, &se) || se.Kind != kind {
		t.Fatalf("scan = %+v, %v; want a %q error", v, err, kind)
	}
	if v != (scanner.Verdict{}) {
		t.Fatalf("scan returned verdict %+v with its error", v)
	}
	t.Logf("as expected: %v", err)
}

// randomBytes returns n deterministic pseudo-random bytes: no file type clamd would unpack.
func randomBytes(n int, seed uint64) []byte {
	b := make([]byte, n)
	var key [32]byte
	key[0] = byte(seed)
	rand.NewChaCha8(key).Read(b)
	return b
}

// makeJPEG renders a real JPEG with libvips.
func makeJPEG(t *testing.T) []byte {
	t.Helper()
	vips := testenv.RequireBinary(t, "vips")
	path := filepath.Join(t.TempDir(), "photo.jpg")
	ctx := testCtx(t, 30*time.Second)
	if out, err := exec.CommandContext(ctx, vips, "gaussnoise", path+"[Q=80]", "320", "240").CombinedOutput(); err != nil {
		t.Fatalf("vips gaussnoise: %v\n%s", err, out)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte{0xff, 0xd8, 0xff}) || !bytes.HasSuffix(b, []byte{0xff, 0xd9}) {
		t.Fatalf("vips did not write a JPEG (%d bytes)", len(b))
	}
	return b
}

// makeZip returns a deflated zip holding name → content.
func makeZip(t *testing.T, name, content string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	w, err := zw.CreateHeader(&zip.FileHeader{Name: name, Method: zip.Deflate})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(w, content); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// failingReader yields the bytes of r, then fails with err.
type failingReader struct {
	r   io.Reader
	err error
}

func (f *failingReader) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if err == io.EOF {
		return n, f.err
	}
	return n, err
}

// hookReader yields the bytes of r and calls hook once after at least after bytes have been read.
type hookReader struct {
	r     io.Reader
	after int64
	read  int64
	hook  func()
}

func (h *hookReader) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	h.read += int64(n)
	if h.hook != nil && h.read >= h.after {
		h.hook()
		h.hook = nil
	}
	return n, err
}

// zeroes is an endless reader of zero bytes.
type zeroes struct{}

func (zeroes) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// TestScanWithClamd runs what a user of the scanner relies on against one real clamd with the dev
// signatures.
func TestScanWithClamd(t *testing.T) {
	t.Parallel()
	c := testenv.StartClamd(t)
	s := newScanner(t, c.Addr, nil)
	ctx := testCtx(t, 90*time.Second)
	eicar := []byte(testenv.EICAR)

	t.Run("ping and version", func(t *testing.T) {
		if err := s.Ping(ctx); err != nil {
			t.Fatalf("ping: %v", err)
		}
		v, err := s.Version(ctx)
		if err != nil || !strings.HasPrefix(v, "ClamAV 1.") {
			t.Fatalf("version = %q, %v", v, err)
		}
		t.Logf("clamd version: %s", v)
	})

	t.Run("clean bytes", func(t *testing.T) {
		v, err := scanBytes(ctx, s, []byte("hello, this is a perfectly ordinary upload\n"))
		requireClean(t, v, err)
	})

	t.Run("empty input", func(t *testing.T) {
		v, err := scanBytes(ctx, s, nil)
		requireClean(t, v, err)
	})

	t.Run("EICAR alone", func(t *testing.T) {
		v, err := scanBytes(ctx, s, eicar)
		requireInfected(t, v, err)
	})

	t.Run("EICAR appended to a JPEG", func(t *testing.T) {
		jpeg := makeJPEG(t)
		v, err := scanBytes(ctx, s, jpeg)
		requireClean(t, v, err) // the control: the picture itself is clean
		v, err = scanBytes(ctx, s, append(jpeg, eicar...))
		requireInfected(t, v, err)
	})

	t.Run("EICAR in a zip", func(t *testing.T) {
		z := makeZip(t, "docs/readme.txt", "some text before it\n"+testenv.EICAR+"\nand after\n")
		if bytes.Contains(z, eicar) {
			t.Fatal("the zip holds EICAR in plain text; the test would not show that clamd unpacks it")
		}
		v, err := scanBytes(ctx, s, z)
		requireInfected(t, v, err)
		v, err = scanBytes(ctx, s, makeZip(t, "readme.txt", "nothing to see here"))
		requireClean(t, v, err)
	})

	t.Run("unix socket", func(t *testing.T) {
		us := newScanner(t, c.SocketAddr, nil)
		if err := us.Ping(ctx); err != nil {
			t.Fatalf("ping over %s: %v", c.SocketAddr, err)
		}
		v, err := scanBytes(ctx, us, eicar)
		requireInfected(t, v, err)
	})

	t.Run("ScanFile", func(t *testing.T) {
		dir := t.TempDir()
		clean, infected := filepath.Join(dir, "clean.jpg"), filepath.Join(dir, "infected.jpg")
		jpeg := makeJPEG(t)
		if err := os.WriteFile(clean, jpeg, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(infected, append(jpeg, eicar...), 0o600); err != nil {
			t.Fatal(err)
		}
		v, err := s.ScanFile(ctx, clean)
		requireClean(t, v, err)
		v, err = s.ScanFile(ctx, infected)
		requireInfected(t, v, err)
		if _, err := s.ScanFile(ctx, dir); err == nil {
			t.Fatal("scanning a directory succeeded")
		}
		if _, err := s.ScanFile(ctx, filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("scanning a missing file: %v, want ErrNotExist", err)
		}
	})

	t.Run("reader error midway is an error, not clean", func(t *testing.T) {
		// What go-clamd turns into "stream: OK": the download breaks after 1 MiB of 2 MiB.
		boom := errors.New("connection reset by object store")
		r := &failingReader{r: bytes.NewReader(randomBytes(1<<20, 1)), err: boom}
		v, err := s.Scan(ctx, r, 2<<20)
		requireKind(t, v, err, scanner.Truncated)
		if !errors.Is(err, boom) {
			t.Fatalf("error %v does not wrap the reader's error", err)
		}
	})

	t.Run("fewer bytes than size", func(t *testing.T) {
		v, err := s.Scan(ctx, bytes.NewReader(randomBytes(1000, 2)), 1001)
		requireKind(t, v, err, scanner.Truncated)
		// Short by a whole chunk and more, and nothing at all.
		v, err = s.Scan(ctx, bytes.NewReader(randomBytes(300<<10, 2)), 3<<20)
		requireKind(t, v, err, scanner.Truncated)
		v, err = s.Scan(ctx, bytes.NewReader(nil), 10)
		requireKind(t, v, err, scanner.Truncated)
	})

	t.Run("more bytes than size", func(t *testing.T) {
		// The EICAR beyond size would never reach clamd: the size is wrong, so there is no verdict.
		b := append(randomBytes(1000, 3), eicar...)
		v, err := s.Scan(ctx, bytes.NewReader(b), 1000)
		requireKind(t, v, err, scanner.Truncated)
	})

	t.Run("EICAR across a chunk boundary", func(t *testing.T) {
		chunk := scanner.DefaultConfig().ChunkSize
		b := randomBytes(chunk+1000, 4)
		copy(b[chunk-30:], eicar)
		v, err := scanBytes(ctx, s, b)
		requireInfected(t, v, err)
	})

	t.Run("50 MB", func(t *testing.T) {
		const size = 50 << 20
		data := randomBytes(size, 5)
		start := time.Now()
		v, err := scanBytes(ctx, s, data)
		requireClean(t, v, err)
		t.Logf("clean 50 MiB scanned in %s", time.Since(start).Round(time.Millisecond))
		// EICAR as the very last bytes: found only if every chunk arrived, in order.
		v, err = s.Scan(ctx, io.MultiReader(bytes.NewReader(data), strings.NewReader(testenv.EICAR)), size+int64(len(eicar)))
		requireInfected(t, v, err)
	})

	t.Run("concurrent scans", func(t *testing.T) {
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for i := range 8 {
			wg.Go(func() {
				b := randomBytes(2<<20, uint64(10+i))
				infected := i%2 == 0
				if infected {
					copy(b[1<<20:], eicar)
				}
				v, err := scanBytes(ctx, s, b)
				if err != nil || v.Infected != infected {
					errs <- fmt.Errorf("scan %d: %+v, %v; want infected=%v", i, v, err, infected)
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})

	t.Run("cancel mid-scan returns promptly", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		// The reader itself ignores ctx (the worst case); the scan must still stop at the next write.
		r := &hookReader{r: zeroes{}, after: 4 << 20, hook: cancel}
		start := time.Now()
		v, err := s.Scan(cctx, r, 400<<20)
		elapsed := time.Since(start)
		requireKind(t, v, err, scanner.Canceled)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("error %v does not wrap context.Canceled", err)
		}
		if elapsed > 5*time.Second || r.read > 64<<20 {
			t.Fatalf("scan went on for %s and %d bytes after cancel", elapsed, r.read)
		}
		// clamd is fine afterwards.
		v, err = scanBytes(ctx, s, eicar)
		requireInfected(t, v, err)
	})

	t.Run("go-clamd reports a broken stream as OK", func(t *testing.T) {
		// Why ScanStream is not used (see instream.go): the same broken download as above.
		gc := clamd.NewClamd(c.Addr)
		abort := make(chan bool)
		defer close(abort) // ends go-clamd's abort goroutine, which otherwise leaks
		r := &failingReader{r: bytes.NewReader(randomBytes(1<<20, 1)), err: errors.New("broken")}
		ch, err := gc.ScanStream(r, abort)
		if err != nil {
			t.Fatalf("go-clamd ScanStream: %v", err)
		}
		var raws []string
		for res := range ch {
			raws = append(raws, res.Raw)
		}
		if len(raws) != 1 || raws[0] != "stream: OK" {
			t.Fatalf("go-clamd now replies %q for a broken stream; revisit instream.go's comment", raws)
		}
	})
}

// TestScanOverClamdLimits checks that input clamd cannot scan in full is refused, never clean, with a
// clamd whose limits are small enough to reach in a test.
func TestScanOverClamdLimits(t *testing.T) {
	t.Parallel()
	c := testenv.StartClamdWith(t, map[string]string{
		"StreamMaxLength": "2M",
		"MaxFileSize":     "1M",
		"MaxScanSize":     "1M",
	})
	// MaxStreamBytes above clamd's StreamMaxLength is a misconfiguration, which is what we test.
	s := newScanner(t, c.Addr, func(cfg *scanner.Config) { cfg.MaxStreamBytes = 64 << 20 })
	ctx := testCtx(t, 60*time.Second)

	t.Run("above StreamMaxLength", func(t *testing.T) {
		for _, size := range []int{2<<20 + 1, 3 << 20, 40 << 20} {
			v, err := scanBytes(ctx, s, randomBytes(size, 6))
			requireKind(t, v, err, scanner.LimitExceeded)
			if !scanner.IsRefused(err) || !strings.Contains(err.Error(), "INSTREAM size limit exceeded") {
				t.Fatalf("%d bytes: %v, want clamd's INSTREAM size limit refusal", size, err)
			}
		}
	})

	t.Run("above MaxFileSize", func(t *testing.T) {
		v, err := scanBytes(ctx, s, randomBytes(1<<20+(512<<10), 7))
		requireKind(t, v, err, scanner.LimitExceeded)
		if !strings.Contains(err.Error(), "Heuristics.Limits.Exceeded") {
			t.Fatalf("error %v should name clamd's limits heuristic", err)
		}
	})

	t.Run("within the limits", func(t *testing.T) {
		v, err := scanBytes(ctx, s, append(randomBytes(512<<10, 8), testenv.EICAR...))
		requireInfected(t, v, err)
	})
}

// TestScanClamdDown checks that a stopped or dying clamd is reported as unavailable (transient), never
// as a verdict, and that the scanner recovers when clamd is back.
func TestScanClamdDown(t *testing.T) {
	t.Parallel()
	c := testenv.StartClamd(t)
	s := newScanner(t, c.Addr, nil)
	ctx := testCtx(t, 90*time.Second)
	eicar := []byte(testenv.EICAR)

	c.Stop()
	v, err := scanBytes(ctx, s, eicar)
	requireKind(t, v, err, scanner.Unavailable)
	if !scanner.IsUnavailable(err) || scanner.IsRefused(err) {
		t.Fatalf("stopped clamd: %v should be unavailable and not refused", err)
	}
	if err := s.Ping(ctx); !scanner.IsUnavailable(err) {
		t.Fatalf("ping with clamd stopped: %v, want unavailable", err)
	}
	if _, err := s.Version(ctx); !scanner.IsUnavailable(err) {
		t.Fatalf("version with clamd stopped: %v, want unavailable", err)
	}

	c.Start()
	v, err = scanBytes(ctx, s, eicar)
	requireInfected(t, v, err)

	// clamd dies while the input is being sent.
	r := &hookReader{r: bytes.NewReader(randomBytes(20<<20, 9)), after: 2 << 20, hook: c.Stop}
	v, err = s.Scan(ctx, r, 20<<20)
	requireKind(t, v, err, scanner.Unavailable)

	c.Start()
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("ping after restart: %v", err)
	}
}
