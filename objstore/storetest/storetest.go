// Package storetest is the contract suite every objstore.Store backend passes. A backend's test
// starts the real service and calls Run; the suite checks what the job pipeline relies on, from the
// caller's side only: bytes, sizes, content types, error kinds, and how fast a cancelled call returns.
package storetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/objstore"
)

// opTimeout bounds every call the suite makes, so a hung backend fails the test instead of the run.
const opTimeout = 60 * time.Second

// Run runs the suite. newStore is called once per subtest and returns a Store on a running backend
// that is shared by the subtests; the suite closes each Store and uses fresh bucket names, so
// subtests do not see each other's objects.
func Run(t *testing.T, newStore func(t *testing.T) objstore.Store) {
	open := func(t *testing.T) objstore.Store {
		t.Helper()
		s := newStore(t)
		t.Cleanup(func() { _ = s.Close() })
		return s
	}

	t.Run("RoundTrip", func(t *testing.T) { testRoundTrip(t, open(t)) })
	t.Run("UnknownSize", func(t *testing.T) { testUnknownSize(t, open(t)) })
	t.Run("Keys", func(t *testing.T) { testKeys(t, open(t)) })
	t.Run("Missing", func(t *testing.T) { testMissing(t, open(t)) })
	t.Run("InvalidNames", func(t *testing.T) { testInvalidNames(t, open(t)) })
	t.Run("Delete", func(t *testing.T) { testDelete(t, open(t)) })
	t.Run("Copy", func(t *testing.T) { testCopy(t, open(t)) })
	t.Run("EnsureBucket", func(t *testing.T) { testEnsureBucket(t, open(t)) })
	t.Run("OverwriteShrinks", func(t *testing.T) { testOverwriteShrinks(t, open(t)) })
	t.Run("PutExactSize", func(t *testing.T) { testPutExactSize(t, open(t)) })
	t.Run("DownloadFile", func(t *testing.T) { testDownloadFile(t, open(t)) })
	t.Run("UploadFile", func(t *testing.T) { testUploadFile(t, open(t)) })
	t.Run("Concurrent", func(t *testing.T) { testConcurrent(t, open(t)) })
	t.Run("ReadHead", func(t *testing.T) { testReadHead(t, open(t)) })
	t.Run("GetRange", func(t *testing.T) { testGetRange(t, open(t)) })
	t.Run("GetCancel", func(t *testing.T) { testGetCancel(t, open(t)) })
	t.Run("CancelledContext", func(t *testing.T) { testCancelledContext(t, open(t)) })
	t.Run("VariantMarker", func(t *testing.T) { testVariantMarker(t, open(t)) })
	t.Run("StattedVersion", func(t *testing.T) { testStattedVersion(t, open(t)) })
	t.Run("Tag", func(t *testing.T) { testTag(t, open(t)) })
	t.Run("VariantCopy", func(t *testing.T) { testVariantCopy(t, open(t)) })
	t.Run("Ping", func(t *testing.T) {
		if err := open(t).Ping(ctx(t)); err != nil {
			t.Fatalf("Ping: %v", err)
		}
	})
	t.Run("Close", func(t *testing.T) { testClose(t, newStore(t)) })
}

func testRoundTrip(t *testing.T, s objstore.Store) {
	b := newBucket(t, s)
	const key = "uploads/2024/clip.mp4"
	// Not a multiple of any chunk or part size, and big enough to take many chunks / a full body.
	const size = 6<<20 + 12345
	start := time.Now()
	if err := s.Put(ctx(t), b, key, payload(1, size), size, "video/mp4"); err != nil {
		t.Fatalf("Put: %v", err)
	}
	info, err := s.Stat(ctx(t), b, key)
	if err != nil {
		t.Fatalf("Stat: %v", err)
	}
	want := objstore.Info{Bucket: b, Key: key, Size: size, ContentType: "video/mp4"}
	if info.Bucket != want.Bucket || info.Key != want.Key || info.Size != want.Size || info.ContentType != want.ContentType {
		t.Errorf("Stat = %+v, want %+v", info, want)
	}
	// Servers keep whole seconds; allow for that and a little clock skew.
	if info.ModTime.Before(start.Add(-time.Minute)) || info.ModTime.After(time.Now().Add(time.Minute)) {
		t.Errorf("Stat ModTime = %s, want about %s", info.ModTime, start)
	}
	requireContent(t, s, b, key, 1, size)
}

