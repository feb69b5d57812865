// Package natsobj implements objstore.Store on the JetStream object store of whichever NATS server
// the worker uses (embedded or external). A bucket of the Store is an object-store bucket (stream
// OBJ_<bucket>). Keys follow objstore.ValidateKey, like every backend's; "/", "." and spaces are fine
// because the object store encodes names before using them in subjects.
//
// Put does not create buckets: a Put to a missing bucket fails with objstore.ErrNotFound, like S3,
// so that a typo in a request's bucket cannot silently create streams. Callers that own a bucket
// (the worker's output bucket, `mediaworker submit`) call EnsureBucket first; Copy creates its
// destination bucket.
package natsobj

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mediaworker/mediaworker/objstore"
)

// Config configures the NATS object-store backend. Zero fields take their DefaultConfig values in New.
type Config struct {
	// Replicas of buckets that EnsureBucket creates (1 for a single server, 3 for an R3 cluster).
	Replicas int
	// Storage of buckets that EnsureBucket creates (jetstream.FileStorage, the zero value, or
	// jetstream.MemoryStorage).
	Storage jetstream.StorageType
	// BaseURL is the base of the URLs URL returns. An object store has no HTTP face of its own, so
	// the default names the object for people and tools; set --public-base-url for real links.
	BaseURL string
	// Timeout bounds each metadata call (Stat, Delete, EnsureBucket, Ping, opening a read) whatever the
	// caller's deadline, and is the longest Get waits for the next chunk before calling the stream stalled.
	Timeout time.Duration
}

// DefaultConfig returns one replica on file storage with a 10 s timeout.
func DefaultConfig() Config {
	return Config{
		Replicas: 1,
		Storage:  jetstream.FileStorage,
		BaseURL:  "nats://objectstore",
		Timeout:  10 * time.Second,
	}
}

// Validate reports the first setting that cannot work.
func (c Config) Validate() error {
	if c.Replicas < 1 || c.Replicas > 5 {
		return fmt.Errorf("natsobj: replicas %d must be between 1 and 5", c.Replicas)
	}
	if c.Storage != jetstream.FileStorage && c.Storage != jetstream.MemoryStorage {
		return fmt.Errorf("natsobj: unknown storage type %d", c.Storage)
	}
	if u, err := url.Parse(c.BaseURL); err != nil || u.Scheme == "" {
		return fmt.Errorf("natsobj: base URL %q must be an absolute URL", c.BaseURL)
	}
	if c.Timeout <= 0 {
		return fmt.Errorf("natsobj: timeout %s must be positive", c.Timeout)
	}
	return nil
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Replicas == 0 {
		c.Replicas = d.Replicas
	}
	if c.BaseURL == "" {
		c.BaseURL = d.BaseURL
	}
	if c.Timeout == 0 {
		c.Timeout = d.Timeout
	}
	return c
}

// Names from the object-store layout (NATS ADR-20), which Get reads directly.
const (
	streamPrefix    = "OBJ_"
	chunkSubjectFmt = "$O.%s.C.%s" // bucket, object NUID
	getBatch        = 16           // chunks (128 KiB each) buffered per Get: ~2 MiB, not the default 500
)

// validBucket is the object store's own rule for bucket names.
var validBucket = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

// Store is an objstore.Store on JetStream object-store buckets. It does not own the connection.
// Its reading side (get.go, getrange.go) is a reader of its own, over the same bound buckets.
type Store struct {
	*buckets
	reader
}

var _ objstore.Store = (*Store)(nil)

// New returns a Store using js. Closing the Store does not close js's connection.
func New(js jetstream.JetStream, cfg Config) (*Store, error) {
	if js == nil {
		return nil, errors.New("natsobj: a JetStream context is required")
	}
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	b := &buckets{js: js, cfg: cfg, bound: make(map[string]bound)}
	return &Store{buckets: b, reader: reader{b}}, nil
}

// Stat returns the object's size, content type and the server time of its last write.
func (s *Store) Stat(ctx context.Context, bucket, key string) (objstore.Info, error) {
	ctx, cancel := s.opContext(ctx)
	defer cancel()
	info, err := s.info(ctx, bucket, key)
	if err != nil {
		return objstore.Info{}, fmt.Errorf("getting info of %s/%s: %w", bucket, key, err)
	}
	return objstore.Info{
		Bucket:      bucket,
		Key:         key,
		Size:        int64(info.Size),
		ContentType: contentType(info),
		ModTime:     info.ModTime,
		Variant:     info.Headers.Get(objstore.VariantHeader) == "1",
		SHA256:      verifiedDigest(info),
		Tag:         tagOf(info),
		Sys:         info, // GetStatted reads this version without a second lookup
	}, nil
}

// Put stores the object; see the package comment for why the bucket must already exist. A failed Put
// leaves the previous version in place: the new metadata is published only after all chunks are
// stored (put.go says why this package writes the object-store layout itself).
func (s *Store) Put(ctx context.Context, bucket, key string, r io.Reader, size int64, contentType string) error {
	if err := s.put(ctx, bucket, key, r, size, contentType, objstore.PutsVariant(ctx)); err != nil {
		return fmt.Errorf("putting %s/%s: %w", bucket, key, err)
	}
	return nil
}

