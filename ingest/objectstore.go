package ingest

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/objstore"
	"github.com/nats-io/nats.go/jetstream"
)

// Record kinds, as contracts.Source names them.
const (
	kindS3   = contracts.SourceS3Event
	kindNATS = contracts.SourceNATSObjectStore
	natsPut  = "PUT" // the one event a JetStream object store's metadata message stands for
)

// The JetStream object store keeps bucket B in stream OBJ_B: each object's chunks on $O.B.C.<nuid>
// and its metadata, one message per put (a roll-up: the newest replaces the older), on
// $O.B.M.<base64 of the name>. A put's metadata message is the store's upload event: Ingester
// consumes those subjects durably.

// objectStream is the stream of object-store bucket b.
func objectStream(b string) string { return "OBJ_" + b }

// objectMetaSubjects is the filter of b's metadata messages.
func objectMetaSubjects(b string) string { return "$O." + b + ".M.>" }

// subjectBucket is the bucket of a metadata subject $O.<bucket>.M.<name>, "" when it is not one.
func subjectBucket(subject string) string {
	b, ok := strings.CutPrefix(subject, "$O.")
	if !ok {
		return ""
	}
	b, _, ok = strings.Cut(b, ".M.")
	if !ok || strings.Contains(b, ".") {
		return ""
	}
	return b
}

// ParseObjectMeta reads an object-store metadata message. A deletion (the store writes a metadata
// message for it too) is a record whose EventName is not PUT, ignored like S3's other event types.
func ParseObjectMeta(data []byte) (Record, error) {
	if len(data) > maxEventBytes {
		return Record{}, fmt.Errorf("metadata message is %d bytes, more than %d", len(data), maxEventBytes)
	}
	var oi jetstream.ObjectInfo
	if err := json.Unmarshal(data, &oi); err != nil {
		return Record{}, fmt.Errorf("decoding object metadata: %w", err)
	}
	switch {
	case oi.Bucket == "":
		return Record{}, errors.New("object metadata names no bucket")
	case oi.Name == "":
		return Record{}, errors.New("object metadata names no object")
	case oi.NUID == "":
		return Record{}, errors.New("object metadata has no nuid")
	}
	r := Record{Kind: kindNATS, EventName: natsPut, Bucket: oi.Bucket, Key: oi.Name, VersionID: oi.NUID,
		ETag: strings.TrimPrefix(oi.Digest, "SHA-256="), Size: int64(oi.Size), Time: oi.ModTime,
		Variant: oi.Headers.Get(objstore.VariantHeader) == "1"}
	if oi.Deleted {
		r.EventName = "DELETE"
	}
	if oi.Opts != nil && oi.Opts.Link != nil {
		r.EventName = "LINK" // a link is no upload of bytes
	}
	return r, nil
}