func testUnknownSize(t *testing.T, s objstore.Store) {
	b := newBucket(t, s)
	// Larger than one 16 MiB S3 part, so a multipart upload of unknown length is exercised.
	const size = 17<<20 + 1
	if err := s.Put(ctx(t), b, "stream.bin", payload(2, size), -1, "application/octet-stream"); err != nil {
		t.Fatalf("Put(size -1): %v", err)
	}
	info, err := s.Stat(ctx(t), b, "stream.bin")
	if err != nil {
		t.Fatalf("Stat: %v", err)
	}
	if info.Size != size {
		t.Errorf("Stat size = %d, want %d", info.Size, size)
	}
	requireContent(t, s, b, "stream.bin", 2, size)
}

func testKeys(t *testing.T, s objstore.Store) {
	b := newBucket(t, s)
	keys := []string{
		"a/b/c/d.txt",
		"with space/file name.jpg",
		"unicode/日本語/ファイル 名.png",
		"emoji/🎬 clip.mp4",
		"dots.in/na.me.v1.2.jpg",
		"symbols/plus+amp&eq=at@comma,semi;dollar$.jpg",
		"percent/100%25 real%.jpg",
		"query?and#hash.jpg",
		"single",
	}
	for _, key := range keys {
		body := []byte("content of " + key)
		if err := s.Put(ctx(t), b, key, bytes.NewReader(body), int64(len(body)), "text/plain"); err != nil {
			t.Errorf("Put %q: %v", key, err)
			continue
		}
		info, err := s.Stat(ctx(t), b, key)
		if err != nil || info.Size != int64(len(body)) || info.Key != key {
			t.Errorf("Stat %q = %+v, %v", key, info, err)
		}
		var got bytes.Buffer
		if _, err := s.Get(ctx(t), b, key, &got); err != nil || !bytes.Equal(got.Bytes(), body) {
			t.Errorf("Get %q = %q, %v; want %q", key, got.Bytes(), err, body)
		}

		raw := s.URL(b, key)
		u, err := url.Parse(raw)
		if err != nil {
			t.Errorf("URL(%q) = %q does not parse: %v", key, raw, err)
			continue
		}
		if strings.ContainsAny(raw, " ") || u.RawQuery != "" || u.Fragment != "" {
			t.Errorf("URL(%q) = %q is not fully escaped", key, raw)
		}
		if want := "/" + b + "/" + key; !strings.HasSuffix(u.Path, want) {
			t.Errorf("URL(%q) = %q: path %q does not end in %q", key, raw, u.Path, want)
		}
	}
}

func testMissing(t *testing.T, s objstore.Store) {
	b := newBucket(t, s)
	missingBucket := bucketName()
	cases := []struct{ name, bucket, key string }{
		{"key", b, "no/such/key.jpg"},
		{"bucket", missingBucket, "key.jpg"},
	}
	for _, c := range cases {
		_, err := s.Stat(ctx(t), c.bucket, c.key)
		requireNotFound(t, "Stat missing "+c.name, err, c.key)
		var w bytes.Buffer
		n, err := s.Get(ctx(t), c.bucket, c.key, &w)
		requireNotFound(t, "Get missing "+c.name, err, c.key)
		if n != 0 || w.Len() != 0 {
			t.Errorf("Get missing %s wrote %d bytes", c.name, w.Len())
		}
	}
	// Put does not create buckets: a request naming a bucket that does not exist is permanent.
	err := s.Put(ctx(t), missingBucket, "k", strings.NewReader("x"), 1, "text/plain")
	requireNotFound(t, "Put into missing bucket", err, "k")
}

