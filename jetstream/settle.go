package jetstream

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/textproto"
	"strconv"
	"strings"
	"time"

	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/job"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// Settlement: one function, settle, turns an outcome into the events it owes and then exactly one of
// Ack, Term or Nak. Everything a message can end in passes through it: triage's routes and refusals,
// a lane job's outcome, the retry path's giving up, and the max-deliveries advisory's.

// HeaderRequestSeq on a lane's work message is the sequence of the request it came from: the request's
// identity for response ids, dead letters and the settled-requests memory.
const HeaderRequestSeq = "Mw-Request-Seq"

// delivery is one message being settled: a request (triage), a lane's work message, or, from the
// advisory path, a message whose worker died on its last delivery (msg is nil then).
type delivery struct {
	lane       job.Kind // job.Triage for triage
	data       []byte
	header     nats.Header
	seq        uint64    // this message's sequence in the requests stream
	reqSeq     uint64    // the request's sequence (= seq for a request)
	published  time.Time // when the request was stored
	deliveries uint64
	req        contracts.Request // as far as it parsed
	msg        jetstream.Msg
	// lastChance: the advisory's last attempt; a DLQ copy that still fails is logged and skipped.
	lastChance bool
}

func newDelivery(lane job.Kind, msg jetstream.Msg, meta *jetstream.MsgMetadata) *delivery {
	return storedDelivery(lane, msg.Data(), msg.Headers(), meta.Sequence.Stream, meta.Timestamp, meta.NumDelivered, msg)
}

// storedDelivery is the one constructor of a delivery from a message of the requests stream: the pull
// loops' (msg set) and the advisory path's (msg nil). It decides what the message's headers may say.
func storedDelivery(lane job.Kind, data []byte, h nats.Header, seq uint64, stored time.Time, deliveries uint64, msg jetstream.Msg) *delivery {
	if lane == job.Triage {
		h = withoutOwnHeaders(h)
	}
	d := &delivery{lane: lane, data: data, header: h, seq: seq, published: stored, deliveries: deliveries, msg: msg}
	d.reqSeq, d.published = requestOrigin(h, seq, stored)
	return d
}

// withoutOwnHeaders drops the worker's own Mw- headers from a request. A request is the API's (or
// anyone's who may publish on the request subject): a Mw-Request-Seq it carries would make it pass for
// another request in the settled-requests memory, the response ids and the lane copies, so that one
// of the two is never answered. Only triage's lane copies, which the worker writes, carry ours.
func withoutOwnHeaders(h nats.Header) nats.Header {
	var out nats.Header
	for k, vs := range h {
		if strings.HasPrefix(textproto.CanonicalMIMEHeaderKey(k), "Mw-") {
			continue
		}
		if out == nil {
			out = nats.Header{}
		}
		out[k] = vs
	}
	return out
}

// requestOrigin reads the request's sequence and time from a lane work message's headers (a request,
// stripped of them by storedDelivery, is its own origin).
func requestOrigin(h nats.Header, seq uint64, published time.Time) (uint64, time.Time) {
	if s, err := strconv.ParseUint(h.Get(HeaderRequestSeq), 10, 64); err == nil && s > 0 {
		seq = s
		if t, err := time.Parse(time.RFC3339Nano, h.Get(HeaderPublishedAt)); err == nil {
			published = t
		}
	}
	return seq, published
}

// HeaderOutcome on a response says how the request ended, so a reader (the console) need not match
// words in its error text: OutcomeSuccess, OutcomeFailed, OutcomeVirus or OutcomeGaveUp. The response
// itself is the seed contract's and unchanged.
const HeaderOutcome = "Mw-Outcome"

// Outcomes a response's HeaderOutcome names (also the last part of its Nats-Msg-Id).
const (
	OutcomeSuccess = "success"
	OutcomeFailed  = "failed"
	OutcomeVirus   = "virus"
	OutcomeGaveUp  = "gave-up"
)

// errHandedBack says the settlement could not publish what it owes; the message was handed back.
var errHandedBack = errors.New("handed back for another delivery")

// settler settles deliveries: it gathers the facts decide needs, has decide make the plan, and has
// apply carry it out. The pull loop, the max-deliveries advisories and the rescue share one.
type settler struct {
	cfg    Config
	rules  rules // decide's
	wcfg   WorkerConfig
	js     jetstream.JetStream
	tally  tally
	done   *settledMemory
	claims *rescueClaims
}

