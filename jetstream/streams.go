package jetstream

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/job"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Config holds the stream and consumer settings shared by every instance.
type Config struct {
	App           string        // subject prefix
	Replicas      int           // 1 on a single server, 3 on a cluster
	AckWait       time.Duration // how long a delivery may go without Ack or InProgress
	MaxDeliver    int           // deliveries before a request is dead-lettered
	MaxAckPending int           // cluster-wide in-flight cap (total slots of all instances)
	// Lanes are each lane consumer's own settings, by kind (DefaultConfig has every registered
	// kind's); a zero field, or a kind missing, takes the shared one above (lanes.go).
	Lanes           map[job.Kind]*LaneLimits
	MaxQueued       int64         // requests stream cap, discard new (0: unlimited)
	DuplicateWindow time.Duration // Nats-Msg-Id dedupe window of the requests and responses streams
	ResponseMaxAge  time.Duration // how long responses are kept for an API that was down
	DLQMaxAge       time.Duration // how long dead letters are kept
	Durable         string        // the shared consumer's name
}

// DefaultConfig returns the defaults of DESIGN.md.
func DefaultConfig() Config {
	return Config{
		App:             "app",
		Replicas:        1,
		AckWait:         30 * time.Second,
		MaxDeliver:      10, // with the worker's backoff: ≥ 10 minutes of retries (DefaultWorkerConfig)
		MaxAckPending:   64,
		DuplicateWindow: 2 * time.Minute,
		ResponseMaxAge:  7 * 24 * time.Hour,
		DLQMaxAge:       28 * 24 * time.Hour,
		Durable:         "mediaworker",
		Lanes:           defaultLaneLimits(),
	}
}

