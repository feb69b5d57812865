package jetstream

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mediaworker/mediaworker/job"
	"github.com/nats-io/nats.go/jetstream"
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

// Lanes are the kinds of work, each with its own subject, durable and pool of slots: the registered
// kinds (package job's registry), in their order.
var Lanes = job.Kinds()

// ParseLanes reads a --lanes value: a comma-separated subset of the lanes ("" or "all": every lane).
func ParseLanes(s string) ([]job.Kind, error) {
	if s == "" || s == "all" {
		return slices.Clone(Lanes), nil
	}
	var out []job.Kind
	for _, f := range strings.Split(s, ",") {
		l := job.Kind(strings.TrimSpace(f))
		if !slices.Contains(Lanes, l) {
			return nil, fmt.Errorf("unknown lane %q: lanes are %s (e.g. %q)", f, job.KindsInWords(), AllLanes())
		}
		if !slices.Contains(out, l) {
			out = append(out, l)
		}
	}
	return out, nil
}

// AllLanes is the --lanes value that names every lane: "image,video".
func AllLanes() string {
	names := make([]string, len(Lanes))
	for i, l := range Lanes {
		names[i] = string(l)
	}
	return strings.Join(names, ",")
}

// WorkSubject is the subject triage routes lane's requests to.
func (c Config) WorkSubject(lane job.Kind) string {
	return c.App + ".media.optimize.work." + string(lane)
}

// LaneDurable is the name of lane's shared durable consumer.
func (c Config) LaneDurable(lane job.Kind) string { return c.Durable + "-" + string(lane) }

// LaneLimits are one lane consumer's own settings: its MaxAckPending caps the lane's jobs across all
// instances (in flight plus waiting for a retry), so a fleet can run few videos and many images; its
// AckWait is how soon a delivery whose worker went silent comes back. Zero: the shared value.
type LaneLimits struct {
	AckWait       time.Duration
	MaxAckPending int
}

// defaultLaneLimits are every registered kind's lane defaults (job.Spec.Lane).
func defaultLaneLimits() map[job.Kind]*LaneLimits {
	out := map[job.Kind]*LaneLimits{}
	for _, s := range job.Specs() {
		out[s.Kind] = &LaneLimits{AckWait: s.Lane.AckWait, MaxAckPending: s.Lane.MaxAckPending}
	}
	return out
}

// ownLimits are lane's settings as configured (zero: unset).
func (c Config) ownLimits(lane job.Kind) LaneLimits {
	if l := c.Lanes[lane]; l != nil {
		return *l
	}
	return LaneLimits{}
}

// laneField names the Config field of lane's own settings, for errors.
func laneField(lane job.Kind) string { return "Lanes[" + string(lane) + "]" }

// laneLimits are lane's settings in effect: its own, else the shared ones.
func (c Config) laneLimits(lane job.Kind) LaneLimits {
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
func (c Config) LaneConsumerConfig(lane job.Kind) jetstream.ConsumerConfig {
	limits := c.laneLimits(lane)
	return jetstream.ConsumerConfig{
		Durable:        c.LaneDurable(lane),
		Description:    fmt.Sprintf("mediaworker instances serving the %s lane share this pull consumer", lane),
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        limits.AckWait,
		MaxDeliver:     c.MaxDeliver,
		MaxAckPending:  limits.MaxAckPending,
		FilterSubjects: c.laneSubjects(lane),
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		Replicas:       c.Replicas,
	}
}

// laneOf says which lane a message of the requests stream belongs to ("" for a request: triage).
func (c Config) laneOf(subject string) job.Kind {
	for _, l := range Lanes {
		if subject == c.WorkSubject(l) || strings.HasPrefix(subject, c.WorkSubject(l)+".") {
			return l
		}
	}
	return ""
}

// A full lane. With --max-queued, each lane's work subject is capped like the request subject, so a
// lane with that many jobs queued and in flight refuses triage's copy. That is load, not a fault:
// apply's laneFull hands the request back with a backoff while deliveries remain, and routes it past
// the cap on its last delivery (overflowSubject), so no request is dead-lettered for it and none holds a
// triage slot waiting for room.

// isLaneFull reports whether a publish was refused by a subject's --max-queued cap.
func isLaneFull(err error) bool {
	return err != nil && strings.Contains(err.Error(), "maximum messages per subject exceeded")
}

// overflowSubject is where a request on its last delivery goes when its lane is full: a subject of its
// own under the lane's (one message, so the per-subject cap never refuses it), read by the lane's
// consumer with the lane's subject.
func (c Config) overflowSubject(lane job.Kind, reqSeq uint64) string {
	return c.WorkSubject(lane) + "." + strconv.FormatUint(reqSeq, 10)
}

// laneSubjects are the subjects lane's consumer reads: its work subject and the overflow under it.
func (c Config) laneSubjects(lane job.Kind) []string {
	return []string{c.WorkSubject(lane), c.WorkSubject(lane) + ".*"}
}

// DefaultSlots are every lane's default slots on a machine of cores CPUs (job.Spec.Lane.Slots);
// DefaultWorkerConfig's are a small machine's (2 cores).
func DefaultSlots(cores int) map[job.Kind]int {
	out := map[job.Kind]int{}
	for _, s := range job.Specs() {
		out[s.Kind] = s.Lane.Slots(cores)
	}
	return out
}
