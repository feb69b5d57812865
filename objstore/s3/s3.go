// Package s3 implements objstore.Store on any S3-compatible service (MinIO, AWS S3, Ceph RGW, ...)
// through minio-go, with path-style addressing so that a bare host:port endpoint works.
package s3

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/s3utils"

	"github.com/mediaworker/mediaworker/objstore"
)

// Config configures the S3 backend.
type Config struct {
	// Endpoint is host:port of the service, without a scheme (e.g. "127.0.0.1:9000").
	Endpoint  string
	AccessKey string
	SecretKey string
	Region    string
	UseTLS    bool
	// InsecureSkipVerify turns off TLS certificate checks (self-signed test set-ups only).
	InsecureSkipVerify bool
	// PublicURL is the base of the URLs URL returns; empty means scheme://Endpoint.
	PublicURL string

	// PartSize is the multipart part size. minio-go holds one part in memory per upload of unknown
	// size, and defaults to ~537 MiB parts for those, so it is set explicitly. S3 needs 5 MiB..5 GiB.
	PartSize int64
	// MaxRetries bounds minio-go's own retries of one request (minio-go's default is 10, which hides
	// an outage for many seconds; the job pipeline retries whole jobs anyway).
	MaxRetries int
	// Timeout bounds each Stat, Delete, EnsureBucket and Ping, whatever the caller's deadline, the
	// wait for the next bytes of a body being read (Get, GetRange) and each write of a request to the
	// server (Put's body: stall.go). Otherwise Get, Put and Copy run as long as the caller's context
	// allows.
	Timeout time.Duration
}

// DefaultConfig returns settings for a local MinIO on 127.0.0.1:9000 (credentials still to fill in).
func DefaultConfig() Config {
	return Config{
		Endpoint:   "127.0.0.1:9000",
		Region:     "us-east-1",
		PartSize:   16 << 20,
		MaxRetries: 3,
		Timeout:    10 * time.Second,
	}
}

// Validate reports the first setting that cannot work.
func (c Config) Validate() error {
	if c.Endpoint == "" {
		return errors.New("s3: endpoint is required")
	}
	if strings.Contains(c.Endpoint, "://") || strings.Contains(c.Endpoint, "/") {
		return fmt.Errorf("s3: endpoint %q must be host:port without a scheme or path (set UseTLS for https)", c.Endpoint)
	}
	if (c.AccessKey == "") != (c.SecretKey == "") {
		return errors.New("s3: access key and secret key must be set together")
	}
	if c.PublicURL != "" {
		u, err := url.Parse(c.PublicURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("s3: public URL %q must be an absolute http(s) URL", c.PublicURL)
		}
	}
	if c.PartSize < 5<<20 || c.PartSize > 5<<30 {
		return fmt.Errorf("s3: part size %d must be between 5 MiB and 5 GiB", c.PartSize)
	}
	if c.MaxRetries < 1 {
		return fmt.Errorf("s3: max retries %d must be at least 1 (1 = no retry)", c.MaxRetries)
	}
	if c.Timeout <= 0 {
		return fmt.Errorf("s3: timeout %s must be positive", c.Timeout)
	}
	return nil
}

// Store is an objstore.Store on an S3-compatible service. Its reading side (get.go, ranges.go) is a
// reader of its own, over the same conn.
type Store struct {
	*conn
	reader
	transport *http.Transport
	baseURL   string
}

// conn is the client with its configuration and closed state, which every request checks first.
type conn struct {
	cfg    Config
	client *minio.Client
	closed atomic.Bool
}

var _ objstore.Store = (*Store)(nil)

// New validates cfg and builds a client. It does not contact the service; use Ping for that.
func New(cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	tr, err := minio.DefaultTransport(cfg.UseTLS)
	if err != nil {
		return nil, fmt.Errorf("creating s3 transport: %w", err)
	}
	tr.DialContext = watchSends(tr.DialContext, cfg.Timeout) // a server that stops reading: stall.go
	if cfg.UseTLS && cfg.InsecureSkipVerify {
		if tr.TLSClientConfig == nil {
			tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		tr.TLSClientConfig.InsecureSkipVerify = true // #nosec G402 -- opted in by configuration
	}
	client, err := minio.New(cfg.Endpoint, &minio.Options{
		Creds:        credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""),
		Secure:       cfg.UseTLS,
		Transport:    tr,
		Region:       cfg.Region,
		BucketLookup: minio.BucketLookupPath,
		MaxRetries:   cfg.MaxRetries,
	})
	if err != nil {
		return nil, fmt.Errorf("creating s3 client: %w", err)
	}
	base := cfg.PublicURL
	if base == "" {
		scheme := "http"
		if cfg.UseTLS {
			scheme = "https"
		}
		base = scheme + "://" + cfg.Endpoint
	}
	c := &conn{cfg: cfg, client: client}
	return &Store{conn: c, reader: reader{c}, transport: tr, baseURL: strings.TrimRight(base, "/")}, nil
}

// Client exposes the minio-go client for operations the Store interface does not cover.
func (s *Store) Client() *minio.Client { return s.client }

