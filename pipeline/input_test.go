package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/objstore"
	"github.com/mediaworker/mediaworker/scanner"
)

// What the worker takes as an input, and what it removes when the input is infected.

// TestQuarantineIsNotAnInput: a request naming the quarantine bucket used to be scanned, copied onto
// itself, deleted and reported "quarantined". It is refused with an answer before the store is asked
// anything, in triage (so it never reaches a lane) and in a lane alike.
func TestQuarantineIsNotAnInput(t *testing.T) {
	f := newFixture(t)
	f.cfg.QuarantineBucket = "quarantine"
	f.store.objs["quarantine/u/p.jpg"] = jpegHeader
	f.req.S3Bucket = "quarantine"
	f.scan.verdict = scanner.Verdict{Infected: true, Signature: "Eicar-Test"}
	p, err := New(f.cfg, Deps{Store: f.store, Scanner: f.scan, Images: f.images, Videos: fakeVideos{}})
	if err != nil {
		t.Fatal(err)
	}
	const want = `invalid request: s3Bucket is the worker's quarantine bucket "quarantine"`
	for name, run := range map[string]func() Outcome{
		"triage": func() Outcome { return p.Triage(context.Background(), f.req) },
		"lane":   func() Outcome { return p.Process(context.Background(), f.req, Image) },
	} {
		out := run()
		var pe *contracts.ParseError
		if out.Kind != Failed || !errors.As(out.Err, &pe) || !strings.HasPrefix(out.Response.Error, want) || out.Virus != nil {
			t.Fatalf("%s: %s %q (virus %v), want a refusal %q", name, out.Kind, out.Response.Error, out.Virus, want)
		}
		if err := contracts.Validate(contracts.SchemaResponse, out.Response); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if f.store.stats != 0 || len(f.store.calls) != 0 || f.scan.scanned {
		t.Errorf("looked up %d times, store calls %v, scanned %v; want nothing done", f.store.stats, f.store.calls, f.scan.scanned)
	}
	if _, ok := f.store.objs["quarantine/u/p.jpg"]; !ok {
		t.Error("the quarantined file is gone")
	}
}

// TestOwnOutputsAreNotInputs: an object the worker uploaded as a variant is refused, so an API that
// requests every new object of its bucket cannot make the worker transform its own outputs for ever.
func TestOwnOutputsAreNotInputs(t *testing.T) {
	f := newFixture(t)
	if out := f.run(t); out.Kind != Success {
		t.Fatalf("%s %v", out.Kind, out.Err)
	}
	variant := contracts.KeysFor(f.req).Image(contracts.QualityHigh)
	f.req.S3Key = variant
	p, err := New(f.cfg, Deps{Store: f.store, Scanner: f.scan, Images: f.images, Videos: fakeVideos{}})
	if err != nil {
		t.Fatal(err)
	}
	f.images.called = false
	for name, out := range map[string]Outcome{
		"triage": p.Triage(context.Background(), f.req),
		"lane":   p.Process(context.Background(), f.req, Image),
	} {
		if out.Kind != Failed || !strings.Contains(out.Response.Error, "invalid request: s3Key names an output of this worker") {
			t.Errorf("%s: %s %q, want a refusal", name, out.Kind, out.Response.Error)
		}
	}
	if f.images.called {
		t.Error("a variant was transformed")
	}
}

// TestStoreRefusalsArePermanent: a store that refuses the request (objstore.ErrRefused, S3's 4xx) or
// cannot hold the name ends the request at once, with an answer that names the cause.
func TestStoreRefusalsArePermanent(t *testing.T) {
	refused := fmt.Errorf("getting info of Media_Upper/u/p.jpg: %w: 400 Bad Request", objstore.ErrRefused)
	invalid := fmt.Errorf("getting info of a.b/u/p.jpg: %w: bucket \"a.b\" (%w)", objstore.ErrInvalidName, objstore.ErrNotFound)
	for _, tc := range []struct {
		name  string
		setup func(*fixture)
		want  string
	}{
		{"stat refused", func(f *fixture) { f.store.failStat = refused }, "refused by the object store"},
		{"invalid name", func(f *fixture) { f.store.failStat = invalid }, "invalid bucket or key name"},
		{"upload refused", func(f *fixture) { f.store.failPut = fmt.Errorf("%w: 413 EntityTooLarge", objstore.ErrRefused) }, "uploading"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			tc.setup(f)
			out := f.run(t)
			if out.Kind != Failed || !strings.Contains(out.Response.Error, tc.want) || strings.Contains(out.Response.Error, "not found in bucket") {
				t.Errorf("lane: %s %q, want a permanent failure naming %q", out.Kind, out.Response.Error, tc.want)
			}
			if f.store.failPut != nil {
				return
			}
			p, _ := New(f.cfg, Deps{Store: f.store, Scanner: f.scan, Images: f.images, Videos: fakeVideos{}})
			if out := p.Triage(context.Background(), f.req); out.Kind != Failed || !strings.Contains(out.Response.Error, tc.want) {
				t.Errorf("triage: %s %q, want a permanent failure naming %q", out.Kind, out.Response.Error, tc.want)
			}
		})
	}
}

