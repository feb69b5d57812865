package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/mediaworker/mediaworker/job"
	"github.com/nats-io/nats.go/jetstream"
)

// ReuseConfig bounds the reuse memory: what recent uploads became, by their bytes (pipeline/reuse.go).
type ReuseConfig struct {
	// TTL is how long an outcome is remembered.
	TTL time.Duration
	// MaxBytes bounds the bucket; an entry is about 1-2 KB. When it is full, new outcomes are not
	// remembered until old ones expire (the worker then does the work again, as without the memory).
	MaxBytes int64
}

// DefaultReuseConfig remembers outcomes for 7 days in at most 64 MiB (tens of thousands of uploads).
func DefaultReuseConfig() ReuseConfig {
	return ReuseConfig{TTL: 7 * 24 * time.Hour, MaxBytes: 64 << 20}
}

// Validate checks the bounds.
func (c ReuseConfig) Validate() error {
	if c.TTL < time.Minute {
		return fmt.Errorf("reuse TTL (ReuseConfig.TTL) must be at least 1m, got %s", c.TTL)
	}
	if c.MaxBytes < 1<<20 {
		return fmt.Errorf("reuse max bytes (ReuseConfig.MaxBytes) must be at least 1 MiB, got %d", c.MaxBytes)
	}
	return nil
}

// Reuse is the key-value bucket of the reuse memory.
func (b Buckets) Reuse() string { return b.c.streamPrefix() + "_MEDIA_REUSE" }

// reuseConfig is the reuse memory's bucket as rc bounds it.
func (b Buckets) reuseConfig(rc ReuseConfig) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:      b.Reuse(),
		Description: "what recent clean uploads became, by SHA-256, recipe and bucket, so repeated bytes are answered without a transform (every upload is still scanned)",
		TTL:         rc.TTL,
		MaxBytes:    rc.MaxBytes,
		Storage:     jetstream.FileStorage,
		Replicas:    b.c.Replicas,
	}
}

// ReuseMemory is the pipeline's reuse memory on a JetStream key-value bucket, keyed by the upload's
// SHA-256, recipe and bucket (job.Reuse). Each lookup and write is bounded by
// memoryTimeout; the pipeline answers a failed one the long way.
type ReuseMemory struct{ kv lazyBucket }

// NewReuseMemory returns the reuse memory of cfg. ProvisionReuse creates the bucket at start, or
// writes rc's TTL and size to it; should it be missing, the first use creates it with them.
func NewReuseMemory(js jetstream.JetStream, cfg Config, rc ReuseConfig) *ReuseMemory {
	return &ReuseMemory{kv: lazyBucket{js: js, what: "reuse bucket", conf: cfg.Buckets().reuseConfig(rc)}}
}

// Lookup returns the entry under key, nil when there is none.
func (r *ReuseMemory) Lookup(ctx context.Context, key string) (*job.Reused, error) {
	ctx, cancel := withMemoryTimeout(ctx)
	defer cancel()
	kv, err := r.kv.open(ctx)
	if err != nil {
		return nil, err
	}
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading reuse entry: %w", err)
	}
	var out job.Reused
	if err := json.Unmarshal(e.Value(), &out); err != nil {
		return nil, fmt.Errorf("decoding reuse entry: %w", err)
	}
	return &out, nil
}

// Remember stores what an upload became under key.
func (r *ReuseMemory) Remember(ctx context.Context, key string, v job.Reused) error {
	ctx, cancel := withMemoryTimeout(ctx)
	defer cancel()
	kv, err := r.kv.open(ctx)
	if err != nil {
		return err
	}
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encoding reuse entry: %w", err)
	}
	if _, err := kv.Put(ctx, key, data); err != nil {
		return fmt.Errorf("storing reuse entry: %w", err)
	}
	return nil
}
