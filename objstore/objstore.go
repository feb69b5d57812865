// Package objstore is the object-storage leaf: one small Store interface that the job pipeline uses to
// fetch uploads and store variants, implemented by objstore/s3 (any S3-compatible service through
// minio-go) and objstore/natsobj (the JetStream object store of the NATS in use). It knows nothing of NATS
// messages, acks or the other leaves.
//
// Errors: ErrNotFound (object or bucket missing), ErrInvalidName (a bucket or key the store can never
// hold) and ErrRefused (the store turned the request down for good: S3's 4xx answers but those of
// credentials, clocks and throttling) are permanent; every other error from a Store is transient (the
// store is unreachable, a stream broke off, a context ended, the object changed meanwhile: ErrChanged).
// IsPermanent says which is which.
package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Info describes a stored object.
type Info struct {
	Bucket      string
	Key         string
	Size        int64
	ContentType string
	ModTime     time.Time
	// Variant says the object carries the VariantHeader marker: this worker wrote it as an output.
	Variant bool
	// SHA256 is the content's SHA-256 digest when the store records one with the object and
	// GetStatted of this Info fails unless the bytes it delivers match it (natsobj); nil otherwise.
	// DownloadStatted passes it on (to its tee and in the Info it returns) only when it reads this very
	// version, so a reader of those takes the digest from there instead of hashing every byte again.
	SHA256 []byte
	// Tag is the store's own name of the stored bytes of this version (tag.go): equal Tags of one key
	// mean the same bytes (natsobj: "SHA-256=" and the digest its metadata records; s3: the ETag and,
	// on a versioned bucket, the version ID); "" when the store records none.
	Tag string
	// Sys is the backend's own record of the version Stat found (natsobj: its *jetstream.ObjectInfo;
	// s3: its version ID and ETag), like fs.FileInfo.Sys; nil when it has none. GetStatted passes it
	// back, so a store that can read that version directly does not look the object up a second time,
	// and CopyStatted and DeleteStatted, so an infected upload is removed as the version that was
	// scanned and no other.
	Sys any
}

var (
	// ErrNotFound means the object or its bucket does not exist. Backends wrap it with the bucket and
	// key; test with errors.Is.
	ErrNotFound = errors.New("object not found")

	// ErrInvalidName means the bucket or key can never exist in this store (for example a dot in a NATS
	// object-store bucket name). Retrying cannot help, so it is permanent like ErrNotFound. Reads of such
	// a name also match ErrNotFound: the object certainly is not there.
	ErrInvalidName = errors.New("invalid bucket or key name")

	// ErrRefused means the store answered that it will never do this request as asked (S3: a 4xx
	// status such as 400 for a name it will not take, 405, 411, 413, 414, or 403 for an archived
	// object), so it is permanent. Answers that depend on the worker's credentials, clock or pace
	// (401, 403 AccessDenied, 408, 409, 429, expired tokens, skewed clocks) are not: an operator can
	// fix those, and the request should wait for it rather than fail.
	ErrRefused = errors.New("refused by the object store")

	// ErrChanged means the object at the key is no longer the version a Stat described (it was
	// overwritten or deleted since), so an operation bound to that version (GetStatted, CopyStatted,
	// DeleteStatted) did nothing. Transient: the next attempt looks the object up again.
	ErrChanged = errors.New("object changed since it was looked up")

	// ErrClosed is returned by a Store used after Close.
	ErrClosed = errors.New("object store closed")
)

// IsPermanent reports whether err says the request itself is wrong (missing object or bucket, invalid
// name, a request the store refuses) rather than the store being unavailable; only permanent errors
// should stop retries.
func IsPermanent(err error) bool {
	return errors.Is(err, ErrNotFound) || errors.Is(err, ErrInvalidName) || errors.Is(err, ErrRefused)
}

