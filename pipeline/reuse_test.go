package pipeline

import (
	"context"
	"testing"

	"github.com/mediaworker/mediaworker/contracts"
)

type noReuse struct{}

func (noReuse) Lookup(context.Context, string) (*Reused, error) { return nil, nil }
func (noReuse) Remember(context.Context, string, Reused) error  { return nil }

// The reuse memory's key: one bucket's uploads never meet another's unless the operator shares
// them (issue 31 item 3); no scope a bucket can be named stands for the shared memory; clamd's
// signatures are no part of it (every upload is scanned).
func TestReuseKeyScope(t *testing.T) {
	key := func(shared bool, bucket string) string {
		p := &reuser{reuse: noReuse{}, cfg: Config{ReuseFingerprint: "f1", ReuseAcrossBuckets: shared}}
		return p.reuseKey(&job{sha256: "ab12", recipe: Recipe{Name: contracts.DefaultRecipe}, req: contracts.Request{S3Bucket: bucket}})
	}
	if a, b := key(false, "tenant-a"), key(false, "tenant-b"); a == b {
		t.Errorf("two buckets share the key %q", a)
	}
	if a, b := key(true, "tenant-a"), key(true, "tenant-b"); a != b {
		t.Errorf("shared across buckets, the keys differ: %q, %q", a, b)
	}
	if shared := key(true, "tenant-a"); shared == key(false, "tenant-a") || contracts.ValidateBucket(sharedScope) == nil {
		t.Errorf("the shared scope %q can be a bucket's own", sharedScope)
	}
	if got, want := key(false, "tenant-a"), "ab12."+contracts.DefaultRecipe+"-f1.tenant-a"; got != want {
		t.Errorf("key %q, want %q", got, want)
	}
	p := &reuser{cfg: Config{}}
	if k := p.reuseKey(&job{sha256: "ab12"}); k != "" {
		t.Errorf("reuse off, key %q", k)
	}
}