// versionedStore is a memStore that tells versions apart, as S3 (version IDs, ETags) and the
// JetStream object store (NUIDs) do: every Put is a new version, Stat records it in Info.Sys, and
// CopyStatted and DeleteStatted act on that version only.
type versionedStore struct {
	*memStore
	mu       sync.Mutex
	versions map[string]int
}

func (v *versionedStore) Stat(ctx context.Context, bucket, key string) (objstore.Info, error) {
	info, err := v.memStore.Stat(ctx, bucket, key)
	v.mu.Lock()
	defer v.mu.Unlock()
	info.Sys = v.versions[v.k(bucket, key)]
	return info, err
}

func (v *versionedStore) Put(ctx context.Context, bucket, key string, r io.Reader, size int64, ct string) error {
	if err := v.memStore.Put(ctx, bucket, key, r, size, ct); err != nil {
		return err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.versions[v.k(bucket, key)]++
	return nil
}

func (v *versionedStore) still(info objstore.Info) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.versions[v.k(info.Bucket, info.Key)] != info.Sys.(int) {
		return fmt.Errorf("%s: %w", info.Key, objstore.ErrChanged)
	}
	return nil
}

func (v *versionedStore) CopyStatted(ctx context.Context, info objstore.Info, dstBucket, dstKey string) error {
	if err := v.still(info); err != nil {
		return err
	}
	return v.memStore.Copy(ctx, info.Bucket, info.Key, dstBucket, dstKey)
}

func (v *versionedStore) DeleteStatted(ctx context.Context, info objstore.Info) error {
	if err := v.still(info); err != nil {
		return err
	}
	return v.memStore.Delete(ctx, info.Bucket, info.Key)
}

// replacingScanner finds a signature, and while it scans a new upload replaces the object.
type replacingScanner struct {
	fakeScanner
	replace func()
}

func (r *replacingScanner) Scan(ctx context.Context, rd io.Reader, size int64) (scanner.Verdict, error) {
	v, err := r.fakeScanner.Scan(ctx, rd, size)
	if r.replace != nil {
		r.replace()
	}
	return v, err
}

// TestInfectedVersionIsTheOneRemoved: the infected upload is quarantined and deleted as the version the
// job looked up and scanned. An upload that replaced it during the scan used to be quarantined and
// deleted in its place (and the infected one, on a versioned bucket, kept); now nothing is removed and
// the job runs again on the new upload.
func TestInfectedVersionIsTheOneRemoved(t *testing.T) {
	for _, quarantine := range []string{"", "quarantine"} {
		t.Run("quarantine="+quarantine, func(t *testing.T) {
			f := newFixture(t)
			f.cfg.QuarantineBucket = quarantine
			store := &versionedStore{memStore: f.store, versions: map[string]int{"media/u/p.jpg": 1}}
			scan := &replacingScanner{fakeScanner: fakeScanner{verdict: scanner.Verdict{Infected: true, Signature: "Eicar-Test"}}}
			p, err := New(f.cfg, Deps{Store: store, Scanner: scan, Images: f.images, Videos: fakeVideos{}})
			if err != nil {
				t.Fatal(err)
			}

			// Nothing in between: the scanned version is removed.
			if out := p.Process(context.Background(), f.req, Image); out.Kind != Infected {
				t.Fatalf("%s %v, want infected", out.Kind, out.Err)
			}
			if _, ok := f.store.objs["media/u/p.jpg"]; ok {
				t.Fatal("the infected upload is still there")
			}

			// A clean upload replaces it during the scan: left alone, and the job runs again.
			f.store.objs["media/u/p.jpg"] = jpegHeader
			store.versions["media/u/p.jpg"]++
			scan.replace = func() {
				_ = store.Put(context.Background(), "media", "u/p.jpg", strings.NewReader("the new upload"), -1, "image/jpeg")
			}
			out := p.Process(context.Background(), f.req, Image)
			if out.Kind != Retry || !errors.Is(out.Err, objstore.ErrChanged) || out.Virus != nil {
				t.Fatalf("%s %v, want a retry (the object changed)", out.Kind, out.Err)
			}
			if got := string(f.store.objs["media/u/p.jpg"]); got != "the new upload" {
				t.Errorf("the new upload was removed (key holds %q)", got)
			}
			if got := f.store.objs["quarantine/u/p.jpg"]; quarantine != "" && string(got) != string(jpegHeader) {
				t.Errorf("the quarantine holds %q, want the infected upload", got)
			}
		})
	}
}
