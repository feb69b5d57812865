package jetstream

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
)

// lazyBucket is one of the worker's key-value memories (settled requests, verdicts, reuse), opened on
// first use rather than at start, so a worker whose NATS is slow to come up still starts, and a memory
// nobody touches costs nothing.
type lazyBucket struct {
	js   jetstream.JetStream
	conf jetstream.KeyValueConfig
	// apply writes conf at every open, so settings (the reuse memory's TTL and size) follow the
	// worker's; otherwise an existing bucket is used as it is and created only when missing.
	apply bool
	what  string // for errors: "verdict bucket"

	mu sync.Mutex
	kv jetstream.KeyValue
}

func (b *lazyBucket) open(ctx context.Context) (jetstream.KeyValue, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.kv != nil {
		return b.kv, nil
	}
	var (
		kv  jetstream.KeyValue
		err error
	)
	if !b.apply {
		kv, err = b.js.KeyValue(ctx, b.conf.Bucket)
	}
	if b.apply || errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = b.js.CreateOrUpdateKeyValue(ctx, b.conf)
	}
	if err != nil {
		return nil, fmt.Errorf("opening %s %s: %w", b.what, b.conf.Bucket, err)
	}
	b.kv = kv
	return kv, nil
}
