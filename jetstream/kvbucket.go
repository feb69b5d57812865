package jetstream

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// memoryTimeout bounds one read or write of a key-value memory (settled requests, verdicts, reuse),
// opening its bucket included. The memories are guards and shortcuts, not dependencies: a job whose
// memory does not answer within it goes the long way (or is handed back, where its caller says so)
// instead of waiting for as long as the job may run.
const memoryTimeout = 5 * time.Second

// withMemoryTimeout bounds ctx by memoryTimeout; a shorter deadline of ctx stays.
func withMemoryTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, memoryTimeout)
}

// Buckets are the key-value memories' buckets as Config lays them out: each one's name and definition,
// beside its memory (settled.go, verdicts.go, reuse.go). Provision creates them.
type Buckets struct{ c Config }

// Buckets are c's key-value buckets.
func (c Config) Buckets() Buckets { return Buckets{c} }

// lazyBucket is one of the worker's key-value memories (settled requests, verdicts, reuse). Provision
// creates the buckets at start (or `mediaworker streams apply` does); the worker opens one on first
// use, so a worker whose NATS is slow to come up still starts, and creates it only when it is missing
// (provisioning off, or a bucket removed since).
//
// Opening never holds the lock across a network call: one caller opens, those arriving meanwhile wait
// for its result or their own deadline, whichever comes first, and a failed open is tried again by the
// next caller.
type lazyBucket struct {
	js   jetstream.JetStream
	conf jetstream.KeyValueConfig
	what string // for errors: "verdict bucket"

	mu      sync.Mutex
	kv      jetstream.KeyValue
	opening chan struct{} // closed when the open under way ends; nil while none is
	err     error         // why the last open failed, for those that waited on it
}

func (b *lazyBucket) open(ctx context.Context) (jetstream.KeyValue, error) {
	b.mu.Lock()
	if kv := b.kv; kv != nil {
		b.mu.Unlock()
		return kv, nil
	}
	wait := b.opening
	if wait == nil {
		b.opening = make(chan struct{})
	}
	b.mu.Unlock()

	if wait != nil {
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, fmt.Errorf("opening %s %s: %w", b.what, b.conf.Bucket, ctx.Err())
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.kv == nil {
			return nil, b.err
		}
		return b.kv, nil
	}

	kv, err := ensureBucket(ctx, b.js, b.conf, false)
	if err != nil {
		err = fmt.Errorf("opening %s %s: %w", b.what, b.conf.Bucket, err)
	}
	b.mu.Lock()
	b.kv, b.err = kv, err
	close(b.opening)
	b.opening = nil
	b.mu.Unlock()
	return kv, err
}

// ensureBucket opens the bucket conf names, creating it when it is missing; with update it also writes
// conf to a bucket that exists with other settings (its TTL and size follow the worker's). It looks
// before it creates and never sends a create-or-update: two clients that create-or-update the same new
// replicated bucket at the same moment can both go unanswered for tens of seconds (nats-server 2.15,
// issue 31), whereas a plain create of a bucket another client is creating is answered, and "exists"
// then means "look again". Like ensureStream, it updates only what differs. Callers bound it with ctx.
func ensureBucket(ctx context.Context, js jetstream.JetStream, conf jetstream.KeyValueConfig, update bool) (jetstream.KeyValue, error) {
	lookup := func() (jetstream.KeyValue, error) {
		lctx, cancel := context.WithTimeout(ctx, lookupTimeout)
		defer cancel()
		return js.KeyValue(lctx, conf.Bucket)
	}
	kv, err := lookup()
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, conf)
		if !errors.Is(err, jetstream.ErrBucketExists) {
			return kv, err // created, or failed
		}
		// Another instance created it first, with other settings: use it (and update it below).
		kv, err = lookup()
	}
	if err != nil || !update {
		return kv, err
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the settings of bucket %s: %w", conf.Bucket, err)
	}
	if s, ok := st.(*jetstream.KeyValueBucketStatus); ok && bucketCurrent(s.StreamInfo().Config, conf) {
		return kv, nil
	}
	return js.UpdateKeyValue(ctx, conf)
}

// bucketCurrent says whether a bucket whose stream is configured as have already has the settings of
// want the worker sets (description, TTL, size, storage, replicas; history and value size unset).
func bucketCurrent(have jetstream.StreamConfig, want jetstream.KeyValueConfig) bool {
	limit := func(v int64) int64 {
		if v == 0 {
			return -1
		}
		return v
	}
	return have.Description == want.Description && have.MaxAge == want.TTL &&
		have.MaxBytes == limit(want.MaxBytes) && have.MaxMsgSize == int32(limit(int64(want.MaxValueSize))) &&
		have.MaxMsgsPerSubject == max(int64(want.History), 1) && have.Storage == want.Storage &&
		have.Replicas == max(want.Replicas, 1)
}
