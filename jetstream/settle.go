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
	"github.com/mediaworker/mediaworker/pipeline"
	"github.com/mediaworker/mediaworker/tracing"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
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
	lane       pipeline.MediaKind // "" for triage
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

func newDelivery(lane pipeline.MediaKind, msg jetstream.Msg, meta *jetstream.MsgMetadata) *delivery {
	return storedDelivery(lane, msg.Data(), msg.Headers(), meta.Sequence.Stream, meta.Timestamp, meta.NumDelivered, msg)
}

// storedDelivery is the one constructor of a delivery from a message of the requests stream: the pull
// loops' (msg set) and the advisory path's (msg nil). It decides what the message's headers may say.
func storedDelivery(lane pipeline.MediaKind, data []byte, h nats.Header, seq uint64, stored time.Time, deliveries uint64, msg jetstream.Msg) *delivery {
	if lane == "" {
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

// settle publishes what out owes and settles the delivery; it is the only place that does either.
// A publish that fails hands the message back (or, on the advisory path, returns the error so the
// advisory is retried).
func (w *Worker) settle(ctx context.Context, d *delivery, out pipeline.Outcome, log zerolog.Logger) error {
	if out.Kind == pipeline.Retry {
		switch {
		case errors.Is(context.Cause(ctx), ErrDraining):
			// Not the job's fault: hand it back at once for another instance.
			w.nak(d, 0)
			log.Info().Msg("job stopped by shutdown; handed back for redelivery")
			w.observe("handed_back", out.MediaKind, d)
			return nil
		case d.deliveries < uint64(w.cfg.MaxDeliver) && w.holdThroughOutage(ctx, d, log):
			w.nak(d, 0)
			log.Info().Err(out.Err).Msg("held through a dependency outage; handed back for redelivery")
			w.observe("handed_back", out.MediaKind, d)
			return nil
		case d.deliveries < uint64(w.cfg.MaxDeliver):
			delay := w.backoff(d.deliveries)
			log.Warn().Err(out.Err).Dur("retry_in", delay).Msg("job failed; will retry")
			w.nak(d, delay)
			w.observe("retry", out.MediaKind, d)
			return nil
		}
		out = pipeline.GaveUpAfter(d.req, out.MediaKind, d.deliveries, out.Err)
	}

	evs := w.events(d, out)
	if w.fitOutcome(d, &out, evs) {
		log.Warn().Str("error", out.Response.Error).Msg("the outcome's answer is too large to publish; answering with a short failure instead")
		evs = w.events(d, out)
	}
	state := settledState(d, out)
	if state == settledFinal && len(evs) > 0 {
		w.recordOutbox(ctx, d, newOutbox(evs, termReason(out)), log)
	}
	for _, m := range evs {
		err := w.publish(ctx, m.msg, m.id)
		if isLaneFull(err) && out.Kind == pipeline.Route {
			if err = w.waitForLane(ctx, d, m, log); errors.Is(err, errHandedBack) {
				return err
			}
		}
		if err != nil {
			if m.deadLetter && d.lastChance {
				log.Error().Err(err).Str("payload", string(d.data)).Msg("dead-lettering failed on the last attempt; removing the request without a DLQ copy")
				continue
			}
			log.Warn().Err(err).Str("outcome", out.Kind.String()).Msg("publishing the outcome failed; handing the message back")
			if out.Kind == pipeline.GaveUp && d.deliveries >= uint64(w.cfg.MaxDeliver) {
				w.nak(d, 0) // the max-deliveries advisory finishes the job (runAdvisories)
			} else {
				w.nak(d, w.backoff(d.deliveries))
			}
			return fmt.Errorf("%w: %w", errHandedBack, err)
		}
	}

	// Remembered (sent before the ack, not awaited): a redelivery after a lost ack finds it (settled.go);
	// should this write be lost too, the outbox recorded above still stops a second outcome.
	if state != "" {
		// Like the publishes: a job that finished as the drain timed out is still recorded.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.wcfg.PublishTimeout)
		err := w.done.rememberSoon(rctx, d.reqSeq, state)
		cancel()
		if err != nil {
			// The memory is a guard against a lost ack after the duplicate window, not a dependency:
			// the events are out, so settle anyway. Handing the message back would run it again and, on
			// its last delivery, let the max-deliveries path send a second, opposite answer.
			log.Warn().Err(err).Msg("recording the settlement failed; settling it anyway")
		}
	}
	switch out.Kind {
	case pipeline.Success, pipeline.Infected, pipeline.Route:
		// The events are out; should the ack be lost, a redelivery republishes them under the same
		// Nats-Msg-Ids and the streams drop the copies.
		if err := w.ack(ctx, d); err != nil {
			log.Warn().Err(err).Msg("ack not confirmed")
		}
	case pipeline.Failed, pipeline.GaveUp:
		w.term(ctx, d, termReason(out))
	}
	w.report(out, d, log)
	return nil
}

// termReason is the reason a Failed or GaveUp outcome's delivery is terminated with ("" for the rest,
// which are acked).
func termReason(out pipeline.Outcome) string {
	switch out.Kind {
	case pipeline.Failed:
		return out.Response.Error
	case pipeline.GaveUp:
		return "moved to DLQ: " + out.Reason
	}
	return ""
}

// settledState is what the settled-requests memory records for out: triage's route, or an end.
func settledState(d *delivery, out pipeline.Outcome) string {
	switch {
	case out.Kind != pipeline.Route:
		return settledFinal
	case d.lane == "":
		return settledRouted
	}
	return "" // a lane's re-route: the request is still on its way
}

// report logs and counts a settled outcome.
func (w *Worker) report(out pipeline.Outcome, d *delivery, log zerolog.Logger) {
	switch out.Kind {
	case pipeline.Success:
		log.Info().Int("variants", len(out.Response.Processed)).Msg("job succeeded")
		w.observe("success", out.MediaKind, d)
	case pipeline.Infected:
		log.Warn().Str("virus", out.Virus.VirusName).Str("action", out.Virus.ActionTaken).Msg("virus detected")
		w.observe("infected", out.MediaKind, d)
	case pipeline.Route:
		log.Debug().Str("to", string(out.MediaKind)).Str("mime", out.MIME).Msg("routed")
		w.observe("routed", out.MediaKind, d)
	case pipeline.Failed:
		var pe *contracts.ParseError
		if errors.As(out.Err, &pe) {
			log.Info().Str("error", out.Response.Error).Msg("request refused")
			w.observe("invalid", "", d)
			return
		}
		ev := log.Info().Str("error", out.Response.Error)
		if detail := pipeline.ErrorDetail(out.Err); detail != "" {
			ev = ev.Str("detail", detail) // ffmpeg's or libvips' words, kept out of the response
		}
		ev.Msg("job failed permanently")
		w.observe("failed", out.MediaKind, d)
	case pipeline.GaveUp:
		log.Error().Err(out.Err).Str("reason", out.Reason).Msg("job gave up; request moved to the dead-letter stream")
		w.observe("dead_lettered", out.MediaKind, d)
	}
}

// event is one message an outcome owes, with its deduplicating id.
type event struct {
	msg        *nats.Msg
	id         string
	deadLetter bool
}

// events lists what out owes, in order: the API is answered before the DLQ copy (which is for
// operators and must never hold up the answer), the virus event before the virus response.
func (w *Worker) events(d *delivery, out pipeline.Outcome) []event {
	subj := w.cfg.Subjects()
	var evs []event
	respond := func(suffix string) {
		if out.Response.MediaID != "" {
			m := jsonMsg(subj.Response, out.Response)
			m.Header.Set(HeaderOutcome, suffix)
			evs = append(evs, event{msg: m, id: w.responseID(d, suffix)})
		}
	}
	switch out.Kind {
	case pipeline.Success:
		respond(OutcomeSuccess)
	case pipeline.Failed:
		respond(OutcomeFailed)
	case pipeline.Infected:
		evs = append(evs, event{msg: jsonMsg(subj.Virus, out.Virus), id: w.responseID(d, "virus-event")})
		respond(OutcomeVirus)
	case pipeline.Route:
		m := nats.NewMsg(w.cfg.WorkSubject(out.MediaKind))
		m.Data = d.data
		copyHeaders(m.Header, d.header)
		m.Header.Set(HeaderRequestSeq, strconv.FormatUint(d.reqSeq, 10))
		m.Header.Set(HeaderPublishedAt, d.published.UTC().Format(time.RFC3339Nano))
		evs = append(evs, event{msg: m, id: w.routeID(d, out.MediaKind)})
	case pipeline.GaveUp:
		respond(OutcomeGaveUp)
		m, id := w.deadLetterMsg(d, out.Reason, out.Err)
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
func (w *Worker) routeID(d *delivery, lane pipeline.MediaKind) string {
	key := fmt.Sprintf("%s/%d/%s/%d", w.cfg.RequestsStream(), d.reqSeq, lane, d.published.UnixNano())
	sum := sha256.Sum256([]byte(key))
	return fmt.Sprintf("route/%s/%d/%s/%x", w.cfg.RequestsStream(), d.reqSeq, lane, sum[:8])
}

// responseID is unique per request (its stream sequence) and outcome: redeliveries share it, and so do
// triage and the lanes.
func (w *Worker) responseID(d *delivery, outcome string) string {
	return fmt.Sprintf("%s/%d/%s", d.req.MediaID, d.reqSeq, outcome)
}

func jsonMsg(subject string, v any) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Data, _ = json.Marshal(v) // our own event types: they always encode
	return m
}

// publishAttempts is how often an outcome's publish is tried before the message is handed back. The
// work is done by then (and an infected upload already deleted), so retrying here beats redoing it.
const publishAttempts = 3

// publish sends m with a publish ack and a Nats-Msg-Id, so a redelivered job's second copy is dropped by
// the stream's duplicate window. It retries a failed publish in place.
func (w *Worker) publish(ctx context.Context, m *nats.Msg, msgID string) error {
	for attempt := 1; ; attempt++ {
		err := w.publishOnce(ctx, m, msgID)
		if err == nil || attempt == publishAttempts || isLaneFull(err) { // a full lane stays full for a while
			return err
		}
		sleepCtx(context.WithoutCancel(ctx), time.Duration(attempt)*time.Second)
	}
}

func (w *Worker) publishOnce(ctx context.Context, m *nats.Msg, msgID string) error {
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.wcfg.PublishTimeout)
	defer cancel()
	pctx, span := tracing.Tracer().Start(pctx, "publish "+m.Subject, trace.WithSpanKind(trace.SpanKindProducer))
	defer span.End()
	tracing.Inject(pctx, m.Header) // the API's consumer (or the lane) continues the trace
	start := time.Now()
	if _, err := w.js.PublishMsg(pctx, m, jetstream.WithMsgID(msgID)); err != nil {
		span.SetStatus(codes.Error, err.Error())
		w.publishFailed(m.Subject)
		return fmt.Errorf("publishing to %s: %w", m.Subject, err)
	}
	if w.obs != nil {
		w.obs.Published(m.Subject, time.Since(start))
	}
	return nil
}

// ack acknowledges and waits for the server to confirm it. On the advisory path the message is
// removed from the work queue instead (its consumer gave up on it).
func (w *Worker) ack(ctx context.Context, d *delivery) error {
	if d.msg == nil {
		return w.remove(ctx, d)
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.wcfg.PublishTimeout)
	defer cancel()
	return d.msg.DoubleAck(actx)
}

func (w *Worker) term(ctx context.Context, d *delivery, reason string) {
	if d.msg == nil {
		if err := w.remove(ctx, d); err != nil {
			w.log.Warn().Err(err).Uint64("seq", d.seq).Msg("removing a settled message failed")
		}
		return
	}
	_ = d.msg.TermWithReason(clipReason(reason))
}

func (w *Worker) nak(d *delivery, delay time.Duration) {
	if d.msg == nil {
		return // the advisory is retried instead
	}
	if delay <= 0 {
		_ = d.msg.Nak()
		return
	}
	_ = d.msg.NakWithDelay(delay)
}

// remove deletes a message its consumer gave up on from the work queue (at MaxDeliver it would
// otherwise stay there for ever).
func (w *Worker) remove(ctx context.Context, d *delivery) error {
	s, err := w.js.Stream(ctx, w.cfg.RequestsStream())
	if err != nil {
		return fmt.Errorf("opening the requests stream: %w", err)
	}
	if err := s.DeleteMsg(ctx, d.seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return fmt.Errorf("removing message %d from the work queue: %w", d.seq, err)
	}
	return nil
}

func (w *Worker) observe(outcome string, kind pipeline.MediaKind, d *delivery) {
	if w.obs != nil {
		w.obs.Settled(outcome, kind, d.deliveries)
	}
}

func (w *Worker) publishFailed(subject string) {
	if w.obs != nil {
		w.obs.PublishFailed(subject)
	}
}
