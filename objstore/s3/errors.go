package s3

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/minio/minio-go/v7"

	"github.com/mediaworker/mediaworker/objstore"
)

// Classifying the service's answers. A 4xx answer is the service saying the request as asked will never
// work (a name it will not take, a method or size it refuses): retrying it for the ten minutes of a job's
// deliveries only delays the answer, so it is permanent (objstore.ErrRefused), as are the kinds the
// pipeline names itself (not found, invalid name). The exceptions are the 4xx answers about the worker
// rather than the request: its credentials and their permissions, its clock, its pace, a conflict the
// service asks to retry. Those are transient: an expired key or a policy change is an operator's to
// fix, and failing every request in flight for good while it lasts would lose them all.

// mapErr turns S3 "no such key/bucket" answers into objstore.ErrNotFound, invalid names into
// objstore.ErrInvalidName, answers about another version than the one asked for into
// objstore.ErrChanged and other refusals into objstore.ErrRefused, keeping the original for its
// message. Everything else (5xx, throttling, the network, a context) is returned as it is: transient.
func mapErr(err error) error {
	var er minio.ErrorResponse
	if !errors.As(err, &er) {
		return err
	}
	switch er.Code {
	case minio.NoSuchKey, minio.NoSuchBucket, "NotFound":
		return fmt.Errorf("%w: %w", objstore.ErrNotFound, err)
	case minio.InvalidBucketName, "XMinioInvalidObjectName", "KeyTooLongError":
		return fmt.Errorf("%w: %w", objstore.ErrInvalidName, err)
	case minio.PreconditionFailed, "NoSuchVersion":
		// Only the reads and copies bound to a version (If-Match an ETag, a version ID) ask for these.
		return fmt.Errorf("%w: %w", objstore.ErrChanged, err)
	}
	if refused(er) {
		return fmt.Errorf("%w: %w", objstore.ErrRefused, err)
	}
	return err
}

// refused reports whether an error answer is a 4xx that no retry can turn into a success.
func refused(er minio.ErrorResponse) bool {
	if er.StatusCode < 400 || er.StatusCode > 499 {
		return false
	}
	if er.Code == "InvalidObjectState" {
		return true // 403 for an archived object (Glacier): the object's own state
	}
	if transientCodes[er.Code] {
		return false
	}
	switch er.StatusCode {
	case http.StatusUnauthorized, http.StatusForbidden, // credentials and permissions: the operator's
		http.StatusRequestTimeout, http.StatusConflict, http.StatusLocked, http.StatusTooEarly,
		http.StatusTooManyRequests, 499: // slow, concurrent, throttled, cut off
		return false
	}
	return true
}

// transientCodes are S3 error codes that come with a 4xx status but say nothing about the request's
// bucket, key or object: credentials, the clock, a body damaged in transit, throttling, a conflicting
// operation S3 asks to retry, a multipart upload that vanished under a retried part.
var transientCodes = map[string]bool{
	"AccessDenied": true, "AccountProblem": true, "AllAccessDisabled": true,
	"InvalidAccessKeyId": true, "SignatureDoesNotMatch": true, "ExpiredToken": true, "InvalidToken": true,
	"TokenRefreshRequired": true, "AuthorizationHeaderMalformed": true, "AuthorizationQueryParametersError": true,
	"InvalidRegion": true, "RequestTimeTooSkewed": true, "RequestTimeout": true, "IncompleteBody": true,
	"BadDigest": true, "XAmzContentSHA256Mismatch": true, "SlowDown": true, "OperationAborted": true,
	"NoSuchUpload": true,
}

// headErr classifies the error of a HEAD request: Stat, and the first step of every read (minio-go
// looks an object up before it reads it). A HEAD answer has no body, so a 400 carries no error code, and
// a 400 is both "this request is wrong" (permanent) and "your token expired" (transient): the same
// request made as a GET, whose answer carries the code, tells which. Other bare statuses say enough.
func (s *conn) headErr(ctx context.Context, bucket, key string, opts minio.GetObjectOptions, err error) error {
	var er minio.ErrorResponse
	if !errors.As(err, &er) || er.StatusCode != http.StatusBadRequest || !bare(er.Code) {
		return mapErr(err)
	}
	body, _, _, gerr := minio.Core{Client: s.client}.GetObject(ctx, bucket, key, opts)
	if gerr == nil {
		body.Close()
		return err // the GET works where the HEAD did not: nothing to tell by, try again later
	}
	if errors.As(gerr, &er) && !bare(er.Code) {
		return mapErr(gerr)
	}
	return mapErr(err)
}

// bare reports whether code is what minio-go names an answer without an error document: its status
// line ("400 Bad Request").
func bare(code string) bool { return code == "" || code[0] >= '0' && code[0] <= '9' }

func minioCode(err error) string {
	var er minio.ErrorResponse
	if errors.As(err, &er) {
		return er.Code
	}
	return ""
}