func (s *Store) put(ctx context.Context, bucket, key string, r io.Reader, size int64, contentType string, variant bool) error {
	if err := checkKey(key, false); err != nil {
		return err
	}
	if size >= 0 {
		r = objstore.ExactReader(r, size)
	}
	meta := jetstream.ObjectMeta{Name: key, Headers: nats.Header{}}
	if contentType != "" {
		meta.Headers.Set("Content-Type", contentType)
	}
	if variant {
		meta.Headers.Set(objstore.VariantHeader, "1")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	cr := &countingReader{r: r, ctx: ctx}
	return s.withStream(ctx, bucket, false, func(stream jetstream.Stream) error {
		if cr.n > 0 {
			// Part of r is gone: a retry could store a truncated object.
			return errors.New("bucket stream vanished during the upload")
		}
		return s.putObject(ctx, stream, bucket, meta, cr)
	})
}

// Delete removes the object (its chunks are purged); a missing object or bucket is not an error.
func (s *Store) Delete(ctx context.Context, bucket, key string) error {
	ctx, cancel := s.opContext(ctx)
	defer cancel()
	if err := checkKey(key, true); err != nil {
		return nil // an impossible key names no object
	}
	err := s.withHandle(ctx, bucket, true, func(h jetstream.ObjectStore) error {
		return h.Delete(ctx, key)
	})
	if err != nil && !errors.Is(err, objstore.ErrNotFound) {
		return fmt.Errorf("deleting %s/%s: %w", bucket, key, err)
	}
	return nil
}

// Copy streams the object through this client (the object store has no server-side copy), keeping
// its content type, and creates the destination bucket if needed. The copy is checked against the
// source's digest as it is read; it is of the version Stat finds (CopyStatted).
func (s *Store) Copy(ctx context.Context, srcBucket, srcKey, dstBucket, dstKey string) error {
	info, err := s.Stat(ctx, srcBucket, srcKey)
	if err != nil {
		return fmt.Errorf("copying: %w", err)
	}
	return s.CopyStatted(ctx, info, dstBucket, dstKey)
}

// EnsureBucket creates the object-store bucket with the configured replicas and storage unless it
// exists (an existing bucket is left as it is, whatever its settings). It always asks the server,
// so a bucket deleted behind the Store's back is created again.
func (s *Store) EnsureBucket(ctx context.Context, bucket string) error {
	ctx, cancel := s.opContext(ctx)
	defer cancel()
	s.forget(bucket)
	_, _, err := s.handle(ctx, bucket, false)
	if err == nil || !errors.Is(err, objstore.ErrNotFound) {
		return wrapIf("creating bucket "+bucket, err)
	}
	_, err = s.js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{
		Bucket:   bucket,
		Replicas: s.cfg.Replicas,
		Storage:  s.cfg.Storage,
	})
	if err != nil && !errors.Is(err, jetstream.ErrBucketExists) { // exists: created by someone else meanwhile
		return fmt.Errorf("creating bucket %s: %w", bucket, err)
	}
	_, _, err = s.handle(ctx, bucket, false)
	return wrapIf("creating bucket "+bucket, err)
}

// Ping asks the server for the account's JetStream information: it fails when NATS is unreachable or
// JetStream is not enabled for the account.
func (s *Store) Ping(ctx context.Context) error {
	if s.isClosed() {
		return fmt.Errorf("pinging nats object store: %w", objstore.ErrClosed)
	}
	ctx, cancel := s.opContext(ctx)
	defer cancel()
	if _, err := s.js.AccountInfo(ctx); err != nil {
		return fmt.Errorf("pinging nats object store: %w", err)
	}
	return nil
}

// URL returns BaseURL + "/" + bucket + "/" + escaped key.
func (s *Store) URL(bucket, key string) string {
	return objstore.ObjectURL(strings.TrimRight(s.cfg.BaseURL, "/")+"/"+url.PathEscape(bucket), key)
}

// Close forgets the bound buckets; later calls fail with objstore.ErrClosed. The NATS connection is
// the caller's. It is idempotent.
func (s *Store) Close() error {
	s.close()
	return nil
}

func checkKey(key string, read bool) error {
	err := objstore.ValidateKey(key)
	if err != nil && read {
		err = fmt.Errorf("%w (%w)", err, objstore.ErrNotFound)
	}
	return err
}

// countingReader counts what Put consumed and fails once ctx has ended.
type countingReader struct {
	r   io.Reader
	ctx context.Context
	n   int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func contentType(info *jetstream.ObjectInfo) string {
	if ct := info.Headers.Get("Content-Type"); ct != "" {
		return ct
	}
	return "application/octet-stream"
}

func wrapIf(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", what, err)
}

// tagOf is the version's objstore.Info.Tag: its digest as the metadata records it ("SHA-256=..."),
// which every read of the version checks; "" without a well-formed one.
func tagOf(info *jetstream.ObjectInfo) string {
	if verifiedDigest(info) == nil {
		return ""
	}
	return info.Digest
}

// verifiedDigest is the version's SHA-256 as its metadata records it: read (get.go) checks the
// delivered bytes against that same digest and fails on a mismatch, so a completed GetStatted of this
// version vouches for it. nil when the metadata holds no well-formed SHA-256.
func verifiedDigest(info *jetstream.ObjectInfo) []byte {
	d, err := jetstream.DecodeObjectDigest(info.Digest)
	if err != nil || len(d) != sha256.Size {
		return nil
	}
	return d
}
