package s3_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/objstore"
	"github.com/mediaworker/mediaworker/objstore/s3"
)

// TestVersionedBucket: on a versioned bucket the version a Stat found is the one read, quarantined and
// deleted, whatever was uploaded over it since; and deleting it removes that version for good, where a
// plain delete would have left the infected bytes readable under a delete marker.
func TestVersionedBucket(t *testing.T) {
	t.Run("versitygw", func(t *testing.T) {
		testVersionedBucket(t, gwConfig(testenv.StartVersityGW(t, testenv.VersityGWOptions{Versioning: true})))
	})
	t.Run("minio", func(t *testing.T) { testVersionedBucket(t, config(testenv.StartMinIO(t))) })
}

func testVersionedBucket(t *testing.T, cfg s3.Config) {
	s := newStore(t, cfg)
	ctx := t.Context()
	const b, key = "versioned", "u/p.jpg"
	if err := s.EnsureBucket(ctx, b); err != nil {
		t.Fatal(err)
	}
	if err := s.Client().EnableVersioning(ctx, b); err != nil {
		t.Fatal(err)
	}
	put := func(body string) {
		t.Helper()
		if err := s.Put(ctx, b, key, strings.NewReader(body), int64(len(body)), "image/jpeg"); err != nil {
			t.Fatal(err)
		}
	}
	put("infected upload")
	scanned, err := s.Stat(ctx, b, key)
	if err != nil {
		t.Fatal(err)
	}
	put("a later upload") // over it, before the infected one is removed
	_, later := versions(t, s.Client(), b, key)

	var got bytes.Buffer
	if _, err := objstore.GetStatted(ctx, s, scanned, &got); err != nil || got.String() != "infected upload" {
		t.Fatalf("GetStatted read %q, %v; want the version the Stat found", got.String(), err)
	}
	if err := objstore.CopyStatted(ctx, s, scanned, "quarantine", key); err != nil {
		t.Fatalf("CopyStatted: %v", err)
	}
	got.Reset()
	if _, err := s.Get(ctx, "quarantine", key, &got); err != nil || got.String() != "infected upload" {
		t.Fatalf("quarantined %q, %v; want the scanned version", got.String(), err)
	}
	if err := objstore.DeleteStatted(ctx, s, scanned); err != nil {
		t.Fatalf("DeleteStatted: %v", err)
	}
	got.Reset()
	if _, err := s.Get(ctx, b, key, &got); err != nil || got.String() != "a later upload" {
		t.Fatalf("after DeleteStatted the key holds %q, %v; want the later upload", got.String(), err)
	}
	if vs, _ := versions(t, s.Client(), b, key); len(vs) != 1 || vs[0] != later {
		t.Fatalf("versions left: %v; want only the later upload's, %s", vs, later)
	}

	// Deleting the current version leaves no version and no delete marker: the bytes are gone.
	current, err := s.Stat(ctx, b, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := objstore.DeleteStatted(ctx, s, current); err != nil {
		t.Fatalf("DeleteStatted of the current version: %v", err)
	}
	if vs, _ := versions(t, s.Client(), b, key); len(vs) != 0 {
		t.Fatalf("versions left after deleting the only one: %v", vs)
	}
	if err := objstore.DeleteStatted(ctx, s, current); err != nil {
		t.Errorf("DeleteStatted of a version gone already: %v", err)
	}
	if _, err := objstore.GetStatted(ctx, s, current, &got); !errors.Is(err, objstore.ErrChanged) && !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("GetStatted of a deleted version = %v, want ErrChanged or ErrNotFound", err)
	}

	// Control: a plain Delete only hides the version under a marker.
	put("infected upload")
	if err := s.Delete(ctx, b, key); err != nil {
		t.Fatal(err)
	}
	if vs, _ := versions(t, s.Client(), b, key); len(vs) != 2 {
		t.Fatalf("after a plain Delete: %v; want the version and a delete marker", vs)
	}
}

// versions lists every version and delete marker of key, and the current version's ID.
func versions(t *testing.T, c *minio.Client, bucket, key string) (all []string, latest string) {
	t.Helper()
	for o := range c.ListObjects(t.Context(), bucket, minio.ListObjectsOptions{Prefix: key, WithVersions: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		if o.Key != key {
			continue
		}
		id := o.VersionID
		if o.IsDeleteMarker {
			id += " (delete marker)"
		}
		if o.IsLatest {
			latest = id
		}
		all = append(all, id)
	}
	return all, latest
}
