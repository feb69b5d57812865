package storetest

import (
	"errors"
	"testing"

	"github.com/mediaworker/mediaworker/objstore"
)

// testStattedVersion: the version a Stat found is the one CopyStatted copies and DeleteStatted removes
// (the pipeline quarantines and deletes infected uploads so); an object replaced since the Stat is
// neither copied nor deleted, and the refusal is transient (the job looks again and scans the new one).
func testStattedVersion(t *testing.T, s objstore.Store) {
	b, q := newBucket(t, s), bucketName()
	putString(t, s, b, "in/v.bin", "the scanned version")
	info, err := s.Stat(ctx(t), b, "in/v.bin")
	if err != nil {
		t.Fatalf("Stat: %v", err)
	}
	if err := objstore.CopyStatted(ctx(t), s, info, q, "in/v.bin"); err != nil {
		t.Fatalf("CopyStatted: %v", err)
	}
	requireString(t, s, q, "in/v.bin", "the scanned version")
	if err := objstore.DeleteStatted(ctx(t), s, info); err != nil {
		t.Fatalf("DeleteStatted: %v", err)
	}
	_, err = s.Stat(ctx(t), b, "in/v.bin")
	requireNotFound(t, "Stat after DeleteStatted", err, "in/v.bin")
	if err := objstore.DeleteStatted(ctx(t), s, info); err != nil {
		t.Errorf("DeleteStatted of a version gone already: %v", err)
	}

	putString(t, s, b, "in/w.bin", "the scanned version")
	old, err := s.Stat(ctx(t), b, "in/w.bin")
	if err != nil {
		t.Fatalf("Stat: %v", err)
	}
	putString(t, s, b, "in/w.bin", "a new upload, not scanned")
	err = objstore.CopyStatted(ctx(t), s, old, q, "in/w.bin")
	if !errors.Is(err, objstore.ErrChanged) || objstore.IsPermanent(err) {
		t.Errorf("CopyStatted of a replaced version = %v, want a transient ErrChanged", err)
	}
	if _, err := s.Stat(ctx(t), q, "in/w.bin"); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("CopyStatted of a replaced version left a copy: %v", err)
	}
	err = objstore.DeleteStatted(ctx(t), s, old)
	if !errors.Is(err, objstore.ErrChanged) || objstore.IsPermanent(err) {
		t.Errorf("DeleteStatted of a replaced version = %v, want a transient ErrChanged", err)
	}
	requireString(t, s, b, "in/w.bin", "a new upload, not scanned")

	// An Info the caller made (no version recorded) acts on whatever the key holds, as Copy and Delete.
	bare := objstore.Info{Bucket: b, Key: "in/w.bin"}
	if err := objstore.CopyStatted(ctx(t), s, bare, q, "in/w.bin"); err != nil {
		t.Fatalf("CopyStatted without a version: %v", err)
	}
	requireString(t, s, q, "in/w.bin", "a new upload, not scanned")
	if err := objstore.DeleteStatted(ctx(t), s, bare); err != nil {
		t.Fatalf("DeleteStatted without a version: %v", err)
	}
	_, err = s.Stat(ctx(t), b, "in/w.bin")
	requireNotFound(t, "Stat after DeleteStatted without a version", err, "in/w.bin")
}
