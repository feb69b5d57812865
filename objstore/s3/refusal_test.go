package s3_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/objstore"
	"github.com/mediaworker/mediaworker/objstore/s3"
)

// TestRefusalsArePermanent: the S3 server answers 400 to a bucket name S3 does not take (capitals and an
// underscore pass minio-go's lenient check of legacy names); that used to be retried for ten minutes
// and dead-lettered, now it is a permanent failure at once.
func TestRefusalsArePermanent(t *testing.T) {
	m := testenv.StartS3(t)
	s := newStore(t, gwConfig(m))
	ctx := t.Context()
	// The HEAD's bare 400 is asked again as a GET, whose answer names the cause.
	_, err := s.Stat(ctx, "Media_Upper", "u/p.jpg")
	if !errors.Is(err, objstore.ErrInvalidName) || !objstore.IsPermanent(err) {
		t.Errorf("Stat in bucket Media_Upper = %v, want a permanent ErrInvalidName", err)
	}
	_, err = s.Get(ctx, "Media_Upper", "u/p.jpg", io.Discard)
	if !objstore.IsPermanent(err) {
		t.Errorf("Get in bucket Media_Upper = %v, want a permanent error", err)
	}
	err = s.Put(ctx, "Media_Upper", "u/p.jpg", strings.NewReader("x"), 1, "text/plain")
	if !objstore.IsPermanent(err) {
		t.Errorf("Put in bucket Media_Upper = %v, want a permanent error", err)
	}
}

// TestAnswersAreClassified: every 4xx answer is permanent except those about the worker itself
// (credentials, permissions, clock, pace, a conflict to retry); a precondition the worker set fails as
// ErrChanged; 5xx are transient. The answers come from a scripted S3 endpoint on loopback, as MinIO
// gives only some of them on demand. Reads are classified by the GET's error document; lookups (HEAD,
// whose answers have no body) by their status, and a bare 400 by asking again with a GET.
func TestAnswersAreClassified(t *testing.T) {
	cases := []struct {
		status int
		code   string
		want   class
	}{
		{400, "InvalidArgument", permanent},
		{400, "InvalidBucketName", permanent},
		{400, "", permanent}, // no document at all
		{400, "ExpiredToken", transient},
		{400, "RequestTimeout", transient},
		{400, "AuthorizationHeaderMalformed", transient},
		{401, "Unauthorized", transient},
		{403, "AccessDenied", transient},
		{403, "SignatureDoesNotMatch", transient},
		{403, "RequestTimeTooSkewed", transient},
		{403, "InvalidObjectState", permanent}, // an archived object: S3 answers its HEAD, not its GET
		{404, "NoSuchKey", notFound},
		{404, "NoSuchUpload", transient},
		{405, "MethodNotAllowed", permanent},
		{408, "RequestTimeout", transient},
		{409, "OperationAborted", transient},
		{411, "MissingContentLength", permanent},
		{412, "PreconditionFailed", changed},
		{413, "EntityTooLarge", permanent},
		{414, "RequestURITooLong", permanent},
		{416, "InvalidRange", permanent},
		{429, "SlowDown", transient},
		{500, "InternalError", transient},
		{503, "SlowDown", transient},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("GET %d %s", tc.status, tc.code), func(t *testing.T) {
			s := newStore(t, scriptedConfig(t, http.StatusOK, tc.status, tc.code))
			_, err := s.Get(t.Context(), "media", "u/p.jpg", io.Discard)
			requireClass(t, err, tc.want)
		})
		if tc.code == "InvalidObjectState" || tc.code == "NoSuchUpload" {
			continue // answers to a GET or a multipart upload, never to a HEAD
		}
		want := tc.want
		if tc.status == http.StatusForbidden || tc.status == http.StatusNotFound {
			want = map[int]class{403: transient, 404: notFound}[tc.status] // a bare 403 or 404 says it all
		}
		t.Run(fmt.Sprintf("HEAD %d %s", tc.status, tc.code), func(t *testing.T) {
			s := newStore(t, scriptedConfig(t, tc.status, tc.status, tc.code))
			_, err := s.Stat(t.Context(), "media", "u/p.jpg")
			requireClass(t, err, want)
		})
	}
}

type class int

const (
	transient class = iota
	permanent
	changed
	notFound
)

func requireClass(t *testing.T, err error, want class) {
	t.Helper()
	var got class
	switch {
	case err == nil:
		t.Fatal("no error")
	case errors.Is(err, objstore.ErrNotFound):
		got = notFound
	case errors.Is(err, objstore.ErrChanged):
		got = changed
	case objstore.IsPermanent(err):
		got = permanent
	}
	if got != want || (got == changed || got == transient) && objstore.IsPermanent(err) {
		t.Errorf("%v: class %d, want %d", err, got, want)
	}
}

// scriptedConfig starts an S3 endpoint on loopback that answers a HEAD with headStatus (a 10-byte
// object when 200; no body, as S3) and a GET with status and, when code is set, an S3 error document
// with that code, and returns a Store configuration that uses it.
func scriptedConfig(t *testing.T, headStatus, status int, code string) s3.Config {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodHead {
			if headStatus == http.StatusOK {
				w.Header().Set("Content-Length", "10")
				w.Header().Set("ETag", `"0123456789abcdef"`)
				w.Header().Set("Last-Modified", time.Now().UTC().Format(http.TimeFormat))
			}
			w.WriteHeader(headStatus)
			return
		}
		if code == "" {
			w.WriteHeader(status)
			return
		}
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(status)
		fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>scripted</Message><RequestId>1</RequestId></Error>`, code)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	cfg := s3.DefaultConfig()
	cfg.Endpoint = ln.Addr().String()
	cfg.AccessKey, cfg.SecretKey, cfg.MaxRetries = "k", "secret", 1
	return cfg
}
