package ingest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mediaworker/mediaworker/objstore"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// Options is what the worker around ingest tells it (none of it a setting of its own).
type Options struct {
	// App is the application prefix: it names ingest's stream, consumer and memory as it names the
	// worker's (<APP>_MEDIA_INGEST, <APP>_MEDIA_INGESTED).
	App string
	// RequestSubject is where requests are published (contracts.SubjectsFor(App).Request).
	RequestSubject string
	// Durable names the consumers (the worker's durable, with -ingest).
	Durable  string
	Replicas int
	// ObjectStore says uploads go to the JetStream object store: its put notices are the events, and
	// Config.Subjects and Config.Stream are not used.
	ObjectStore bool
	// Store gives the objects' URLs and, for the object store, makes the watched buckets exist.
	Store objstore.Store
	// Quarantine is the quarantine bucket, never watched.
	Quarantine string
	// Remember is how long a published mediaId is remembered, so an event re-sent after the request
	// stream's duplicate window is still no second request.
	Remember time.Duration
	Log      zerolog.Logger
}

// Ingester consumes upload events and publishes requests.
type Ingester struct {
	js     jetstream.JetStream
	cfg    Config
	opts   Options
	mapper Mapper
	cons   []jetstream.Consumer
	memory jetstream.KeyValue
	counts [Malformed + 2]atomic.Int64 // by Verdict, and duplicates last
}

// EventsStream is the stream the worker keeps S3 events in (Config.Subjects), unless Config.Stream
// names the operator's.
func EventsStream(app string) string { return prefix(app) + "_MEDIA_INGEST" }

// MemoryBucket is the key-value bucket of published mediaIds.
func MemoryBucket(app string) string { return prefix(app) + "_MEDIA_INGESTED" }

func prefix(app string) string { return strings.ToUpper(strings.ReplaceAll(app, "-", "_")) }

// New provisions what ingest consumes from (the events stream, or the watched object-store buckets),
// its durable consumers and its memory. Consumers start at what arrives from their creation on: turning
// ingest on does not make requests of the objects already stored.
func New(ctx context.Context, js jetstream.JetStream, cfg Config, opts Options) (*Ingester, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	routes, _ := ParseRoutes(cfg.Routes)
	in := &Ingester{js: js, cfg: cfg, opts: opts,
		mapper: Mapper{Routes: routes, Quarantine: opts.Quarantine, Template: cfg.URLTemplate}}
	switch {
	case opts.ObjectStore:
		// The object's name in the embedded store, as `mediaworker submit` gives it: the store's URL
		// there is the worker's /objects, which serves variants only, never an original.
		in.mapper.URL = func(bucket, key string) string {
			return objstore.ObjectURL("nats://objectstore/"+url.PathEscape(bucket), key)
		}
	case opts.Store != nil:
		in.mapper.URL = opts.Store.URL
	}
	for _, r := range routes {
		if r.Bucket == opts.Quarantine {
			return nil, fmt.Errorf("ingest routes (Config.Routes): %q watches the quarantine bucket; infected uploads moved there would be jobs again", r)
		}
	}
	durable := opts.Durable + "-ingest"
	consumer := func(stream, filter string, deliver jetstream.DeliverPolicy) error {
		c, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
			Durable: durable, Description: "mediaworker ingest: upload events become optimize requests",
			FilterSubject: filter, DeliverPolicy: deliver, AckPolicy: jetstream.AckExplicitPolicy,
			AckWait: 30 * time.Second, MaxAckPending: 64, Replicas: opts.Replicas,
		})
		if err != nil {
			return fmt.Errorf("creating the ingest consumer %s on stream %s: %w", durable, stream, err)
		}
		in.cons = append(in.cons, c)
		return nil
	}
	switch {
	case opts.ObjectStore:
		for _, b := range Buckets(routes) {
			if opts.Store != nil {
				if err := opts.Store.EnsureBucket(ctx, b); err != nil {
					return nil, fmt.Errorf("making the watched bucket %s: %w", b, err)
				}
			}
			// Only the puts from now on: the stream holds every stored object's metadata.
			if err := consumer(objectStream(b), objectMetaSubjects(b), jetstream.DeliverNewPolicy); err != nil {
				return nil, err
			}
		}
	case cfg.Stream != "":
		// The operator's stream may hold days of events from before ingest was on: only new ones.
		if err := consumer(cfg.Stream, "", jetstream.DeliverNewPolicy); err != nil {
			return nil, err
		}
	default:
		subjects := splitList(cfg.Subjects)
		if len(subjects) == 0 {
			return nil, errors.New("ingest subjects (Config.Subjects) is empty: name the subjects the S3 server sends its event notifications to (versitygw --event-nats-topic, MinIO's notify_nats subject), or an existing stream holding them (Config.Stream)")
		}
		name := EventsStream(opts.App)
		if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name: name, Description: "S3 event notifications mediaworker turns into optimize requests",
			Subjects: subjects, Storage: jetstream.FileStorage, Replicas: opts.Replicas,
			// An event is done once its request is published (the memory bucket remembers it): a work
			// queue keeps only the waiting ones. One not taken within Remember is dropped.
			Retention: jetstream.WorkQueuePolicy, MaxAge: opts.Remember, Discard: jetstream.DiscardOld,
			// What ParseS3Event would refuse is not kept: on a server whose max_payload was raised, the
			// consumer's pull of 16 such messages would hold them all in memory only to refuse them.
			MaxMsgSize: maxEventBytes,
		}); err != nil {
			return nil, fmt.Errorf("creating the ingest stream %s on %s: %w", name, strings.Join(subjects, ", "), err)
		}
		if err := consumer(name, "", jetstream.DeliverAllPolicy); err != nil {
			return nil, err
		}
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: MemoryBucket(opts.App), Description: "mediaIds mediaworker ingest published: a re-sent event is no second request",
		TTL: opts.Remember, Storage: jetstream.FileStorage, Replicas: opts.Replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("creating the ingest memory %s: %w", MemoryBucket(opts.App), err)
	}
	in.memory = kv
	return in, nil
}