// Stat returns the object's size, content type and modification time.
func (s *Store) Stat(ctx context.Context, bucket, key string) (objstore.Info, error) {
	if err := s.check(bucket, key, true); err != nil {
		return objstore.Info{}, fmt.Errorf("getting info of %s/%s: %w", bucket, key, err)
	}
	ctx, cancel := s.opContext(ctx)
	defer cancel()
	oi, err := s.client.StatObject(ctx, bucket, key, minio.StatObjectOptions{})
	if err != nil {
		return objstore.Info{}, fmt.Errorf("getting info of %s/%s: %w", bucket, key, s.headErr(ctx, bucket, key, minio.GetObjectOptions{}, err))
	}
	return objstore.Info{Bucket: bucket, Key: key, Size: oi.Size, ContentType: oi.ContentType, ModTime: oi.LastModified,
		Variant: oi.Metadata.Get("X-Amz-Meta-"+objstore.VariantHeader) == "1",
		Tag:     tagOf(oi.ETag, oi.VersionID),
		Sys:     version{bucket: bucket, key: key, id: oi.VersionID, etag: oi.ETag}}, nil // see version.go
}

// Put uploads size bytes of r (size -1: until EOF; multipart in PartSize parts when large or unknown).
func (s *Store) Put(ctx context.Context, bucket, key string, r io.Reader, size int64, contentType string) error {
	if err := s.check(bucket, key, false); err != nil {
		return fmt.Errorf("putting %s/%s: %w", bucket, key, err)
	}
	if size >= 0 {
		r = objstore.ExactReader(r, size)
	}
	opts := minio.PutObjectOptions{ContentType: contentType, PartSize: uint64(s.cfg.PartSize)}
	if objstore.PutsVariant(ctx) {
		opts.UserMetadata = map[string]string{objstore.VariantHeader: "1"}
	}
	ui, err := s.client.PutObject(ctx, bucket, key, r, size, opts)
	if err != nil {
		return fmt.Errorf("putting %s/%s: %w", bucket, key, mapErr(err))
	}
	objstore.RecordTag(ctx, tagOf(ui.ETag, ui.VersionID))
	return nil
}

// Delete removes the object; a missing object or bucket is not an error.
func (s *Store) Delete(ctx context.Context, bucket, key string) error {
	if err := s.check(bucket, key, true); err != nil {
		if errors.Is(err, objstore.ErrNotFound) {
			return nil // a bucket that cannot exist holds nothing to delete
		}
		return fmt.Errorf("deleting %s/%s: %w", bucket, key, err)
	}
	ctx, cancel := s.opContext(ctx)
	defer cancel()
	err := s.client.RemoveObject(ctx, bucket, key, minio.RemoveObjectOptions{})
	if err != nil && !errors.Is(mapErr(err), objstore.ErrNotFound) {
		return fmt.Errorf("deleting %s/%s: %w", bucket, key, mapErr(err))
	}
	return nil
}

// Copy copies server-side (CopyObject up to 5 GiB, multipart UploadPartCopy beyond), keeping the
// source's content type, and creates the destination bucket if needed.
func (s *Store) Copy(ctx context.Context, srcBucket, srcKey, dstBucket, dstKey string) error {
	info, err := s.Stat(ctx, srcBucket, srcKey)
	if err != nil {
		return fmt.Errorf("copying: %w", err)
	}
	return s.copy(ctx, info, minio.CopySrcOptions{Bucket: srcBucket, Object: srcKey}, dstBucket, dstKey)
}

// copy is Copy of the object info describes, from src (CopyStatted names the version to copy).
func (s *Store) copy(ctx context.Context, info objstore.Info, src minio.CopySrcOptions, dstBucket, dstKey string) error {
	srcBucket, srcKey := info.Bucket, info.Key
	if srcBucket == dstBucket && srcKey == dstKey {
		return nil // S3 refuses a copy onto itself that changes nothing; the object is already there
	}
	if err := s.check(dstBucket, dstKey, false); err != nil {
		return fmt.Errorf("copying to %s/%s: %w", dstBucket, dstKey, err)
	}
	if err := s.EnsureBucket(ctx, dstBucket); err != nil {
		return fmt.Errorf("copying: %w", err)
	}
	dst := minio.CopyDestOptions{Bucket: dstBucket, Object: dstKey}
	if info.Variant {
		// A copy is what its source was when Stat saw it: a variant (one the reuse memory hands out
		// again) keeps the Stat's content type and marker, not whatever the source holds by the time S3
		// copies it. The If-Match of an unversioned source checks the ETag, the bytes' MD5 alone: the
		// same bytes written back meanwhile as text/html would pass it, and be served so.
		dst.ReplaceMetadata = true
		dst.UserMetadata = map[string]string{"Content-Type": info.ContentType, objstore.VariantHeader: "1"}
	}
	var err error
	if info.Size <= 5<<30 {
		_, err = s.client.CopyObject(ctx, dst, src)
	} else {
		// ComposeObject splits into UploadPartCopy requests; its multipart path copies only the
		// source's x-amz-meta-* metadata, not the content type, so that is set explicitly. (Not
		// exercised by the tests: it needs an object over 5 GiB.)
		if !dst.ReplaceMetadata {
			dst.ReplaceMetadata = true
			dst.UserMetadata = map[string]string{"Content-Type": info.ContentType}
		}
		_, err = s.client.ComposeObject(ctx, dst, src)
	}
	if err != nil {
		return fmt.Errorf("copying %s/%s to %s/%s: %w", srcBucket, srcKey, dstBucket, dstKey, mapErr(err))
	}
	return nil
}

