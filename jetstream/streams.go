package jetstream

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/job"
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
