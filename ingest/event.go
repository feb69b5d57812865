package ingest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/mediaworker/mediaworker/objstore"
)

// Record is one upload event, whichever store told it: an S3 event record, or a put into the
// JetStream object store.
type Record struct {
	Kind      string // contracts.SourceS3Event or contracts.SourceNATSObjectStore
	EventName string // s3:ObjectCreated:Put (the s3: prefix added when AWS leaves it out), PUT for NATS
	Bucket    string
	Key       string // unescaped
	// RawKey is the key as the record wrote it, when that differs from Key. AWS and MinIO escape keys
	// in their records as a URL query value does; versitygw writes them as they are. Which one a
	// record means is told by the store (Ingester.resolveKey): the key that exists.
	RawKey    string
	VersionID string
	ETag      string // without its quotes
	Size      int64
	Time      time.Time // zero when the event did not say
	// Variant says the event itself shows the object carries the worker's variant marker (MinIO's
	// userMetadata, the object store's headers). S3 records in AWS's shape carry no metadata: the
	// mapping's key guard and the Stat in Ingester cover those.
	Variant bool
}

// Created reports whether the record is an object creation, the only event that starts a job.
// MinIO also names changes of an object's tags, retention and legal hold s3:ObjectCreated:…: the
// bytes (and so the mediaId) are those of a put already answered, so they are no creation.
func (r Record) Created() bool {
	if r.Kind == kindNATS {
		return r.EventName == natsPut
	}
	kind, ok := strings.CutPrefix(r.EventName, "s3:ObjectCreated:")
	return ok && !metadataOnly[kind]
}

// metadataOnly are MinIO's s3:ObjectCreated: events of no new bytes.
var metadataOnly = map[string]bool{"PutTagging": true, "DeleteTagging": true, "PutRetention": true, "PutLegalHold": true}

// s3Event is the payload of an S3 event notification. AWS (and versitygw, which copies it) send
// {"Records":[…]}; MinIO wraps the same records as {"EventName":…,"Key":"bucket/key","Records":[…]},
// so reading Records alone takes both. Test events (AWS's {"Event":"s3:TestEvent"}, which versitygw
// also sends when it connects) have no Records.
type s3Event struct {
	Records *[]json.RawMessage `json:"Records"`
	Event   string             `json:"Event"`
}

type s3Record struct {
	EventName string `json:"eventName"`
	EventTime string `json:"eventTime"`
	S3        struct {
		Bucket struct {
			Name string `json:"name"`
		} `json:"bucket"`
		Object struct {
			Key          string            `json:"key"`
			Size         int64             `json:"size"`
			ETag         string            `json:"eTag"`
			VersionID    string            `json:"versionId"`
			UserMetadata map[string]string `json:"userMetadata"`
		} `json:"object"`
	} `json:"s3"`
}

// errNoRecords marks a payload that is not an event of any object (a test event): ignored, not
// malformed.
var errNoRecords = errors.New("no records")

// maxEventBytes bounds an event payload read: S3 sends one record per notification (a few KB);
// anything far bigger is not an event.
const maxEventBytes = 1 << 20

// ParseS3Event reads an S3 event notification: every record it could read, and an error for each it
// could not (malformed: the caller counts and logs them, and goes on with the rest). err is set when
// the payload as a whole is not an event notification; errNoRecords when it is one of no object.
func ParseS3Event(data []byte) (recs []Record, bad []error, err error) {
	if len(data) > maxEventBytes {
		return nil, nil, fmt.Errorf("event is %d bytes, more than the %d an event notification can be", len(data), maxEventBytes)
	}
	var ev s3Event
	if err := json.Unmarshal(data, &ev); err != nil {
		return nil, nil, fmt.Errorf("decoding the event: %w", err)
	}
	if ev.Records == nil {
		if ev.Event != "" {
			return nil, nil, errNoRecords
		}
		return nil, nil, errors.New("decoding the event: no Records")
	}
	for i, raw := range *ev.Records {
		r, err := parseS3Record(raw)
		if err != nil {
			bad = append(bad, fmt.Errorf("record %d: %w", i, err))
			continue
		}
		recs = append(recs, r)
	}
	return recs, bad, nil
}

func parseS3Record(raw json.RawMessage) (Record, error) {
	var sr s3Record
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&sr); err != nil {
		return Record{}, fmt.Errorf("decoding: %w", err)
	}
	name := sr.EventName
	if name == "" {
		return Record{}, errors.New("no eventName")
	}
	if !strings.HasPrefix(name, "s3:") { // AWS writes ObjectCreated:Put, MinIO and versitygw s3:ObjectCreated:Put
		name = "s3:" + name
	}
	r := Record{Kind: kindS3, EventName: name, Bucket: sr.S3.Bucket.Name, Size: sr.S3.Object.Size,
		VersionID: sr.S3.Object.VersionID, ETag: strings.Trim(sr.S3.Object.ETag, `"`)}
	if r.VersionID == nullVersion { // a suspended bucket's: no version (MediaID)
		r.VersionID = ""
	}
	if r.Bucket == "" {
		return Record{}, errors.New("no s3.bucket.name")
	}
	if sr.S3.Object.Key == "" {
		return Record{}, errors.New("no s3.object.key")
	}
	// AWS and MinIO escape the key as a URL query value does (a space is '+'); versitygw does not. A
	// key that is no valid escape is as written; one that is may be either (RawKey).
	r.Key = sr.S3.Object.Key
	if key, err := url.QueryUnescape(sr.S3.Object.Key); err == nil && key != r.Key {
		r.Key, r.RawKey = key, sr.S3.Object.Key
	}
	if sr.S3.Object.Size < 0 {
		return Record{}, fmt.Errorf("s3.object.size is negative (%d)", sr.S3.Object.Size)
	}
	if sr.EventTime != "" {
		t, err := time.Parse(time.RFC3339Nano, sr.EventTime)
		if err != nil {
			return Record{}, fmt.Errorf("eventTime %q is not RFC 3339", clip(sr.EventTime))
		}
		r.Time = t
	}
	for k, v := range sr.S3.Object.UserMetadata {
		// MinIO: "X-Amz-Meta-Mediaworker-Variant" (canonical case, as the worker's s3 store sets it).
		if strings.EqualFold(k, "X-Amz-Meta-"+objstore.VariantHeader) && v == "1" {
			r.Variant = true
		}
	}
	return r, nil
}

func clip(s string) string {
	if len(s) <= 80 {
		return s
	}
	return s[:80] + "…"
}
