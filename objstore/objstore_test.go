package objstore_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mediaworker/mediaworker/objstore"
)

// The contract suite runs against real backends (objstore/s3, objstore/natsobj). These tests cover
// the helpers' own promises, including against a store that misbehaves in ways a real one only does
// under races or bugs, which is why a scripted store is used here.

func TestObjectURL(t *testing.T) {
	for _, c := range []struct{ base, key, want string }{
		{"http://h:9000/media", "a/b.jpg", "http://h:9000/media/a/b.jpg"},
		{"http://h:9000/media/", "a b/c d.jpg", "http://h:9000/media/a%20b/c%20d.jpg"},
		{"https://cdn/x", "日本/ü?#%.png", "https://cdn/x/%E6%97%A5%E6%9C%AC/%C3%BC%3F%23%25.png"},
		{"https://cdn/x", "plus+amp&.webp", "https://cdn/x/plus+amp&.webp"},
	} {
		if got := objstore.ObjectURL(c.base, c.key); got != c.want {
			t.Errorf("ObjectURL(%q, %q) = %q, want %q", c.base, c.key, got, c.want)
		}
	}
}

func TestTooLargeErrorMessage(t *testing.T) {
	err := &objstore.TooLargeError{Size: 120_000_000, Limit: 100_000_000}
	if got, want := err.Error(), "object is 120.0 MB, limit is 100.0 MB"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	for n, want := range map[int64]string{0: "0 bytes", 999: "999 bytes", 1500: "1.5 KB", 5_368_709_120: "5.4 GB"} {
		if got := objstore.FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestValidateKey(t *testing.T) {
	for _, k := range []string{"a", "a/b/c.jpg", "with space/ü.png", "a.b/..c/d..", strings.Repeat("k", 1024)} {
		if err := objstore.ValidateKey(k); err != nil {
			t.Errorf("ValidateKey(%q) = %v", k, err)
		}
	}
	for _, k := range []string{"", "/a", "a/", "a//b", ".", "..", "a/./b", "a/../b", "x\x00", "x\ny", "\xff", strings.Repeat("k", 1025)} {
		if err := objstore.ValidateKey(k); !errors.Is(err, objstore.ErrInvalidName) {
			t.Errorf("ValidateKey(%q) = %v, want ErrInvalidName", k, err)
		}
	}
}

func TestExactReader(t *testing.T) {
	got, err := io.ReadAll(objstore.ExactReader(strings.NewReader("0123456789"), 4))
	if err != nil || string(got) != "0123" {
		t.Errorf("longer reader: %q, %v", got, err)
	}
	got, err = io.ReadAll(objstore.ExactReader(strings.NewReader("01"), 4))
	var short *objstore.ShortReadError
	if !errors.As(err, &short) || short.Got != 2 || short.Want != 4 || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("short reader: %q, %v", got, err)
	}
	// The reader under it is not asked for more than size bytes.
	r := &countingReader{r: strings.NewReader("0123456789")}
	_, _ = io.ReadAll(objstore.ExactReader(r, 4))
	if r.n != 4 {
		t.Errorf("read %d bytes from the source, want 4", r.n)
	}
}

func TestDownloadFileRefusesOverrun(t *testing.T) {
	// The store announces 500 bytes, then sends 1000 (a concurrent overwrite or a broken store).
	s := &scriptedStore{info: objstore.Info{Size: 500}, body: bytes.Repeat([]byte("x"), 1000)}
	for _, limit := range []int64{0, 600} {
		path := filepath.Join(t.TempDir(), "f")
		_, err := objstore.DownloadFile(t.Context(), s, "b", "k", path, limit)
		if err == nil || !strings.Contains(err.Error(), "more bytes than the 500 it announced") {
			t.Errorf("DownloadFile (limit %d) of an overrunning store = %v", limit, err)
		}
		if objstore.IsPermanent(err) {
			t.Errorf("overrun reported as permanent: %v", err)
		}
		if s.written != 500 {
			t.Errorf("%d bytes were accepted, want the 500 announced", s.written)
		}
		requireNoFile(t, path)
	}
}

func TestDownloadFileRefusesShortStream(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	s := &scriptedStore{info: objstore.Info{Size: 500}, body: make([]byte, 300)}
	_, err := objstore.DownloadFile(t.Context(), s, "b", "k", path, 0)
	if err == nil || !strings.Contains(err.Error(), "300 of the 500") {
		t.Errorf("DownloadFile of a short stream = %v", err)
	}
	requireNoFile(t, path)
}

func TestDownloadFileKeepsExistingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := &scriptedStore{info: objstore.Info{Size: 3}, body: []byte("new")}
	if _, err := objstore.DownloadFile(t.Context(), s, "b", "k", path, 0); err == nil {
		t.Error("DownloadFile overwrote an existing file")
	}
	if b, _ := os.ReadFile(path); string(b) != "mine" {
		t.Errorf("existing file now holds %q", b)
	}
}

// A digest Stat reported vouches for the bytes only when the download reads that very version: a store
// that looks the object up again (no StattedGetter) may deliver a newer one, so the tee and the
// returned Info must not carry it.
func TestDownloadStattedPassesADigestOnlyForTheStattedVersion(t *testing.T) {
	body := []byte("new bytes")
	stale := sha256.Sum256([]byte("old bytes"))
	s := &scriptedStore{info: objstore.Info{Size: int64(len(body)), SHA256: stale[:], Sys: "a version"}, body: body}
	var teeSaw []byte
	info, err := objstore.DownloadStatted(t.Context(), s, s.info, filepath.Join(t.TempDir(), "f"), 0,
		func(i objstore.Info) io.Writer { teeSaw = i.SHA256; return nil })
	if err != nil {
		t.Fatal(err)
	}
	if teeSaw != nil || info.SHA256 != nil {
		t.Errorf("a store without StattedGetter: the tee saw digest %x and the result carries %x; want none", teeSaw, info.SHA256)
	}
}

func TestUploadFileRefusesDirectory(t *testing.T) {
	if _, err := objstore.UploadFile(t.Context(), &scriptedStore{}, "b", "k", t.TempDir(), "x/y"); err == nil {
		t.Error("UploadFile of a directory succeeded")
	}
}

// scriptedStore serves one object whose Stat and Get disagree as scripted.
type scriptedStore struct {
	objstore.Store // other methods are not used
	info           objstore.Info
	body           []byte
	written        int64
}

func (s *scriptedStore) Stat(context.Context, string, string) (objstore.Info, error) {
	return s.info, nil
}

func (s *scriptedStore) Get(_ context.Context, _, _ string, w io.Writer) (int64, error) {
	var n int64
	for b := s.body; len(b) > 0; {
		chunk := b[:min(100, len(b))]
		m, err := w.Write(chunk)
		n += int64(m)
		s.written = n
		if err != nil {
			return n, err
		}
		b = b[len(chunk):]
	}
	return n, nil
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

func requireNoFile(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s exists after a failed download (%v)", path, err)
	}
}
