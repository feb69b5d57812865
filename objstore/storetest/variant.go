package storetest

import (
	"strings"
	"testing"

	"github.com/mediaworker/mediaworker/objstore"
)

// testVariantMarker: a Put under objstore.AsVariant marks the object, any other Put does not, and
// neither does a Copy of an unmarked object (quarantine) nor an overwrite without the marker.
func testVariantMarker(t *testing.T, s objstore.Store) {
	b := newBucket(t, s)
	stat := func(key string) objstore.Info {
		t.Helper()
		info, err := s.Stat(ctx(t), b, key)
		if err != nil {
			t.Fatalf("Stat %s: %v", key, err)
		}
		return info
	}
	if err := s.Put(objstore.AsVariant(ctx(t)), b, "v/ours.webp", strings.NewReader("webp"), 4, "image/webp"); err != nil {
		t.Fatal(err)
	}
	putString(t, s, b, "u/upload.jpg", "upload")
	if info := stat("v/ours.webp"); !info.Variant || info.ContentType != "image/webp" {
		t.Errorf("variant Put: %+v, want marked, image/webp", info)
	}
	if stat("u/upload.jpg").Variant {
		t.Error("a plain Put is marked as a variant")
	}
	if err := s.Copy(objstore.AsVariant(ctx(t)), b, "u/upload.jpg", b, "q/upload.jpg"); err != nil {
		t.Fatal(err)
	}
	if stat("q/upload.jpg").Variant {
		t.Error("a copy of an upload is marked as a variant")
	}
	putString(t, s, b, "v/ours.webp", "overwritten")
	if stat("v/ours.webp").Variant {
		t.Error("an unmarked overwrite kept the marker")
	}
}
