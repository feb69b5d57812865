package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/mediaworker/mediaworker/contracts"
	"github.com/nats-io/nats.go/jetstream"
)

// Verdicts is the key-value bucket that remembers virus verdicts for a day, keyed by mediaId.
func (b Buckets) Verdicts() string { return b.c.streamPrefix() + "_MEDIA_VERDICTS" }

func (b Buckets) verdictConfig() jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:      b.Verdicts(),
		Description: "virus verdicts of mediaworker, so a redelivery after the object was removed still answers 'virus detected'",
		TTL:         24 * time.Hour,
		Storage:     jetstream.FileStorage,
		Replicas:    b.c.Replicas,
	}
}

// Verdicts is the pipeline's verdict memory on a JetStream key-value bucket. Each read and write is
// bounded by memoryTimeout; the pipeline hands a job whose verdict cannot be read or stored back for
// another delivery (the object is not removed before its verdict is stored).
type Verdicts struct{ kv lazyBucket }

// NewVerdicts returns the verdict memory of cfg; the bucket (Provision's) is opened on first use.
func NewVerdicts(js jetstream.JetStream, cfg Config) *Verdicts {
	return &Verdicts{kv: lazyBucket{js: js, conf: cfg.Buckets().verdictConfig(), what: "verdict bucket"}}
}

func (v *Verdicts) bucket(ctx context.Context) (jetstream.KeyValue, error) { return v.kv.open(ctx) }

// Remember stores ev under its mediaId.
func (v *Verdicts) Remember(ctx context.Context, ev contracts.VirusEvent) error {
	ctx, cancel := withMemoryTimeout(ctx)
	defer cancel()
	kv, err := v.bucket(ctx)
	if err != nil {
		return err
	}
	data, _ := json.Marshal(ev)
	if _, err := kv.Put(ctx, ev.MediaID, data); err != nil {
		return fmt.Errorf("storing verdict: %w", err)
	}
	return nil
}

// Recall returns the verdict stored for mediaID, or nil.
func (v *Verdicts) Recall(ctx context.Context, mediaID string) (*contracts.VirusEvent, error) {
	ctx, cancel := withMemoryTimeout(ctx)
	defer cancel()
	kv, err := v.bucket(ctx)
	if err != nil {
		return nil, err
	}
	e, err := kv.Get(ctx, mediaID)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading verdict: %w", err)
	}
	var ev contracts.VirusEvent
	if err := json.Unmarshal(e.Value(), &ev); err != nil {
		return nil, nil // not ours to trust
	}
	return &ev, nil
}
