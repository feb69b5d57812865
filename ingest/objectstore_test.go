package ingest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/objstore"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// An object-store metadata message is a put of the NUID's version; a deletion, a link and a variant
// the worker wrote are told apart.
func TestParseObjectMeta(t *testing.T) {
	meta := func(mut func(*jetstream.ObjectInfo)) []byte {
		oi := jetstream.ObjectInfo{ObjectMeta: jetstream.ObjectMeta{Name: "uploads/a.jpg"}, Bucket: "media",
			NUID: "nuid1", Size: 10, ModTime: time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC), Digest: "SHA-256=abc"}
		mut(&oi)
		b, _ := json.Marshal(oi)
		return b
	}
	r, err := ParseObjectMeta(meta(func(*jetstream.ObjectInfo) {}))
	if err != nil || !r.Created() || r.Key != "uploads/a.jpg" || r.VersionID != "nuid1" || r.ETag != "abc" || r.Variant {
		t.Fatalf("put: %+v %v", r, err)
	}
	m := Mapper{Routes: []Route{{Bucket: "media", Prefix: "uploads/"}}}
	if req, v, err := m.Map(r); v != Publish || req.MediaID != MediaID("media", "uploads/a.jpg", "nuid1", "") || req.MediaURL != "s3://media/uploads/a.jpg" {
		t.Fatalf("map: %v %v %+v", v, err, req)
	}
	r, _ = ParseObjectMeta(meta(func(oi *jetstream.ObjectInfo) { oi.Deleted = true }))
	if r.Created() {
		t.Error("a deletion is a creation")
	}
	r, _ = ParseObjectMeta(meta(func(oi *jetstream.ObjectInfo) {
		oi.Opts = &jetstream.ObjectMetaOptions{Link: &jetstream.ObjectLink{Bucket: "x"}}
	}))
	if r.Created() {
		t.Error("a link is a creation")
	}
	r, _ = ParseObjectMeta(meta(func(oi *jetstream.ObjectInfo) { oi.Headers = nats.Header{objstore.VariantHeader: []string{"1"}} }))
	if _, v, _ := m.Map(r); !r.Variant || v != Guarded {
		t.Errorf("a variant the worker wrote: %+v → %v", r, v)
	}
	for _, bad := range []string{`nope`, `{"bucket":"media","nuid":"n"}`, `{"name":"a","nuid":"n"}`, `{"name":"a","bucket":"media"}`} {
		if _, err := ParseObjectMeta([]byte(bad)); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}