// Validate checks the settings.
func (c Config) Validate() error {
	var errs []error
	if err := contracts.ValidateApp(c.App); err != nil {
		errs = append(errs, err)
	}
	if c.Replicas != 1 && c.Replicas != 3 && c.Replicas != 5 {
		errs = append(errs, fmt.Errorf("replicas must be 1, 3 or 5, got %d", c.Replicas))
	}
	if c.AckWait < time.Second {
		errs = append(errs, fmt.Errorf("ack wait must be at least 1s, got %s", c.AckWait))
	}
	if c.MaxDeliver < 1 {
		errs = append(errs, fmt.Errorf("max deliver must be at least 1, got %d", c.MaxDeliver))
	}
	if c.MaxAckPending < 1 {
		errs = append(errs, fmt.Errorf("max ack pending must be at least 1, got %d", c.MaxAckPending))
	}
	for _, k := range Lanes {
		if err := c.Lane(k).validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if c.MaxQueued < 0 {
		errs = append(errs, fmt.Errorf("max queued must not be negative, got %d", c.MaxQueued))
	}
	if c.DuplicateWindow <= 0 || c.ResponseMaxAge <= 0 || c.DLQMaxAge <= 0 {
		errs = append(errs, errors.New("duplicate window and retention ages must be positive"))
	}
	if c.Durable == "" || strings.ContainsAny(c.Durable, ".*> \t") {
		errs = append(errs, fmt.Errorf("durable name %q must be a plain token", c.Durable))
	}
	return errors.Join(errs...)
}

// Subjects are the configured subjects.
func (c Config) Subjects() contracts.Subjects { return contracts.SubjectsFor(c.App) }

// Stream names are derived from the app prefix, so several apps can share one NATS account.
func (c Config) RequestsStream() string  { return c.streamPrefix() + "_MEDIA_REQUESTS" }
func (c Config) ResponsesStream() string { return c.streamPrefix() + "_MEDIA_RESPONSES" }
func (c Config) DLQStream() string       { return c.streamPrefix() + "_MEDIA_DLQ" }

// streamOf names the stream that stores what the worker publishes on subject.
func (c Config) streamOf(subject string) string {
	switch subj := c.Subjects(); subject {
	case subj.Response, subj.Virus:
		return c.ResponsesStream()
	case subj.DLQ:
		return c.DLQStream()
	}
	return c.RequestsStream()
}

func (c Config) streamPrefix() string { return strings.ToUpper(strings.ReplaceAll(c.App, "-", "_")) }

// StreamConfigs returns the stream definitions: requests, responses, dlq and the advisory capture.
func (c Config) StreamConfigs() []jetstream.StreamConfig {
	subj := c.Subjects()
	requests := jetstream.StreamConfig{
		Name:        c.RequestsStream(),
		Description: "mediaworker optimize requests and their lanes' work (work queue; publish with Nats-Msg-Id: <mediaId>)",
		Subjects:    c.requestSubjects(),
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    c.Replicas,
		Duplicates:  c.DuplicateWindow,
		AllowDirect: true, // lets `nats stream view` page a work queue
		Discard:     jetstream.DiscardOld,
		MaxMsgs:     -1,
	}
	if c.MaxQueued > 0 {
		// Discard new: a full queue refuses the publish, which the API turns into 429/503. Per subject,
		// so queued requests can never refuse triage's copies to the lanes (see lanes.go).
		requests.MaxMsgsPerSubject = c.MaxQueued
		requests.Discard = jetstream.DiscardNew
		requests.DiscardNewPerSubject = true
	}
	responses := jetstream.StreamConfig{
		Name:        c.ResponsesStream(),
		Description: "mediaworker responses and virus events, kept so an API that is down loses nothing",
		Subjects:    []string{subj.Response, subj.Virus},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    c.Replicas,
		MaxAge:      c.ResponseMaxAge,
		Duplicates:  c.DuplicateWindow,
		AllowDirect: true,
		MaxMsgs:     -1,
	}
	dlq := jetstream.StreamConfig{
		Name:        c.DLQStream(),
		Description: "mediaworker dead letters: original requests with the last error in headers",
		Subjects:    []string{subj.DLQ},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    c.Replicas,
		MaxAge:      c.DLQMaxAge,
		AllowDirect: true,
		MaxMsgs:     -1,
	}
	return []jetstream.StreamConfig{requests, responses, dlq, c.AdvisoryCapture().streamConfig()}
}

// requestSubjects are the requests stream's: the request subject and each lane's.
func (c Config) requestSubjects() []string {
	out := []string{c.Subjects().Request}
	for _, l := range Lanes {
		out = append(out, c.Lane(l).subjects()...)
	}
	return out
}

// ConsumerConfig returns triage's shared durable pull consumer on the request subject (the single
// consumer of earlier versions, so what they left queued is triaged). It has no InactiveThreshold: a
// consumer removed for inactivity would not come back by itself.
func (c Config) ConsumerConfig() jetstream.ConsumerConfig {
	pending := c.MaxAckPending
	if c.MaxQueued > 0 {
		// A request handed back for a full lane stays pending on triage while it waits for its next
		// delivery: a lane's backlog would otherwise fill triage's pending with requests for it and
		// stop triage for every lane. At most MaxQueued requests are queued, so this many always fit.
		pending += int(c.MaxQueued)
	}
	return jetstream.ConsumerConfig{
		Durable:       c.Durable,
		Description:   "mediaworker instances triage requests to the lanes through this pull consumer",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       c.AckWait,
		MaxDeliver:    c.MaxDeliver,
		MaxAckPending: pending,
		FilterSubject: c.Subjects().Request,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		Replicas:      c.Replicas,
	}
}

// Provision creates or updates the streams, the consumers (triage, one per lane, advisories) and the
// settled-requests and verdict buckets. It is idempotent, upgrades the single-consumer layout of earlier
// versions in place, and is safe for instances that start together on a fresh cluster: each definition
// is looked up first, created only when missing and updated only once it exists (never
// create-or-update: see ensureBucket), every call has a deadline of its own (provisionCallTimeout), and
// one that times out or finds another instance's creation under way is tried again.
func Provision(ctx context.Context, js jetstream.JetStream, c Config) error {
	if err := CheckOwnership(ctx, js, c); err != nil {
		return err
	}
	for _, sc := range c.StreamConfigs() {
		if err := provisionStep(ctx, "creating stream "+sc.Name, func(ctx context.Context) error {
			return ensureStream(ctx, js, sc)
		}); err != nil {
			return err
		}
	}
	type consumer struct {
		stream string
		cc     jetstream.ConsumerConfig
	}
	consumers := []consumer{{c.RequestsStream(), c.ConsumerConfig()}}
	for _, l := range Lanes {
		consumers = append(consumers, consumer{c.RequestsStream(), c.Lane(l).ConsumerConfig()})
	}
	consumers = append(consumers, consumer{c.AdvisoryCapture().Stream(), c.AdvisoryCapture().ConsumerConfig()})
	for _, cs := range consumers {
		if err := provisionStep(ctx, fmt.Sprintf("creating consumer %s on %s", cs.cc.Durable, cs.stream), func(ctx context.Context) error {
			_, err := js.CreateOrUpdateConsumer(ctx, cs.stream, cs.cc)
			return err
		}); err != nil {
			return err
		}
	}
	for _, kc := range []jetstream.KeyValueConfig{c.Buckets().settledConfig(), c.Buckets().verdictConfig()} {
		if err := provisionBucket(ctx, js, kc); err != nil {
			return err
		}
	}
	return nil
}

// ProvisionReuse creates the reuse memory's bucket, or writes rc's TTL and size to it, as Provision
// does its other buckets. Run at start (and by `streams apply`), it keeps the bucket's creation out of
// the jobs' way.
func ProvisionReuse(ctx context.Context, js jetstream.JetStream, c Config, rc ReuseConfig) error {
	return provisionBucket(ctx, js, c.Buckets().reuseConfig(rc))
}

func provisionBucket(ctx context.Context, js jetstream.JetStream, kc jetstream.KeyValueConfig) error {
	return provisionStep(ctx, "creating key-value bucket "+kc.Bucket, func(ctx context.Context) error {
		_, err := ensureBucket(ctx, js, kc, true)
		return err
	})
}

// ensureStream creates the stream sc names when it is missing, and updates it when it exists with
// other settings. Like ensureBucket, it never sends a create-or-update, and it sends an update only
// when something changes: an update that reaches a new replicated stream while another instance's
// create of it is still completing leaves both unanswered (nats-server 2.15, issue 31), and instances
// that start together on a fresh cluster all want the same settings.
func ensureStream(ctx context.Context, js jetstream.JetStream, sc jetstream.StreamConfig) error {
	lctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	s, err := js.Stream(lctx, sc.Name)
	cancel()
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		_, err = js.CreateStream(ctx, sc) // "already in use": another instance's, with other settings; looked at again
	case err == nil && !streamCurrent(s.CachedInfo().Config, sc):
		_, err = js.UpdateStream(ctx, sc)
	}
	return err
}