// settle settles a delivery by its outcome: decide makes the plan, apply carries it out. Every
// outcome passes through it: triage's routes and refusals, a lane job's, the retry path's giving up,
// the max-deliveries advisory's and the rescue's. f holds what only the caller knows (draining,
// outage); the rest of the facts are gathered here.
func (s *settler) settle(ctx context.Context, d *delivery, out job.Outcome, f facts, log zerolog.Logger) error {
	f.backoff, f.now, f.maxPayload = s.wcfg.backoff(d.deliveries), time.Now(), maxPayload(s.js.Conn())
	p, settled := s.rules.decide(d, f, out)
	if p.shrunk {
		log.Warn().Str("error", settled.Response.Error).Msg("the outcome's answer is too large to publish; answering with a short failure instead")
	}
	err := s.apply(ctx, d, p, log)
	if errors.Is(err, errLaneFull) {
		f.laneFull = true
		p, settled = s.rules.decide(d, f, out)
		s.tally.laneFull(d, p, s.cfg.Lane(out.MediaKind).WorkSubject(), log)
		if err = s.apply(ctx, d, p, log); err == nil && p.then == actNak {
			return errHandedBack
		}
	}
	if err != nil {
		return err
	}
	s.tally.report(settled, d, p, log)
	return nil
}

// facts are what decide knows of a delivery's circumstances besides the delivery and its outcome. They
// are gathered before it is called (the pull loop's by Worker.settle, the rest by settler.settle), so
// decide looks nothing up: it is a function of the delivery, its facts, the outcome and the rules.
type facts struct {
	draining bool // the drain timeout stopped the job: not its fault
	outage   bool // a dependency the jobs need is down now (probed only for a retry that would wait)
	// laneFull: the route's lane refused its copy (Config.MaxQueued). Only the publish can tell (the cap
	// is the stream's, checked as it stores), so apply reports it (errLaneFull) and settle decides again.
	laneFull   bool
	backoff    time.Duration // this delivery's hand-back delay, its jitter drawn
	now        time.Time     // stamps the dead letter and the outbox
	maxPayload int           // the server's limit on one message (oversize.go)
}

// rules are what decide reads besides the delivery: the configuration, fixed at start, and the words
// that tell a job's errors. Every method is pure.
type rules struct {
	cfg   Config
	words job.Words
}

// gaveUpAfter is job.GaveUpAfter with the cause told in the pipeline's public words.
func (r rules) gaveUpAfter(req contracts.Request, kind job.Kind, deliveries uint64, cause error) job.Outcome {
	return job.GaveUpAfter(req, kind, deliveries, cause, r.words.Public(cause))
}

// decide is the settlement of out as a plan (and the outcome it settles, which may differ: a retry
// out of deliveries gives up, an answer too large to publish becomes a short failure). It is pure: no
// I/O, no clock, no randomness; what it needs to know about the world is in f.
func (r rules) decide(d *delivery, f facts, out job.Outcome) (plan, job.Outcome) {
	last := d.deliveries >= uint64(r.cfg.MaxDeliver)
	if out.Kind == job.Retry {
		switch {
		case f.draining:
			// Not the job's fault: hand it back at once for another instance.
			return plan{then: actNak}, out
		case !last && f.outage && d.msg != nil:
			return plan{hold: true, then: actNak}, out
		case !last:
			return plan{then: actNak, delay: f.backoff}, out
		}
		out = r.gaveUpAfter(d.req, out.MediaKind, d.deliveries, out.Err)
	}
	if out.Kind == job.Route && f.laneFull && d.msg != nil && !last {
		// A full lane is load, not a fault: back with a backoff, so requests for other lanes are routed
		// meanwhile (the last delivery goes past the cap instead, events).
		return plan{then: actNak, delay: f.backoff}, out
	}

	evs := r.events(d, out, f)
	shrunk := fitOutcome(d, &out, evs, f.maxPayload)
	if shrunk {
		evs = r.events(d, out, f)
	}
	p := plan{events: evs, remember: settledState(d, out), failDelay: f.backoff, shrunk: shrunk}
	if out.Kind == job.GaveUp && last {
		p.failDelay = 0 // the max-deliveries advisory finishes the job (advisories.run)
	}
	if p.remember == settledFinal && len(evs) > 0 {
		// The outbox, recorded before the first publish, is the request's only record: a later delivery
		// that finds it finishes the settlement (outbox.go) instead of running, so a "final" written
		// after the publishes would be a second write per job that changes no outcome.
		ob := newOutbox(evs, termReason(out), f.now)
		p.outbox, p.remember = &ob, ""
	}
	switch out.Kind {
	case job.Success, job.Infected, job.Route:
		p.then = actAck
	case job.Failed, job.GaveUp:
		p.then, p.reason = actTerm, termReason(out)
	}
	return p, out
}