// Run consumes events until ctx ends.
func (in *Ingester) Run(ctx context.Context) error {
	var ccs []jetstream.ConsumeContext
	var mu sync.Mutex // one event at a time across the consumers: the memory's check and write stay together
	for _, c := range in.cons {
		cc, err := c.Consume(func(m jetstream.Msg) {
			mu.Lock()
			defer mu.Unlock()
			in.handle(context.WithoutCancel(ctx), m) // an event taken while draining is still finished
		}, jetstream.PullMaxMessages(16), jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			if ctx.Err() == nil && !errors.Is(err, nats.ErrConnectionClosed) {
				in.opts.Log.Warn().Err(err).Msg("ingest: consuming upload events")
			}
		}))
		if err != nil {
			for _, cc := range ccs {
				cc.Stop()
			}
			return fmt.Errorf("consuming upload events: %w", err)
		}
		ccs = append(ccs, cc)
	}
	<-ctx.Done()
	// The events taken finish (handle runs without ctx); a connection gone meanwhile must not hold the
	// worker's shutdown, so the wait is bounded.
	for _, cc := range ccs {
		cc.Drain()
	}
	deadline := time.After(15 * time.Second)
	for _, cc := range ccs {
		select {
		case <-cc.Closed():
		case <-deadline:
			cc.Stop()
		}
	}
	return nil
}

// Counts are the records seen so far, by what became of them; "duplicate" counts re-sent events of a
// request already published.
func (in *Ingester) Counts() map[string]int64 {
	out := map[string]int64{}
	for v := Publish; v <= Malformed; v++ {
		out[v.String()] = in.counts[v].Load()
	}
	out["duplicate"] = in.counts[Malformed+1].Load()
	return out
}

// handle turns one event message into requests. A malformed event is acked (counted and logged):
// delivering it again cannot mend it. A failure to publish is retried later.
func (in *Ingester) handle(ctx context.Context, m jetstream.Msg) {
	var recs []Record
	if in.opts.ObjectStore {
		r, err := ParseObjectMeta(m.Data())
		if err != nil {
			in.counts[Malformed].Add(1)
			in.opts.Log.Warn().Err(err).Str("subject", m.Subject()).Msg("ingest: malformed object-store notice, skipped")
			_ = m.Ack()
			return
		}
		// The subject names the bucket the message was written into ($O.<bucket>.M.…): whoever may
		// write into one watched bucket may publish any metadata there, and a record naming another
		// bucket would make a job of that bucket's object (nothing across buckets).
		if b := subjectBucket(m.Subject()); r.Bucket != b {
			in.counts[Malformed].Add(1)
			in.opts.Log.Warn().Str("subject", m.Subject()).Str("bucket", r.Bucket).Msg("ingest: object-store notice names another bucket than the one it was written into, skipped")
			_ = m.Ack()
			return
		}
		recs = []Record{r}
	} else {
		rs, bad, err := ParseS3Event(m.Data())
		switch {
		case errors.Is(err, errNoRecords):
			in.counts[Ignored].Add(1)
		case err != nil:
			in.counts[Malformed].Add(1)
			in.opts.Log.Warn().Err(err).Str("subject", m.Subject()).Msg("ingest: malformed S3 event, skipped")
		}
		for _, e := range bad {
			in.counts[Malformed].Add(1)
			in.opts.Log.Warn().Err(e).Str("subject", m.Subject()).Msg("ingest: malformed S3 event record, skipped")
		}
		recs = rs
	}
	for _, r := range recs {
		if err := in.record(ctx, r); err != nil {
			in.opts.Log.Warn().Err(err).Str("bucket", r.Bucket).Str("key", r.Key).Msg("ingest: could not publish the request; the event is delivered again")
			_ = m.NakWithDelay(2 * time.Second)
			return
		}
	}
	_ = m.Ack()
}

