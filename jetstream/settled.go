package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"
)

// The settled-requests memory: at most one outcome per request, also after the duplicate window.
// Every outcome is published under a Nats-Msg-Id, so a redelivery within the window (a lost ack, a
// worker that died after publishing) republishes into the streams' dedupe and nothing doubles. A
// redelivery after the window (an ack lost at the end of a long job) would store a second outcome; so
// an ending settlement writes here, keyed by the request's stream sequence, what it is about to publish
// before its first publish (its outbox, outbox.go), and a later delivery that finds it finishes the
// settlement (publishing only what the streams do not hold) instead of running again. That one record
// is the whole cost on a request's common path: four stream writes per job (the request, triage's lane
// copy, this record, the response). Triage's route writes none: while the request is on its way its
// lane copy is the record (routedBefore looks for it), and the lane writes its outbox before it removes
// the copy. "final" is written only where no outbox was (an end that owes no event) and after a
// finished interruption, so that later duplicates are acked without searching the streams.

// Settled is the key-value bucket of settled requests.
func (b Buckets) Settled() string { return b.c.streamPrefix() + "_MEDIA_SETTLED" }

func (b Buckets) settledConfig() jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:      b.Settled(),
		Description: "requests mediaworker settled, by request stream sequence: a late redelivery is acked without running again",
		// A redelivery comes within MaxDeliver × (AckWait + backoff) of the settlement, minutes; the
		// responses' age is far beyond that and bounds what an API could still compare against.
		TTL:      b.c.ResponseMaxAge,
		Storage:  jetstream.FileStorage,
		Replicas: b.c.Replicas,
	}
}

// Settled values: the request ended for good, or (an outbox, a JSON object) an ending settlement is
// publishing or published its events. "routed" is what workers before issue 23 recorded for a route
// (records live ResponseMaxAge): still read, no longer written; routedBefore answers it now.
const (
	settledRouted = "routed"
	settledFinal  = "final"
)

// settledMemory is the bucket (Provision's), opened on first use. A read is bounded by memoryTimeout:
// every caller treats a failed one as "not known" in the safe direction (settledBefore runs the job,
// as it would without the memory; the advisory and rescue paths try again later). Writes keep their
// callers' bound (PublishTimeout).
type settledMemory struct {
	cfg Config
	kv  lazyBucket
}

func newSettledMemory(js jetstream.JetStream, cfg Config) *settledMemory {
	return &settledMemory{cfg: cfg, kv: lazyBucket{js: js, conf: cfg.Buckets().settledConfig(), what: "bucket"}}
}

func (m *settledMemory) bucket(ctx context.Context) (jetstream.KeyValue, error) {
	return m.kv.open(ctx)
}

// recall says how far the request went: "" (not settled), settledRouted, settledPublishing (with the
// outbox) or settledFinal.
func (m *settledMemory) recall(ctx context.Context, reqSeq uint64) (string, *outbox, error) {
	ctx, cancel := withMemoryTimeout(ctx)
	defer cancel()
	kv, err := m.bucket(ctx)
	if err != nil {
		return "", nil, err
	}
	e, err := kv.Get(ctx, strconv.FormatUint(reqSeq, 10))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return "", nil, nil
	}
	if err != nil {
		return "", nil, fmt.Errorf("reading settled request %d: %w", reqSeq, err)
	}
	v := e.Value()
	if len(v) == 0 || v[0] != '{' {
		return string(v), nil, nil
	}
	var ob outbox
	if err := json.Unmarshal(v, &ob); err != nil {
		return "", nil, fmt.Errorf("reading settled request %d: decoding its outbox: %w", reqSeq, err)
	}
	return settledPublishing, &ob, nil
}

// rememberOutbox records what an ending settlement is about to publish.
func (m *settledMemory) rememberOutbox(ctx context.Context, reqSeq uint64, ob outbox) error {
	kv, err := m.bucket(ctx)
	if err != nil {
		return err
	}
	if _, err := kv.Put(ctx, strconv.FormatUint(reqSeq, 10), encodeOutbox(ob)); err != nil {
		return fmt.Errorf("recording the outbox of request %d: %w", reqSeq, err)
	}
	return nil
}