func testInvalidNames(t *testing.T, s objstore.Store) {
	b := newBucket(t, s)
	const bad = "bad..name!"
	_, err := s.Stat(ctx(t), bad, "k")
	if !errors.Is(err, objstore.ErrInvalidName) || !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("Stat in bucket %q = %v, want ErrInvalidName and ErrNotFound", bad, err)
	}
	err = s.Put(ctx(t), bad, "k", strings.NewReader("x"), 1, "text/plain")
	if !errors.Is(err, objstore.ErrInvalidName) || errors.Is(err, objstore.ErrNotFound) || !objstore.IsPermanent(err) {
		t.Errorf("Put in bucket %q = %v, want a permanent ErrInvalidName only", bad, err)
	}
	if err := s.EnsureBucket(ctx(t), bad); !errors.Is(err, objstore.ErrInvalidName) {
		t.Errorf("EnsureBucket(%q) = %v, want ErrInvalidName", bad, err)
	}

	// Keys that one backend or another refuses or rewrites are refused by all.
	for _, key := range []string{"", "/leading", "a//b", "trailing/", "./x", "a/../b", "a/./b", "nul\x00", "ctl\x01x", "bad\xffutf8"} {
		if err := s.Put(ctx(t), b, key, strings.NewReader("x"), 1, "text/plain"); !errors.Is(err, objstore.ErrInvalidName) {
			t.Errorf("Put of key %q = %v, want ErrInvalidName", key, err)
		}
		if _, err := s.Stat(ctx(t), b, key); !errors.Is(err, objstore.ErrInvalidName) || !errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("Stat of key %q = %v, want ErrInvalidName and ErrNotFound", key, err)
		}
		if _, err := s.Get(ctx(t), b, key, io.Discard); !errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("Get of key %q = %v, want ErrNotFound", key, err)
		}
		if err := s.Delete(ctx(t), b, key); err != nil {
			t.Errorf("Delete of key %q = %v, want nil (it cannot exist)", key, err)
		}
	}
}

func testDelete(t *testing.T, s objstore.Store) {
	b := newBucket(t, s)
	putString(t, s, b, "dir/gone.txt", "bye")
	for i := range 2 {
		if err := s.Delete(ctx(t), b, "dir/gone.txt"); err != nil {
			t.Fatalf("Delete #%d: %v", i+1, err)
		}
	}
	_, err := s.Stat(ctx(t), b, "dir/gone.txt")
	requireNotFound(t, "Stat after Delete", err, "dir/gone.txt")
	_, err = s.Get(ctx(t), b, "dir/gone.txt", io.Discard)
	requireNotFound(t, "Get after Delete", err, "dir/gone.txt")
	if err := s.Delete(ctx(t), b, "never/existed"); err != nil {
		t.Errorf("Delete of a missing key: %v", err)
	}
	if err := s.Delete(ctx(t), bucketName(), "k"); err != nil {
		t.Errorf("Delete in a missing bucket: %v", err)
	}
	// Deleting and putting again under the same key works (a retried job re-uploads).
	putString(t, s, b, "dir/gone.txt", "back")
	requireString(t, s, b, "dir/gone.txt", "back")
}