// streamCurrent says whether a stream configured as have already is what want asks for: equal once the
// server's defaults stand in for want's unset limits, and its own metadata ("_nats.*") is left out.
func streamCurrent(have, want jetstream.StreamConfig) bool {
	unlimited := func(v *int64) {
		if *v == 0 {
			*v = -1
		}
	}
	unlimited(&want.MaxMsgs)
	unlimited(&want.MaxBytes)
	unlimited(&want.MaxMsgsPerSubject)
	if want.MaxConsumers == 0 {
		want.MaxConsumers = -1
	}
	if want.MaxMsgSize == 0 {
		want.MaxMsgSize = -1
	}
	if want.Replicas == 0 {
		want.Replicas = 1
	}
	if want.Duplicates == 0 {
		// The server's default window, or the max age when that is shorter.
		want.Duplicates = 2 * time.Minute
		if want.MaxAge > 0 && want.MaxAge < want.Duplicates {
			want.Duplicates = want.MaxAge
		}
	}
	have.Metadata, want.Metadata = ownMetadata(have.Metadata), ownMetadata(want.Metadata)
	return reflect.DeepEqual(have, want)
}

// ownMetadata is md without the server's keys (nil when nothing is left).
func ownMetadata(md map[string]string) map[string]string {
	var out map[string]string
	for k, v := range md {
		if !strings.HasPrefix(k, "_nats.") {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
		}
	}
	return out
}