// Store is an object store. Every method that talks to the store takes a context and honours its
// cancellation; implementations are safe for concurrent use.
type Store interface {
	// Stat returns the object's Info, or an error matching ErrNotFound.
	Stat(ctx context.Context, bucket, key string) (Info, error)
	// Get streams the object into w and returns the bytes written. It never buffers the whole
	// object, and it fails (rather than returning a short count with a nil error) when the stream
	// breaks off or its bytes do not match what the store recorded.
	Get(ctx context.Context, bucket, key string, w io.Writer) (int64, error)
	// Put stores exactly size bytes read from r (size -1: read r to EOF) with a content type. A
	// reader that ends before size bytes is an error and leaves any previous object in place; bytes
	// after the first size are not read. The bucket must exist (see EnsureBucket).
	Put(ctx context.Context, bucket, key string, r io.Reader, size int64, contentType string) error
	// Delete removes the object. Deleting a missing object (or one in a missing bucket) is not an
	// error.
	Delete(ctx context.Context, bucket, key string) error
	// Copy copies an object with its content type, server-side where the store can, creating the
	// destination bucket if it is missing.
	Copy(ctx context.Context, srcBucket, srcKey, dstBucket, dstKey string) error
	// EnsureBucket creates the bucket if it does not exist; it is idempotent.
	EnsureBucket(ctx context.Context, bucket string) error
	// Ping reports whether the store is reachable and usable (for readiness checks).
	Ping(ctx context.Context) error
	// URL returns the default public URL of an object (see ObjectURL).
	URL(bucket, key string) string
	// Close releases the store's resources; it is idempotent.
	Close() error
}

// ObjectURL joins a base URL and a key, path-escaping each segment of the key (so spaces, '?', '#'
// and non-ASCII characters survive) while keeping its slashes.
func ObjectURL(base, key string) string {
	segs := strings.Split(key, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return strings.TrimRight(base, "/") + "/" + strings.Join(segs, "/")
}

// MaxKeyLen is the longest key in bytes (S3's limit).
const MaxKeyLen = 1024

// ValidateKey applies the key rules every backend enforces, so that a key one backend would refuse
// is refused by all: non-empty valid UTF-8 of at most MaxKeyLen bytes, no control characters, no
// leading "/", and no empty, "." or ".." segments (S3 servers reject or rewrite those, and they
// could escape a prefix). The error matches ErrInvalidName.
func ValidateKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty key", ErrInvalidName)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: key is %d bytes, more than %d", ErrInvalidName, len(key), MaxKeyLen)
	case !utf8.ValidString(key):
		return fmt.Errorf("%w: key %q is not valid UTF-8", ErrInvalidName, key)
	case strings.IndexFunc(key, unicode.IsControl) >= 0:
		return fmt.Errorf("%w: key %q contains a control character", ErrInvalidName, key)
	}
	for _, seg := range strings.Split(key, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("%w: key %q has an empty, \".\" or \"..\" segment", ErrInvalidName, key)
		}
	}
	return nil
}

// ExactReader returns a reader that yields exactly size bytes of r and then io.EOF, and fails with an
// error matching io.ErrUnexpectedEOF if r ends early. Backends use it so that "store exactly size bytes"
// means the same thing whatever the client library does with a short reader.
func ExactReader(r io.Reader, size int64) io.Reader {
	return &exactReader{r: r, left: size, size: size}
}

type exactReader struct {
	r          io.Reader
	left, size int64
}

func (e *exactReader) Read(p []byte) (int, error) {
	if e.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > e.left {
		p = p[:e.left]
	}
	n, err := e.r.Read(p)
	e.left -= int64(n)
	switch {
	case err == io.EOF && e.left > 0:
		return n, &ShortReadError{Got: e.size - e.left, Want: e.size}
	case err == io.EOF || (err == nil && e.left == 0):
		// Report EOF together with the last bytes so that clients that stop at EOF never ask r
		// for bytes beyond size.
		return n, io.EOF
	}
	return n, err
}

// ShortReadError says a reader given to Put ended before the announced size.
type ShortReadError struct{ Got, Want int64 }

func (e *ShortReadError) Error() string {
	return fmt.Sprintf("reader ended after %d of %d bytes", e.Got, e.Want)
}

// Unwrap lets errors.Is(err, io.ErrUnexpectedEOF) find a short read.
func (e *ShortReadError) Unwrap() error { return io.ErrUnexpectedEOF }