func testCopy(t *testing.T, s objstore.Store) {
	src := newBucket(t, s)
	dst := bucketName() // Copy must create it
	const size = 300<<10 + 7
	if err := s.Put(ctx(t), src, "in/photo.jpg", payload(3, size), size, "image/jpeg"); err != nil {
		t.Fatalf("Put: %v", err)
	}
	if err := s.Copy(ctx(t), src, "in/photo.jpg", dst, "quarantine/photo.jpg"); err != nil {
		t.Fatalf("Copy to a new bucket: %v", err)
	}
	info, err := s.Stat(ctx(t), dst, "quarantine/photo.jpg")
	if err != nil || info.Size != size || info.ContentType != "image/jpeg" {
		t.Errorf("Stat of copy = %+v, %v; want size %d, image/jpeg", info, err, size)
	}
	requireContent(t, s, dst, "quarantine/photo.jpg", 3, size)
	requireContent(t, s, src, "in/photo.jpg", 3, size) // the source stays

	// Within a bucket, over an existing object, and onto itself.
	putString(t, s, src, "other.txt", "old")
	if err := s.Copy(ctx(t), src, "in/photo.jpg", src, "other.txt"); err != nil {
		t.Fatalf("Copy over an existing object: %v", err)
	}
	requireContent(t, s, src, "other.txt", 3, size)
	if err := s.Copy(ctx(t), src, "in/photo.jpg", src, "in/photo.jpg"); err != nil {
		t.Errorf("Copy onto itself: %v", err)
	}
	requireContent(t, s, src, "in/photo.jpg", 3, size)

	if err := s.Copy(ctx(t), src, "in/photo.jpg", dst, "../escape.jpg"); !errors.Is(err, objstore.ErrInvalidName) {
		t.Errorf("Copy to an invalid key = %v, want ErrInvalidName", err)
	}
	err = s.Copy(ctx(t), src, "no/such.jpg", dst, "x.jpg")
	requireNotFound(t, "Copy of a missing object", err, "no/such.jpg")
	if _, err := s.Stat(ctx(t), dst, "x.jpg"); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("failed Copy left an object: %v", err)
	}
}

func testEnsureBucket(t *testing.T, s objstore.Store) {
	b := bucketName()
	for i := range 2 {
		if err := s.EnsureBucket(ctx(t), b); err != nil {
			t.Fatalf("EnsureBucket #%d: %v", i+1, err)
		}
	}
	putString(t, s, b, "k", "v")
	if err := s.EnsureBucket(ctx(t), b); err != nil {
		t.Fatalf("EnsureBucket on a bucket with objects: %v", err)
	}
	requireString(t, s, b, "k", "v")
}

func testOverwriteShrinks(t *testing.T, s objstore.Store) {
	b := newBucket(t, s)
	const big = 1 << 20
	if err := s.Put(ctx(t), b, "k", payload(4, big), big, "application/octet-stream"); err != nil {
		t.Fatalf("Put: %v", err)
	}
	putString(t, s, b, "k", "tiny")
	info, err := s.Stat(ctx(t), b, "k")
	if err != nil || info.Size != 4 || info.ContentType != "text/plain" {
		t.Errorf("Stat after overwrite = %+v, %v; want size 4, text/plain", info, err)
	}
	requireString(t, s, b, "k", "tiny")
}

func testPutExactSize(t *testing.T, s objstore.Store) {
	b := newBucket(t, s)
	putString(t, s, b, "k", "previous")

	// A reader that ends early fails the Put and leaves the previous object alone.
	err := s.Put(ctx(t), b, "k", payload(5, 500), 1000, "text/plain")
	if err == nil {
		t.Fatal("Put of 500 bytes announced as 1000 succeeded")
	}
	if objstore.IsPermanent(err) {
		t.Errorf("short read reported as permanent: %v", err)
	}
	requireString(t, s, b, "k", "previous")
	err = s.Put(ctx(t), b, "new", payload(5, 500), 1000, "text/plain")
	if err == nil {
		t.Fatal("Put of a short reader succeeded")
	}
	if _, err := s.Stat(ctx(t), b, "new"); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("failed Put left an object: %v", err)
	}

	// Bytes past size are not stored.
	if err := s.Put(ctx(t), b, "k", strings.NewReader("0123456789abcdef"), 10, "text/plain"); err != nil {
		t.Fatalf("Put of a longer reader: %v", err)
	}
	requireString(t, s, b, "k", "0123456789")

	// Empty objects are objects.
	if err := s.Put(ctx(t), b, "empty", strings.NewReader(""), 0, "text/plain"); err != nil {
		t.Fatalf("Put of an empty object: %v", err)
	}
	requireString(t, s, b, "empty", "")
}

