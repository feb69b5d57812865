package jetstream

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/mediaworker/mediaworker/pipeline"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// Lanes. Every request first goes through triage (the shared durable Config.Durable on the request
// subject): the object is looked up and its head sniffed, and the request is copied, exactly once
// (a deduplicating Nats-Msg-Id), to its kind's work subject <app>.media.optimize.work.<lane>. Each lane
// has its own durable, shared by the instances serving it, and an instance pulls from a lane only when
// it has a free slot of that kind: a pull is a slot, so a backlog in one lane never delays another.
//
// The work messages live in the requests stream, beside the requests, rather than in a stream of
// their own:
//   - one backlog: `nats stream info` shows all queued work, and --max-queued caps each subject
//     (MaxMsgsPerSubject with DiscardNewPerSubject) — a cap on the whole stream would let a full
//     stream of requests refuse triage's copies and stop every lane;
//   - one sequence space: the advisory path finds a message by its sequence in one stream, whatever
//     consumer gave up on it;
//   - upgrades in place: the old single durable (on the request subject) becomes the triage consumer,
//     so requests queued or in flight under the previous version are triaged, not lost.
// A work-queue stream allows only consumers with non-overlapping filters: request, work.image and
// work.video do not overlap.
//
// Triage runs in every instance (it is cheap: a stat and an 8 KiB read), so a site whose instances
// serve disjoint lanes still triages every request.

// Lanes are the kinds of work, each with its own subject, durable and pool of slots.
var Lanes = []pipeline.MediaKind{pipeline.Image, pipeline.Video}

// ParseLanes reads a --lanes value: a comma-separated subset of the lanes ("" or "all": every lane).
func ParseLanes(s string) ([]pipeline.MediaKind, error) {
	if s == "" || s == "all" {
		return slices.Clone(Lanes), nil
	}
	var out []pipeline.MediaKind
	for _, f := range strings.Split(s, ",") {
		l := pipeline.MediaKind(strings.TrimSpace(f))
		if !slices.Contains(Lanes, l) {
			return nil, fmt.Errorf("unknown lane %q: lanes are image and video (e.g. --lanes image,video)", f)
		}
		if !slices.Contains(out, l) {
			out = append(out, l)
		}
	}
	return out, nil
}

// WorkSubject is the subject triage routes lane's requests to.
func (c Config) WorkSubject(lane pipeline.MediaKind) string {
	return c.App + ".media.optimize.work." + string(lane)
}

// LaneDurable is the name of lane's shared durable consumer.
func (c Config) LaneDurable(lane pipeline.MediaKind) string { return c.Durable + "-" + string(lane) }

// LaneLimits are one lane consumer's own settings: its MaxAckPending caps the lane's jobs across all
// instances (in flight plus waiting for a retry), so a fleet can run few videos and many images; its
// AckWait is how soon a delivery whose worker went silent comes back. Zero: the shared value.
type LaneLimits struct {
	AckWait       time.Duration
	MaxAckPending int
}

// ownLimits are lane's settings as configured (zero: unset).
func (c Config) ownLimits(lane pipeline.MediaKind) LaneLimits {
	if lane == pipeline.Video {
		return c.VideoLane
	}
	return c.ImageLane
}

// laneLimits are lane's settings in effect: its own, else the shared ones.
func (c Config) laneLimits(lane pipeline.MediaKind) LaneLimits {
	l := c.ownLimits(lane)
	if l.AckWait == 0 {
		l.AckWait = c.AckWait
	}
	if l.MaxAckPending == 0 {
		l.MaxAckPending = c.MaxAckPending
	}
	return l
}

// shortestAckWait is the least ack wait of triage's and the lanes' consumers: InProgress must come
// well inside it.
func (c Config) shortestAckWait() time.Duration {
	d := c.AckWait
	for _, l := range Lanes {
		d = min(d, c.laneLimits(l).AckWait)
	}
	return d
}

// LaneConsumerConfig returns lane's shared durable, with the lane's own limits (LaneLimits); like
// triage's, it has no InactiveThreshold.
func (c Config) LaneConsumerConfig(lane pipeline.MediaKind) jetstream.ConsumerConfig {
	limits := c.laneLimits(lane)
	return jetstream.ConsumerConfig{
		Durable:       c.LaneDurable(lane),
		Description:   fmt.Sprintf("mediaworker instances serving the %s lane share this pull consumer", lane),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       limits.AckWait,
		MaxDeliver:    c.MaxDeliver,
		MaxAckPending: limits.MaxAckPending,
		FilterSubject: c.WorkSubject(lane),
		DeliverPolicy: jetstream.DeliverAllPolicy,
		Replicas:      c.Replicas,
	}
}

// laneOf says which lane a message of the requests stream belongs to ("" for a request: triage).
func (c Config) laneOf(subject string) pipeline.MediaKind {
	for _, l := range Lanes {
		if subject == c.WorkSubject(l) {
			return l
		}
	}
	return ""
}

// A full lane. With --max-queued, each lane's work subject is capped like the request subject, so a
// lane with that many jobs queued and in flight refuses triage's copy. That is load, not a fault, and a
// valid upload must not be dead-lettered for it: while deliveries remain, the request goes back with a
// backoff, so that requests for other lanes are routed meanwhile; on its last delivery it is held
// (InProgress keeps it) and the copy is retried until the lane has room.

// laneRetryEvery is how often a held request tries its full lane again.
const laneRetryEvery = 2 * time.Second

// isLaneFull reports whether a publish was refused by a subject's --max-queued cap.
func isLaneFull(err error) bool {
	return err != nil && strings.Contains(err.Error(), "maximum messages per subject exceeded")
}

// waitForLane handles a route refused by a full lane: nil once the copy is in the lane, errHandedBack
// when the request went back for a later delivery, or the error that ended the wait.
func (w *Worker) waitForLane(ctx context.Context, d *delivery, ev event, log zerolog.Logger) error {
	if d.msg == nil {
		return errors.New("the lane is full") // the advisory path: it retries the advisory
	}
	if d.deliveries < uint64(w.cfg.MaxDeliver) {
		delay := w.backoff(d.deliveries)
		log.Warn().Str("subject", ev.msg.Subject).Dur("retry_in", delay).Msg("the lane is full (--max-queued); handing the request back")
		w.nak(d, delay)
		w.observe("retry", "", d)
		return errHandedBack
	}
	log.Warn().Str("subject", ev.msg.Subject).Msg("the lane is full (--max-queued) on the request's last delivery; holding it until the lane has room")
	for {
		sleepCtx(ctx, laneRetryEvery)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("waiting for room in %s: %w", ev.msg.Subject, err)
		}
		err := w.publishOnce(ctx, ev.msg, ev.id)
		if !isLaneFull(err) {
			return err
		}
	}
}
