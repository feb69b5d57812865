package contracts

import (
	"encoding/json"
	"time"
)

// Source kinds: where a request the worker made itself (package ingest) came from.
const (
	// SourceS3Event: an S3 event record (AWS's Records shape, as versitygw sends it, or MinIO's wrapper).
	SourceS3Event = "s3-event"
	// SourceNATSObjectStore: a put into the JetStream object store (its metadata message).
	SourceNATSObjectStore = "nats-object-store"
)

// Source is an extension of the seed contract: it says which upload a request was made from when no
// API published it, because the worker turned the store's own upload event into the request
// (package ingest). The answer echoes it as metadata.source, so an API that never published the
// request can still tie the answer to its upload. A request that carries none gets an answer without
// it: a seed client's answer stays the seed's.
type Source struct {
	Kind      string `json:"kind"`                // SourceS3Event or SourceNATSObjectStore
	Event     string `json:"event"`               // the store's event name, e.g. s3:ObjectCreated:Put
	Bucket    string `json:"bucket"`              // the bucket the upload is in
	Key       string `json:"key"`                 // its key, unescaped
	VersionID string `json:"versionId,omitempty"` // the object version, when the store versions
	ETag      string `json:"etag,omitempty"`      // the version's ETag (S3) or digest (NATS)
	Size      int64  `json:"size,omitempty"`      // bytes, as the event told
	Time      string `json:"time,omitempty"`      // when the store saw the upload, RFC 3339
}

// Limits of a Source's fields (they are echoed in every answer).
const (
	maxSourceEventBytes   = 128
	maxSourceVersionBytes = 1024
	maxSourceETagBytes    = 256
)

// Valid reports whether s is a source the worker echoes: a known kind, a bucket and a key within the
// request's limits, every other field within its own, a time in RFC 3339.
func (s Source) Valid() bool {
	if s.Kind != SourceS3Event && s.Kind != SourceNATSObjectStore {
		return false
	}
	if s.Bucket == "" || len(s.Bucket) > MaxBucketBytes || s.Key == "" || len(s.Key) > MaxKeyBytes {
		return false
	}
	if len(s.Event) > maxSourceEventBytes || len(s.VersionID) > maxSourceVersionBytes || len(s.ETag) > maxSourceETagBytes || s.Size < 0 {
		return false
	}
	if s.Time != "" {
		if _, err := time.Parse(time.RFC3339Nano, s.Time); err != nil {
			return false
		}
	}
	for _, v := range []string{s.Event, s.Bucket, s.Key, s.VersionID, s.ETag} {
		if badText([]byte(v)) != "" {
			return false
		}
	}
	return true
}

// parseSource reads a request's source: nil unless raw is a valid Source. Before the extension
// "source" was an unknown field, which the worker ignores; a value that is not a Source still is
// (never a refusal), so a client that used the name for something of its own is answered as before.
func parseSource(raw json.RawMessage) *Source {
	if raw == nil || badText(raw) != "" {
		return nil
	}
	var s Source
	if err := json.Unmarshal(raw, &s); err != nil || !s.Valid() {
		return nil
	}
	return &s
}