func testDownloadFile(t *testing.T, s objstore.Store) {
	b := newBucket(t, s)
	const size = 1000
	if err := s.Put(ctx(t), b, "in/a.bin", payload(6, size), size, "application/octet-stream"); err != nil {
		t.Fatalf("Put: %v", err)
	}
	dir := t.TempDir()
	for i, limit := range []int64{0, 2000, size} {
		path := filepath.Join(dir, fmt.Sprintf("ok%d", i))
		info, err := objstore.DownloadFile(ctx(t), s, b, "in/a.bin", path, limit)
		if err != nil {
			t.Fatalf("DownloadFile(limit %d): %v", limit, err)
		}
		if info.Size != size {
			t.Errorf("DownloadFile(limit %d) Info.Size = %d", limit, info.Size)
		}
		requireFile(t, path, 6, size)
	}

	path := filepath.Join(dir, "over")
	_, err := objstore.DownloadFile(ctx(t), s, b, "in/a.bin", path, size-1)
	var tl *objstore.TooLargeError
	if !errors.As(err, &tl) || tl.Size != size || tl.Limit != size-1 {
		t.Fatalf("DownloadFile over the limit = %v, want TooLargeError{%d, %d}", err, size, size-1)
	}
	if !strings.Contains(err.Error(), "limit is 999 bytes") {
		t.Errorf("error %q does not state the limit", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("DownloadFile over the limit left a file: %v", err)
	}

	path = filepath.Join(dir, "missing")
	_, err = objstore.DownloadFile(ctx(t), s, b, "in/none.bin", path, 0)
	requireNotFound(t, "DownloadFile of a missing object", err, "in/none.bin")
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("DownloadFile of a missing object left a file: %v", err)
	}
}

func testUploadFile(t *testing.T, s objstore.Store) {
	b := newBucket(t, s)
	const size = 2<<20 + 3
	path := filepath.Join(t.TempDir(), "variant.webp")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(f, payload(7, size)); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	n, err := objstore.UploadFile(ctx(t), s, b, "out/variant.webp", path, "image/webp")
	if err != nil || n != size {
		t.Fatalf("UploadFile = %d, %v; want %d", n, err, size)
	}
	info, err := s.Stat(ctx(t), b, "out/variant.webp")
	if err != nil || info.Size != size || info.ContentType != "image/webp" {
		t.Errorf("Stat = %+v, %v", info, err)
	}
	requireContent(t, s, b, "out/variant.webp", 7, size)
}