// resolveKey settles which key a record whose key reads two ways means (Record.RawKey): the unescaped
// one, as AWS and MinIO write records, unless only the key as written exists (versitygw's). An object
// that is neither (deleted since) keeps the unescaped key: its job answers that it is not found.
func (in *Ingester) resolveKey(ctx context.Context, r *Record) error {
	if r.RawKey == "" || in.opts.Store == nil || !r.Created() {
		return nil
	}
	// Only a record one of whose readings is watched is looked up: the store's events name every
	// bucket, and the worker has no business asking about another's objects (nor waiting on, or being
	// refused by, a store it does not serve).
	_, watched := in.mapper.route(r.Bucket, r.Key)
	if _, raw := in.mapper.route(r.Bucket, r.RawKey); raw {
		watched = true
	}
	if !watched || r.Bucket == in.mapper.Quarantine {
		return nil
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// A permanent refusal (a name the store cannot hold, a 4xx) says that reading is no object, as
	// not-found does: the event is the sender's, and asking again cannot change the answer, so it
	// must not send the event back forever. Only a transient failure is retried.
	_, err := in.opts.Store.Stat(sctx, r.Bucket, r.Key)
	if err == nil || !objstore.IsPermanent(err) {
		if err != nil {
			return fmt.Errorf("looking up %s/%s: %w", r.Bucket, r.Key, err)
		}
		return nil
	}
	if _, err := in.opts.Store.Stat(sctx, r.Bucket, r.RawKey); err == nil {
		r.Key = r.RawKey
	} else if !objstore.IsPermanent(err) {
		return fmt.Errorf("looking up %s/%s: %w", r.Bucket, r.RawKey, err)
	}
	return nil
}

// record publishes r's request unless it was published before; an error is transient.
func (in *Ingester) record(ctx context.Context, r Record) error {
	if err := in.resolveKey(ctx, &r); err != nil {
		return err
	}
	req, v, err := in.mapper.Map(r)
	if v != Publish {
		in.counts[v].Add(1)
		switch v {
		case Malformed:
			in.opts.Log.Warn().Err(err).Str("bucket", r.Bucket).Str("key", r.Key).Msg("ingest: upload event cannot become a request, skipped")
		case Guarded:
			in.opts.Log.Debug().Str("bucket", r.Bucket).Str("key", r.Key).Str("why", err.Error()).Msg("ingest: not a job (loop guard)")
		}
		return nil
	}
	if _, err := in.memory.Get(ctx, req.MediaID); err == nil {
		in.counts[Malformed+1].Add(1)
		return nil
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("reading the ingest memory: %w", err)
	}
	body, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("encoding the request: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	msg := &nats.Msg{Subject: in.opts.RequestSubject, Data: body, Header: nats.Header{}}
	ack, err := in.js.PublishMsg(pctx, msg, jetstream.WithMsgID(req.MediaID))
	if err != nil {
		return fmt.Errorf("publishing the request: %w", err)
	}
	if _, err := in.memory.Put(pctx, req.MediaID, []byte("1")); err != nil {
		// Published: a redelivery publishes again into the request stream's dedupe.
		return fmt.Errorf("remembering mediaId %s: %w", req.MediaID, err)
	}
	if ack.Duplicate {
		in.counts[Malformed+1].Add(1)
		return nil
	}
	in.counts[Publish].Add(1)
	in.opts.Log.Info().Str("media_id", req.MediaID).Str("bucket", r.Bucket).Str("key", r.Key).Str("recipe", req.RecipeName()).Msg("ingest: upload became a request")
	return nil
}