// EnsureBucket creates the bucket in the configured region unless it exists.
func (s *Store) EnsureBucket(ctx context.Context, bucket string) error {
	if err := s.checkBucket(bucket, false); err != nil {
		return fmt.Errorf("creating bucket %s: %w", bucket, err)
	}
	// New buckets must follow today's rules; other calls accept the legacy names (capitals,
	// underscores) of existing buckets that AWS still serves.
	if err := s3utils.CheckValidBucketNameStrict(bucket); err != nil {
		return fmt.Errorf("creating bucket %s: %w: %v", bucket, objstore.ErrInvalidName, err)
	}
	ctx, cancel := s.opContext(ctx)
	defer cancel()
	ok, err := s.client.BucketExists(ctx, bucket)
	if err != nil {
		return fmt.Errorf("creating bucket %s: %w", bucket, mapErr(err))
	}
	if ok {
		return nil
	}
	err = s.client.MakeBucket(ctx, bucket, minio.MakeBucketOptions{Region: s.cfg.Region})
	if err != nil {
		switch minioCode(err) {
		case minio.BucketAlreadyOwnedByYou:
			return nil // another instance won the race
		case minio.BucketAlreadyExists:
			// Someone created it meanwhile; it is fine only if it is usable with our credentials.
			if ok, _ := s.client.BucketExists(ctx, bucket); ok {
				return nil
			}
		}
		return fmt.Errorf("creating bucket %s: %w", bucket, mapErr(err))
	}
	return nil
}

// Ping lists buckets. Credentials that authenticate but may not list buckets (AccessDenied) still
// count as reachable: the worker needs object access, not ListAllMyBuckets. No credentials at all
// do not: S3 answers an anonymous request with the same AccessDenied, and every job would then fail.
func (s *Store) Ping(ctx context.Context) error {
	if s.closed.Load() {
		return fmt.Errorf("pinging s3: %w", objstore.ErrClosed)
	}
	ctx, cancel := s.opContext(ctx)
	defer cancel()
	if _, err := s.client.ListBuckets(ctx); err != nil {
		if minioCode(err) == minio.AccessDenied && s.cfg.AccessKey != "" {
			return nil
		}
		if s.cfg.AccessKey == "" {
			return fmt.Errorf("pinging s3 at %s without credentials: %w", s.cfg.Endpoint, err)
		}
		return fmt.Errorf("pinging s3 at %s: %w", s.cfg.Endpoint, err)
	}
	return nil
}

// IsCredentialError reports whether err is S3 refusing the credentials or what they may do (a wrong
// or missing key, a bad signature, an expired token, no permission), rather than the network or the
// service being down.
func IsCredentialError(err error) bool {
	switch minioCode(err) {
	case minio.AccessDenied, "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken",
		"AccountProblem", "AllAccessDisabled", "AuthorizationHeaderMalformed":
		return true
	}
	return false
}

// URL returns PublicURL (or scheme://Endpoint) + "/" + bucket + "/" + escaped key.
func (s *Store) URL(bucket, key string) string {
	return objstore.ObjectURL(s.baseURL+"/"+url.PathEscape(bucket), key)
}

// Close drops idle connections; later calls fail with objstore.ErrClosed. It is idempotent.
func (s *Store) Close() error {
	if s.closed.CompareAndSwap(false, true) {
		s.transport.CloseIdleConnections()
	}
	return nil
}

// check rejects use after Close and names that cannot exist, before any request is made. For reads,
// an impossible name is also "not found".
func (s *conn) check(bucket, key string, read bool) error {
	if err := s.checkBucket(bucket, read); err != nil {
		return err
	}
	if err := objstore.ValidateKey(key); err != nil {
		return notFoundIf(err, read)
	}
	return nil
}

func (s *conn) checkBucket(bucket string, read bool) error {
	if s.closed.Load() {
		return objstore.ErrClosed
	}
	if err := s3utils.CheckValidBucketName(bucket); err != nil {
		return notFoundIf(fmt.Errorf("%w: bucket %q: %v", objstore.ErrInvalidName, bucket, err), read)
	}
	return nil
}

func notFoundIf(err error, read bool) error {
	if read {
		return fmt.Errorf("%w (%w)", err, objstore.ErrNotFound)
	}
	return err
}

// opContext bounds a short call by Timeout, also when the caller's deadline is far away: a job may run
// for 30 minutes, but a reply lost in a cluster leader change must not hold it that long (the earlier
// deadline wins).
func (s *conn) opContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.cfg.Timeout)
}