// testConcurrent runs what several job slots do at once on one Store: create the same bucket, and
// put and get different objects in it.
func testConcurrent(t *testing.T, s objstore.Store) {
	b := bucketName()
	const workers, size = 8, 256<<10 + 1
	errs := make(chan error, workers)
	for i := range workers {
		go func() {
			errs <- func() error {
				if err := s.EnsureBucket(ctx(t), b); err != nil {
					return fmt.Errorf("EnsureBucket: %w", err)
				}
				key := fmt.Sprintf("w%d/obj.bin", i)
				seed := uint64(100 + i)
				if err := s.Put(ctx(t), b, key, payload(seed, size), size, "application/octet-stream"); err != nil {
					return fmt.Errorf("Put %s: %w", key, err)
				}
				h := sha256.New()
				if n, err := s.Get(ctx(t), b, key, h); err != nil || n != size {
					return fmt.Errorf("Get %s = %d, %w", key, n, err)
				}
				if hex.EncodeToString(h.Sum(nil)) != digest(payload(seed, size)) {
					return fmt.Errorf("Get %s: content differs", key)
				}
				return nil
			}()
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

func testGetCancel(t *testing.T, s objstore.Store) {
	b := newBucket(t, s)
	const size = 8 << 20
	if err := s.Put(ctx(t), b, "big", payload(8, size), size, "application/octet-stream"); err != nil {
		t.Fatalf("Put: %v", err)
	}
	c, cancel := context.WithCancel(ctx(t))
	defer cancel()
	var cancelledAt time.Time
	w := writerFunc(func(p []byte) (int, error) {
		if cancelledAt.IsZero() {
			cancelledAt = time.Now()
			cancel() // as a caller does when its job is abandoned mid-download
		}
		return len(p), nil
	})
	n, err := s.Get(c, b, "big", w)
	took := time.Since(cancelledAt)
	if err == nil {
		t.Fatalf("Get with a cancelled context returned %d bytes and no error", n)
	}
	if n >= size {
		t.Errorf("Get wrote all %d bytes despite cancellation", n)
	}
	if objstore.IsPermanent(err) {
		t.Errorf("cancelled Get reported as permanent: %v", err)
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled Get error %v does not match context.Canceled", err)
	}
	if took > 2*time.Second {
		t.Errorf("Get returned %s after cancellation", took)
	}
	// The store is still usable.
	requireContent(t, s, b, "big", 8, size)
}

func testCancelledContext(t *testing.T, s objstore.Store) {
	b := newBucket(t, s)
	putString(t, s, b, "k", "v")
	c, cancel := context.WithCancel(ctx(t))
	cancel()
	if _, err := s.Stat(c, b, "k"); err == nil || objstore.IsPermanent(err) {
		t.Errorf("Stat with a cancelled context = %v, want a transient error", err)
	}
	var w bytes.Buffer
	if _, err := s.Get(c, b, "k", &w); err == nil || objstore.IsPermanent(err) || w.Len() != 0 {
		t.Errorf("Get with a cancelled context = %v (%d bytes), want a transient error", err, w.Len())
	}
	if err := s.Put(c, b, "new", strings.NewReader("x"), 1, "text/plain"); err == nil {
		t.Error("Put with a cancelled context succeeded")
	}
	if _, err := s.Stat(ctx(t), b, "new"); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("Put with a cancelled context left an object: %v", err)
	}
}

func testClose(t *testing.T, s objstore.Store) {
	for i := range 2 {
		if err := s.Close(); err != nil {
			t.Fatalf("Close #%d: %v", i+1, err)
		}
	}
	if _, err := s.Stat(ctx(t), bucketName(), "k"); !errors.Is(err, objstore.ErrClosed) {
		t.Errorf("Stat after Close = %v, want ErrClosed", err)
	}
	if err := s.Ping(ctx(t)); !errors.Is(err, objstore.ErrClosed) {
		t.Errorf("Ping after Close = %v, want ErrClosed", err)
	}
}

// --- helpers ---

// ReadHead returns exactly the first bytes of a large object (many chunks or parts), all of a short one,
// and ErrNotFound for a missing one: triage sniffs types from it.
func testReadHead(t *testing.T, s objstore.Store) {
	b := newBucket(t, s)
	const size = 3<<20 + 7
	if err := s.Put(ctx(t), b, "big.bin", payload(7, size), size, "application/octet-stream"); err != nil {
		t.Fatalf("Put: %v", err)
	}
	want, _ := io.ReadAll(io.LimitReader(payload(7, size), 3072))
	got, err := objstore.ReadHead(ctx(t), s, b, "big.bin", 3072)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("ReadHead(3072) of %d bytes: %d bytes, equal %v, err %v", size, len(got), bytes.Equal(got, want), err)
	}
	putString(t, s, b, "short.txt", "tiny")
	if got, err := objstore.ReadHead(ctx(t), s, b, "short.txt", 3072); err != nil || string(got) != "tiny" {
		t.Fatalf("ReadHead of a 4-byte object: %q, %v", got, err)
	}
	_, err = objstore.ReadHead(ctx(t), s, b, "no/such.jpg", 3072)
	requireNotFound(t, "ReadHead missing", err, "no/such.jpg")

	// Of the version a Stat described, as triage reads it: the same bytes.
	for _, c := range []struct {
		key  string
		want []byte
	}{{"big.bin", want}, {"short.txt", []byte("tiny")}} {
		info, err := s.Stat(ctx(t), b, c.key)
		if err != nil {
			t.Fatalf("Stat %s: %v", c.key, err)
		}
		got, err := objstore.ReadHeadStatted(ctx(t), s, info, 3072)
		if err != nil || !bytes.Equal(got, c.want) {
			t.Fatalf("ReadHeadStatted(3072) of %s: %d bytes, equal %v, err %v", c.key, len(got), bytes.Equal(got, c.want), err)
		}
	}
}
