package jetstream

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

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
