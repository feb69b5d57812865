package jetstream

import (
	"errors"
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

// Lane is one lane as Config lays it out: its work subject (and the overflow under it), its shared
// durable and the limits its consumer runs with.
type Lane struct {
	Kind job.Kind
	c    Config
}

// Lane is kind's lane.
func (c Config) Lane(kind job.Kind) Lane { return Lane{Kind: kind, c: c} }

// WorkSubject is the subject triage routes the lane's requests to.
func (l Lane) WorkSubject() string {
	return l.c.App + ".media.optimize.work." + string(l.Kind)
}

// Durable is the name of the lane's shared durable consumer.
func (l Lane) Durable() string { return l.c.Durable + "-" + string(l.Kind) }

// own are the lane's settings as configured (zero: unset).
func (l Lane) own() LaneLimits {
	if ll := l.c.Lanes[l.Kind]; ll != nil {
		return *ll
	}
	return LaneLimits{}
}

// limits are the lane's settings in effect: its own, else the shared ones.
func (l Lane) limits() LaneLimits {
	ll := l.own()
	if ll.AckWait == 0 {
		ll.AckWait = l.c.AckWait
	}
	if ll.MaxAckPending == 0 {
		ll.MaxAckPending = l.c.MaxAckPending
	}
	return ll
}

// field names the Config field of the lane's own settings, for errors.
func (l Lane) field() string { return "Lanes[" + string(l.Kind) + "]" }

// validate checks the lane's own settings (Config.Validate).
func (l Lane) validate() error {
	var errs []error
	if own := l.own(); own.AckWait != 0 && l.limits().AckWait < time.Second {
		errs = append(errs, fmt.Errorf("the %s lane's ack wait (Config.%s.AckWait) must be at least 1s, or 0 for the shared one (Config.AckWait), got %s", l.Kind, l.field(), own.AckWait))
	}
	if own := l.own(); own.MaxAckPending < 0 {
		errs = append(errs, fmt.Errorf("the %s lane's max ack pending (Config.%s.MaxAckPending) must be at least 1, or 0 for the shared one (Config.MaxAckPending), got %d", l.Kind, l.field(), own.MaxAckPending))
	}
	return errors.Join(errs...)
}

// ConsumerConfig returns the lane's shared durable, with the lane's own limits (LaneLimits); like
// triage's, it has no InactiveThreshold.
func (l Lane) ConsumerConfig() jetstream.ConsumerConfig {
	limits := l.limits()
	return jetstream.ConsumerConfig{
		Durable:        l.Durable(),
		Description:    fmt.Sprintf("mediaworker instances serving the %s lane share this pull consumer", l.Kind),
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        limits.AckWait,
		MaxDeliver:     l.c.MaxDeliver,
		MaxAckPending:  limits.MaxAckPending,
		FilterSubjects: l.subjects(),
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		Replicas:       l.c.Replicas,
	}
}

// subjects are the subjects the lane's consumer reads: its work subject and the overflow under it.
func (l Lane) subjects() []string {
	return []string{l.WorkSubject(), l.WorkSubject() + ".*"}
}

// holds says whether a message of the requests stream on subject is the lane's.
func (l Lane) holds(subject string) bool {
	return subject == l.WorkSubject() || strings.HasPrefix(subject, l.WorkSubject()+".")
}

// A full lane. With --max-queued, each lane's work subject is capped like the request subject, so a
// lane with that many jobs queued and in flight refuses triage's copy. That is load, not a fault: apply
// reports the refusal (errLaneFull) and settle has decide plan again knowing it (facts.laneFull, settle.go):
// the request is handed back with a backoff while deliveries remain, and routed past the cap on its
// last delivery (overflowSubject), so no request is dead-lettered for it and none holds a triage slot
// waiting for room.

// isLaneFull reports whether a publish was refused by a subject's --max-queued cap.
func isLaneFull(err error) bool {
	return err != nil && strings.Contains(err.Error(), "maximum messages per subject exceeded")
}

// overflowSubject is where a request on its last delivery goes when the lane is full: a subject of
// its own under the lane's (one message, so the per-subject cap never refuses it), read by the lane's
// consumer with the lane's subject.
func (l Lane) overflowSubject(reqSeq uint64) string {
	return l.WorkSubject() + "." + strconv.FormatUint(reqSeq, 10)
}

// laneOf says which lane a message of the requests stream belongs to ("" for a request: triage).
func (c Config) laneOf(subject string) job.Kind {
	for _, k := range Lanes {
		if c.Lane(k).holds(subject) {
			return k
		}
	}
	return ""
}

// shortestAckWait is the least ack wait of triage's and the lanes' consumers: InProgress must come
// well inside it.
func (c Config) shortestAckWait() time.Duration {
	d := c.AckWait
	for _, k := range Lanes {
		d = min(d, c.Lane(k).limits().AckWait)
	}
	return d
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
