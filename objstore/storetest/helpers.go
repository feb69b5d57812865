package storetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	mathrand "math/rand/v2"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/mediaworker/mediaworker/objstore"
)

// Helpers of the contract suite: buckets, payloads and assertions.

var (
	bucketSeq    atomic.Int64
	bucketPrefix = randomHex(4)
)

// bucketName returns a name valid for S3 and NATS object stores and unique across runs sharing a
// server.
func bucketName() string {
	return fmt.Sprintf("st-%s-%d", bucketPrefix, bucketSeq.Add(1))
}

func newBucket(t *testing.T, s objstore.Store) string {
	t.Helper()
	b := bucketName()
	if err := s.EnsureBucket(ctx(t), b); err != nil {
		t.Fatalf("EnsureBucket(%s): %v", b, err)
	}
	return b
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(t.Context(), opTimeout)
	t.Cleanup(cancel)
	return c
}

// payload streams size pseudo-random bytes from seed without holding them: the suite compares
// digests, so a multi-MB object is never in memory twice.
func payload(seed uint64, size int64) io.Reader {
	return io.LimitReader(mathrand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)}), size)
}

func digest(r io.Reader) string {
	h := sha256.New()
	_, _ = io.Copy(h, r)
	return hex.EncodeToString(h.Sum(nil))
}

// requireContent checks that the object holds exactly payload(seed, size).
func requireContent(t *testing.T, s objstore.Store, bucket, key string, seed uint64, size int64) {
	t.Helper()
	h := &countingHash{h: sha256.New()}
	n, err := s.Get(ctx(t), bucket, key, h)
	if err != nil {
		t.Fatalf("Get %s/%s: %v", bucket, key, err)
	}
	if n != size || h.n != size {
		t.Fatalf("Get %s/%s returned %d (wrote %d) bytes, want %d", bucket, key, n, h.n, size)
	}
	if got, want := hex.EncodeToString(h.h.Sum(nil)), digest(payload(seed, size)); got != want {
		t.Fatalf("Get %s/%s: content differs from what was put", bucket, key)
	}
}

func requireFile(t *testing.T, path string, seed uint64, size int64) {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() != size || st.Mode().Perm() != 0o600 {
		t.Errorf("%s: size %d mode %v, want %d bytes, 0600", path, st.Size(), st.Mode().Perm(), size)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if digest(f) != digest(payload(seed, size)) {
		t.Errorf("%s: content differs from the object", path)
	}
}

func putString(t *testing.T, s objstore.Store, bucket, key, body string) {
	t.Helper()
	if err := s.Put(ctx(t), bucket, key, strings.NewReader(body), int64(len(body)), "text/plain"); err != nil {
		t.Fatalf("Put %s/%s: %v", bucket, key, err)
	}
}

func requireString(t *testing.T, s objstore.Store, bucket, key, want string) {
	t.Helper()
	var got bytes.Buffer
	n, err := s.Get(ctx(t), bucket, key, &got)
	if err != nil || got.String() != want || n != int64(len(want)) {
		t.Fatalf("Get %s/%s = %q (%d), %v; want %q", bucket, key, got.String(), n, err, want)
	}
}

func requireNotFound(t *testing.T, what string, err error, key string) {
	t.Helper()
	if !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("%s: error %v does not match ErrNotFound", what, err)
		return
	}
	if !strings.Contains(err.Error(), key) {
		t.Errorf("%s: error %q does not name the key %q", what, err, key)
	}
}

type countingHash struct {
	h hash.Hash
	n int64
}

func (c *countingHash) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return c.h.Write(p)
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
