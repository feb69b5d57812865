package ingest

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/objstore"
)

// Namespace is the UUID namespace of ingest's mediaIds (RFC 9562 version 5: SHA-1 of the namespace
// and a name). Fixed for good: changing it would make every re-sent event a new request.
var Namespace = uuid.MustParse("8f0e4b7a-3c61-5d2e-9a4f-6b1d2c3e4f50")

// MediaID is the mediaId of one version of an object: the version-5 UUID, in Namespace, of
// "<bucket>\n<key>\n<version>", where version is "v:" and the object's version ID when the store gave
// one (S3 versioning; the object store's NUID of the put), else "e:" and its ETag without quotes. So
// a re-sent event is the same request (its Nats-Msg-Id is the mediaId), and a new version of the key
// is a new one. In a bucket that does not version, uploading the same bytes to the same key again
// has the same ETag and is the same request: the answer already given stands for it. An API can
// compute it too (any UUIDv5 library) to find the answer to an upload it presigned. The version ID
// "null" (every put's, in a bucket whose versioning is suspended) is no version: the ETag tells.
func MediaID(bucket, key, versionID, etag string) string {
	v := "v:" + versionID
	if versionID == "" || versionID == nullVersion {
		v = "e:" + strings.Trim(etag, `"`)
	}
	return uuid.NewSHA1(Namespace, []byte(bucket+"\n"+key+"\n"+v)).String()
}

// nullVersion is S3's version ID of an object put while the bucket's versioning is suspended: the
// same for every put of the key, so it tells no version from another.
const nullVersion = "null"

// Verdict is what becomes of one record.
type Verdict int

const (
	Publish   Verdict = iota // a request is published
	Ignored                  // not an object creation (deletes, tagging, test events)
	Unwatched                // no route matches its bucket and key
	Guarded                  // the worker's own output or the quarantine: never a job (the loop guard)
	Malformed                // the record cannot become a valid request
)

func (v Verdict) String() string {
	switch v {
	case Publish:
		return "published"
	case Ignored:
		return "ignored"
	case Unwatched:
		return "unwatched"
	case Guarded:
		return "guarded"
	case Malformed:
		return "malformed"
	}
	return fmt.Sprintf("Verdict(%d)", int(v))
}

// Mapper maps records to requests. Its zero value watches nothing.
type Mapper struct {
	Routes []Route
	// Quarantine is the bucket infected uploads are moved to: never watched.
	Quarantine string
	// URL is the object's URL in the store (objstore.Store.URL), the mediaUrl when Template is empty.
	URL func(bucket, key string) string
	// Template is Config.URLTemplate.
	Template string
}

// Map decides what becomes of r: its request when the verdict is Publish, else why not (err says
// more for Malformed and Guarded).
func (m Mapper) Map(r Record) (contracts.Request, Verdict, error) {
	if !r.Created() {
		return contracts.Request{}, Ignored, nil
	}
	if m.Quarantine != "" && r.Bucket == m.Quarantine {
		return contracts.Request{}, Guarded, errors.New("the quarantine bucket")
	}
	route, ok := m.route(r.Bucket, r.Key)
	if !ok {
		return contracts.Request{}, Unwatched, nil
	}
	if r.Variant {
		return contracts.Request{}, Guarded, errors.New("the worker's own output (it carries the variant marker)")
	}
	if IsOutputKey(r.Key) {
		return contracts.Request{}, Guarded, errors.New("a key shaped like the worker's outputs (<dir>/images|videos|thumbnail/<uuid>/…)")
	}
	if r.VersionID == "" && r.ETag == "" {
		return contracts.Request{}, Malformed, errors.New("the record has neither a version ID nor an ETag: a new version could not be told from a re-sent event")
	}
	id := MediaID(r.Bucket, r.Key, r.VersionID, r.ETag)
	req := contracts.Request{S3Bucket: r.Bucket, S3Key: r.Key, MediaID: id, Recipe: route.Recipe, MediaURL: m.mediaURL(r.Bucket, r.Key, id)}
	src := contracts.Source{Kind: r.Kind, Event: r.EventName, Bucket: r.Bucket, Key: r.Key, VersionID: r.VersionID, ETag: r.ETag, Size: r.Size}
	if !r.Time.IsZero() {
		src.Time = r.Time.UTC().Format(time.RFC3339Nano)
	}
	if src.Valid() {
		req.Source = &src
	}
	if err := req.Validate(); err != nil {
		return contracts.Request{}, Malformed, err
	}
	if req.Source == nil {
		return contracts.Request{}, Malformed, errors.New("the record's version ID, ETag or event name is over its limit")
	}
	return req, Publish, nil
}

func (m Mapper) route(bucket, key string) (Route, bool) {
	for _, r := range m.Routes {
		if r.matches(bucket, key) {
			return r, true
		}
	}
	return Route{}, false
}

func (m Mapper) mediaURL(bucket, key, id string) string {
	if m.Template == "" {
		if m.URL != nil {
			return m.URL(bucket, key)
		}
		return objstore.ObjectURL("s3://"+bucket, key)
	}
	return expand(m.Template, bucket, key, id)
}

// expand fills a URL template.
func expand(t, bucket, key, id string) string {
	escaped := strings.TrimPrefix(objstore.ObjectURL("", key), "/")
	return strings.NewReplacer("{bucket}", bucket, "{key}", escaped, "{mediaId}", id).Replace(t)
}

// checkTemplate refuses a template whose URLs the request contract would refuse.
func checkTemplate(t string) error {
	if !strings.Contains(t, "{key}") && !strings.Contains(t, "{mediaId}") {
		return fmt.Errorf("%q names neither {key} nor {mediaId}: every upload would have the same mediaUrl", t)
	}
	u := expand(t, "media", "dir/a photo.jpg", "550e8400-e29b-41d4-a716-446655440000")
	if err := contracts.ValidateMediaURL(u); err != nil {
		return fmt.Errorf("%q makes mediaUrls like %q, which %w", t, u, err)
	}
	return nil
}

// outputDirs are the directories the worker's output keys have after the request key's directory
// (contracts.OutputKeys): <dir>/images/<mediaId>/…, <dir>/videos/<mediaId>/…, <dir>/thumbnail/<mediaId>/….
var outputDirs = map[string]bool{"images": true, "videos": true, "thumbnail": true}

// IsOutputKey reports whether key has the shape of the worker's outputs: a segment images, videos or
// thumbnail followed by a UUID segment and at least one more. The worker writes its variants into
// the upload's bucket, under the upload's directory, so a watched prefix sees them: this is the loop
// guard that needs no lookup (the variant marker is the other).
func IsOutputKey(key string) bool {
	segs := strings.Split(key, "/")
	for i := 0; i+2 < len(segs); i++ {
		if outputDirs[segs[i]] && len(segs[i+1]) == 36 {
			if _, err := uuid.Parse(segs[i+1]); err == nil {
				return true
			}
		}
	}
	return false
}