// termReason is the reason a Failed or GaveUp outcome's delivery is terminated with ("" for the rest,
// which are acked).
func termReason(out job.Outcome) string {
	switch out.Kind {
	case job.Failed:
		return out.Response.Error
	case job.GaveUp:
		return "moved to DLQ: " + out.Reason
	}
	return ""
}

// settledState is what the settled-requests memory records for out: an end, or nothing for a route.
// A route writes no record: its lane copy is the record while the request is on its way (a redelivered
// request looks for it, routedBefore), and the lane records its end before it removes the copy.
func settledState(_ *delivery, out job.Outcome) string {
	if out.Kind == job.Route {
		return ""
	}
	return settledFinal
}

// event is one message an outcome owes, with its deduplicating id.
type event struct {
	msg        *nats.Msg
	id         string
	deadLetter bool
	lane       job.Kind // a route's lane, whose cap may refuse it ("" for the rest and a route past the cap)
}

// events lists what out owes, in order: the API is answered before the DLQ copy (which is for
// operators and must never hold up the answer), the virus event before the virus response. A route
// its lane refused for being full (f.laneFull, on the last delivery) goes into the lane past the cap,
// on a subject of its own (overflowSubject) that the lane's consumer also reads: a request waiting
// for room would hold a triage slot, and triage serves every lane; dead-lettering it would make load a
// fault. Its id stays the route's, so a second route of the request is still dropped.
func (r rules) events(d *delivery, out job.Outcome, f facts) []event {
	subj := r.cfg.Subjects()
	var evs []event
	respond := func(suffix string) {
		if out.Response.MediaID != "" {
			m := jsonMsg(subj.Response, out.Response)
			m.Header.Set(HeaderOutcome, suffix)
			if d.req.S3Bucket != "" {
				m.Header.Set(contracts.HeaderBucket, d.req.S3Bucket)
			}
			evs = append(evs, event{msg: m, id: r.responseID(d, suffix)})
		}
	}
	switch out.Kind {
	case job.Success:
		respond(OutcomeSuccess)
	case job.Failed:
		respond(OutcomeFailed)
	case job.Infected:
		evs = append(evs, event{msg: jsonMsg(subj.Virus, out.Virus), id: r.responseID(d, "virus-event")})
		respond(OutcomeVirus)
	case job.Route:
		m := nats.NewMsg(r.cfg.Lane(out.MediaKind).WorkSubject())
		lane := out.MediaKind // a refusal by its cap comes back to decide (errLaneFull)
		if f.laneFull {
			m.Subject, lane = r.cfg.Lane(out.MediaKind).overflowSubject(d.reqSeq), job.Triage
		}
		m.Data = d.data
		copyHeaders(m.Header, d.header)
		m.Header.Set(HeaderRequestSeq, strconv.FormatUint(d.reqSeq, 10))
		m.Header.Set(HeaderPublishedAt, d.published.UTC().Format(time.RFC3339Nano))
		evs = append(evs, event{msg: m, id: r.routeID(d, out.MediaKind), lane: lane})
	case job.GaveUp:
		respond(OutcomeGaveUp)
		m, id := r.deadLetterMsg(d, out.Reason, out.Err, f)
		evs = append(evs, event{msg: m, id: id, deadLetter: true})
	}
	return evs
}

// routeID is the Nats-Msg-Id of request d's copy in lane: one per request and lane, so a second route
// of the same request (a redelivery within the duplicate window) is dropped. The copy shares the
// requests stream's duplicate window with the requests themselves, whose ids the API chooses: an id
// made of the stream and sequence alone could be published ahead of time as a request's Nats-Msg-Id,
// and that request's lane copy would then be dropped as a "duplicate" and never answered. So the id
// ends in a digest of the time the server stored the request, to the nanosecond, which no publisher
// knows before the request exists, nor after it without reading the requests stream (the API role
// may not: deploy/nats/accounts.conf). Every instance derives the same id from the same request.
func (r rules) routeID(d *delivery, lane job.Kind) string {
	key := fmt.Sprintf("%s/%d/%s/%d", r.cfg.RequestsStream(), d.reqSeq, lane, d.published.UnixNano())
	sum := sha256.Sum256([]byte(key))
	return fmt.Sprintf("route/%s/%d/%s/%x", r.cfg.RequestsStream(), d.reqSeq, lane, sum[:8])
}

// responseID is unique per request (its stream sequence) and outcome: redeliveries share it, and so do
// triage and the lanes.
func (r rules) responseID(d *delivery, outcome string) string {
	return fmt.Sprintf("%s/%d/%s", d.req.MediaID, d.reqSeq, outcome)
}

func jsonMsg(subject string, v any) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Data, _ = json.Marshal(v) // our own event types: they always encode
	return m
}
