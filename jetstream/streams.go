package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/pipeline"
	"github.com/nats-io/nats.go/jetstream"
)

// Config holds the stream and consumer settings shared by every instance.
type Config struct {
	App           string        // subject prefix
	Replicas      int           // 1 on a single server, 3 on a cluster
	AckWait       time.Duration // how long a delivery may go without Ack or InProgress
	MaxDeliver    int           // deliveries before a request is dead-lettered
	MaxAckPending int           // cluster-wide in-flight cap (total slots of all instances)
	// ImageLane and VideoLane are each lane consumer's own settings; a zero field takes the shared
	// one above (lanes.go).
	ImageLane, VideoLane LaneLimits
	MaxQueued            int64         // requests stream cap, discard new (0: unlimited)
	DuplicateWindow      time.Duration // Nats-Msg-Id dedupe window of the requests and responses streams
	ResponseMaxAge       time.Duration // how long responses are kept for an API that was down
	DLQMaxAge            time.Duration // how long dead letters are kept
	Durable              string        // the shared consumer's name
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
	for _, l := range Lanes {
		ll := c.laneLimits(l)
		if own := c.ownLimits(l); own.AckWait != 0 && ll.AckWait < time.Second {
			errs = append(errs, fmt.Errorf("the %s lane's ack wait (Config.%s.AckWait) must be at least 1s, or 0 for the shared one (Config.AckWait), got %s", l, laneField(l), own.AckWait))
		}
		if own := c.ownLimits(l); own.MaxAckPending < 0 {
			errs = append(errs, fmt.Errorf("the %s lane's max ack pending (Config.%s.MaxAckPending) must be at least 1, or 0 for the shared one (Config.MaxAckPending), got %d", l, laneField(l), own.MaxAckPending))
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
		Subjects:    append(append([]string{subj.Request}, c.laneSubjects(pipeline.Image)...), c.laneSubjects(pipeline.Video)...),
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
	return []jetstream.StreamConfig{requests, responses, dlq, c.advisoryStreamConfig()}
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

// Provision creates or updates the streams and the consumers (triage, one per lane, advisories). It is
// idempotent, and upgrades the single-consumer layout of earlier versions in place.
func Provision(ctx context.Context, js jetstream.JetStream, c Config) error {
	if err := CheckOwnership(ctx, js, c); err != nil {
		return err
	}
	for _, sc := range c.StreamConfigs() {
		if _, err := js.CreateOrUpdateStream(ctx, sc); err != nil {
			return fmt.Errorf("creating stream %s: %w", sc.Name, err)
		}
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, c.RequestsStream(), c.ConsumerConfig()); err != nil {
		return fmt.Errorf("creating consumer %s on %s: %w", c.Durable, c.RequestsStream(), err)
	}
	for _, l := range Lanes {
		if _, err := js.CreateOrUpdateConsumer(ctx, c.RequestsStream(), c.LaneConsumerConfig(l)); err != nil {
			return fmt.Errorf("creating consumer %s on %s: %w", c.LaneDurable(l), c.RequestsStream(), err)
		}
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, c.AdvisoryStream(), c.AdvisoryConsumerConfig()); err != nil {
		return fmt.Errorf("creating consumer %s on %s: %w", c.advisoryDurable(), c.AdvisoryStream(), err)
	}
	if _, err := js.CreateOrUpdateKeyValue(ctx, c.settledConfig()); err != nil {
		return fmt.Errorf("creating key-value bucket %s: %w", c.SettledBucket(), err)
	}
	if _, err := js.CreateOrUpdateKeyValue(ctx, c.verdictConfig()); err != nil {
		return fmt.Errorf("creating key-value bucket %s: %w", c.VerdictBucket(), err)
	}
	return nil
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
		s, err := js.Stream(ctx, sc.Name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("looking up stream %s: %w", sc.Name, err)
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

// subjectApp is the app prefix of one of our subjects: everything before ".media.optimize.".
func subjectApp(subject string) string {
	if app, _, ok := strings.Cut(subject, ".media.optimize."); ok {
		return app
	}
	return subject
}