const (
	// lookupTimeout bounds a stream's or bucket's lookup. One looked up while another instance is
	// creating it can go unanswered (nats-server 2.15); the next attempt asks again.
	lookupTimeout = 2 * time.Second
	// provisionCallTimeout bounds one attempt at a provisioning step. Creating an R3 stream takes well
	// under a second; one left unanswered is tried again rather than waited for.
	provisionCallTimeout = 10 * time.Second
	// provisionAttempts is how often a step that timed out, or met another instance's creation, is tried.
	provisionAttempts = 8
)

// provisionStep runs step, each attempt bounded by provisionCallTimeout, and tries again after a
// timeout, a JetStream that does not answer yet, or another instance's creation of the same definition
// (the next attempt looks it up and updates it). Any other error (a refused permission, a bad setting)
// is returned at once.
func provisionStep(ctx context.Context, what string, step func(context.Context) error) error {
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, provisionCallTimeout)
		err := step(actx)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || attempt == provisionAttempts || !provisionRetryable(err) {
			return fmt.Errorf("%s: %w", what, err)
		}
		sleepCtx(ctx, time.Duration(attempt)*250*time.Millisecond)
	}
}

func provisionRetryable(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) || errors.Is(err, jetstream.ErrBucketExists)
}

// ErrOtherApp says a stream this app prefix maps to was made for another prefix.
var ErrOtherApp = errors.New("the stream belongs to another app prefix")

// CheckOwnership refuses streams of this app's names that were made for another app prefix. Stream
// names are the prefix upper-cased with '-' as '_' (streamPrefix), so "site-a", "site_a" and "SITE-A"
// share stream names while their subjects differ: provisioning the second would rewrite the first's
// subjects and consumer filters, and its answers would go to the wrong site or nowhere. The names stay
// as they are (renaming would strand every deployment's queued work); the second prefix is refused,
// naming both, before anything is changed. A stream that does not exist yet is fine.
func CheckOwnership(ctx context.Context, js jetstream.JetStream, c Config) error {
	subj := c.Subjects()
	for _, sc := range c.StreamConfigs()[:3] { // requests, responses, dlq: the advisory capture's subjects name the stream, not the app
		s, err := lookupStream(ctx, js, sc.Name)
		if err != nil {
			return err
		}
		if s == nil {
			continue
		}
		for _, have := range s.CachedInfo().Config.Subjects {
			if owner := subjectApp(have); owner != c.App {
				return fmt.Errorf("%w: stream %s carries subject %q of app prefix %q, and app prefix %q (subjects %s…) maps to the same stream name; "+
					"choose an app prefix that differs from %q in more than case and '-' versus '_' (Config.App), or remove the other site's streams",
					ErrOtherApp, sc.Name, have, owner, c.App, strings.TrimSuffix(subj.Request, "request"), owner)
			}
		}
	}
	return nil
}

// lookupStream returns the stream called name, nil when there is none. A lookup that goes unanswered
// (lookupTimeout: another instance may be creating the stream) is made again.
func lookupStream(ctx context.Context, js jetstream.JetStream, name string) (jetstream.Stream, error) {
	var s jetstream.Stream
	err := provisionStep(ctx, "looking up stream "+name, func(ctx context.Context) error {
		lctx, cancel := context.WithTimeout(ctx, lookupTimeout)
		defer cancel()
		var err error
		if s, err = js.Stream(lctx, name); errors.Is(err, jetstream.ErrStreamNotFound) {
			s, err = nil, nil
		}
		return err
	})
	return s, err
}

// subjectApp is the app prefix of one of our subjects: everything before ".media.optimize.".
func subjectApp(subject string) string {
	if app, _, ok := strings.Cut(subject, ".media.optimize."); ok {
		return app
	}
	return subject
}
