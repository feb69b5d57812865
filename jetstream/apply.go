package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/mediaworker/mediaworker/job"
	"github.com/mediaworker/mediaworker/tracing"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Settlement as a value. Every way a message of ours can end is first a plan — what to record, what to
// publish, what to remember, and how to settle the message — computed by decide (an outcome's, pure),
// finish (an interrupted settlement's), settledBefore (a late duplicate's), the advisory path and the
// rescue; then apply carries it out. apply, and the few functions below it in this file, are the only
// code of the package that acks, naks, terms, sends InProgress or publishes (internal/archtest holds
// it; client.go, the API's side, publishes requests): reading this file is reading every side effect a
// message can have.

// action is how a plan settles its message.
type action int

const (
	actNone   action = iota
	actAck           // done: acked (a message without a delivery, from the advisory or rescue path, is removed instead)
	actTerm          // done for good: terminated with plan.reason (likewise removed without a delivery)
	actNak           // handed back for another delivery after plan.delay (without a delivery: nothing, the caller retries)
	actRemove        // deleted from the work queue: a message its consumer will not deliver again
)

// plan is one settlement, as a value.
type plan struct {
	// hold first waits while a dependency is down (settler.hold), so an outage costs the request
	// one delivery however long it lasts.
	hold bool
	// outbox is recorded before the first publish: a worker that dies between the publishes and the
	// end leaves what the next delivery needs to finish without running again (outbox.go).
	outbox *outbox
	// events are published in order, each under its Nats-Msg-Id.
	events []event
	// remember is the settled-requests memory's new state for the request after the publishes ("": none).
	remember string
	// requeued records a rescue's claim as done with its copy (rescue.go), after the publishes.
	requeued bool
	then     action
	delay    time.Duration // actNak
	reason   string        // actTerm
	// failDelay is the hand-back's delay when a publish fails: the events are owed, so the message
	// comes back to publish them.
	failDelay time.Duration
	// shrunk: decide replaced an answer too large to publish with a short failure (oversize.go).
	shrunk bool
}

// errLaneFull says a route's lane refused its copy (Config.MaxQueued): nothing was settled, and
// settle decides again knowing it (facts.laneFull).
var errLaneFull = errors.New("the lane is full")

// apply carries out p for d, and decides nothing: it publishes the plan's events, then settles the
// message as the plan says. A publish that fails hands the message back (errHandedBack), or, without
// a delivery to hand back, returns the error so the advisory or the rescue is tried again. A route its
// lane's cap refused is reported (errLaneFull) for settle to decide again.
func (s *settler) apply(ctx context.Context, d *delivery, p plan, log zerolog.Logger) error {
	if p.hold {
		s.hold(ctx, d, log)
	}
	if p.outbox != nil {
		s.recordOutbox(ctx, d, *p.outbox, log)
	}
	for _, ev := range p.events {
		err := s.publish(ctx, ev.msg, ev.id)
		if isLaneFull(err) && ev.lane != job.Triage {
			return fmt.Errorf("%w: %w", errLaneFull, err)
		}
		if err != nil && ev.deadLetter && d.lastChance {
			log.Error().Err(err).Str("payload", string(d.data)).Msg("dead-lettering failed on the last attempt; removing the request without a DLQ copy")
		} else if err != nil {
			log.Warn().Err(err).Str("subject", ev.msg.Subject).Msg("publishing the outcome failed; handing the message back")
			s.nak(d, p.failDelay)
			return fmt.Errorf("%w: %w", errHandedBack, err)
		}
	}
	if p.remember != "" {
		s.rememberEnd(ctx, d, p.remember, log)
	}
	if p.requeued {
		if err := s.claims.markRequeued(ctx, d.seq); err != nil {
			return err
		}
	}
	return s.end(ctx, d, p, log)
}

// end settles the message as p says, once its events are out.
func (s *settler) end(ctx context.Context, d *delivery, p plan, log zerolog.Logger) error {
	switch p.then {
	case actAck:
		// The events are out; should the ack be lost, a redelivery republishes them under the same
		// Nats-Msg-Ids and the streams drop the copies.
		if err := s.ack(ctx, d); err != nil {
			if d.msg == nil {
				return err
			}
			log.Warn().Err(err).Msg("ack not confirmed")
		}
	case actTerm:
		if d.msg == nil {
			return s.remove(ctx, d)
		}
		_ = d.msg.TermWithReason(clipReason(p.reason))
	case actNak:
		s.nak(d, p.delay)
	case actRemove:
		return s.remove(ctx, d)
	}
	return nil
}

// rememberEnd records the request's end (sent before the ack, not awaited) where no outbox was
// recorded: a redelivery after a lost ack finds it (settled.go).
func (s *settler) rememberEnd(ctx context.Context, d *delivery, state string, log zerolog.Logger) {
	failed := func() { s.tally.publishFailed("$KV." + s.cfg.Buckets().Settled()) } // mediaworker_publish_failures_total
	// Like the publishes: a job that finished as the drain timed out is still recorded.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.wcfg.PublishTimeout)
	err := s.done.rememberSoon(rctx, d.reqSeq, state, s.wcfg.PublishTimeout, failed)
	cancel()
	if err != nil {
		// The memory is a guard against a lost ack after the duplicate window, not a dependency:
		// the events are out, so settle anyway. Handing the message back would run it again and, on
		// its last delivery, let the max-deliveries path send a second, opposite answer.
		failed()
		log.Warn().Err(err).Msg("recording the settlement failed; settling it anyway")
	}
}

// hold holds a failed delivery while a dependency is down (plan.hold), so an outage costs the request
// one delivery however long it lasts.
func (s *settler) hold(ctx context.Context, d *delivery, log zerolog.Logger) {
	if s.wcfg.Admission == nil || d.msg == nil {
		return
	}
	log.Warn().Msg("a dependency is down; holding the request until it is back")
	_ = s.wcfg.Admission.Wait(ctx) // ends early only when the worker stops: then it is handed back too
}

// settleMsg settles a message that is not one of the requests stream's deliveries (a max-deliveries
// advisory) or has no delivery yet (one without JetStream metadata).
func settleMsg(msg jetstream.Msg, a action, delay time.Duration) {
	switch a {
	case actAck:
		_ = msg.Ack()
	case actTerm:
		_ = msg.Term()
	case actNak:
		_ = msg.NakWithDelay(delay)
	}
}

// publishAttempts is how often an outcome's publish is tried before the message is handed back. The
// work is done by then (and an infected upload already deleted), so retrying here beats redoing it.
const publishAttempts = 3

// publish sends m with a publish ack and a Nats-Msg-Id, so a redelivered job's second copy is dropped by
// the stream's duplicate window. It retries a failed publish in place.
func (s *settler) publish(ctx context.Context, m *nats.Msg, msgID string) error {
	for attempt := 1; ; attempt++ {
		err := s.publishOnce(ctx, m, msgID)
		if err == nil || attempt == publishAttempts || isLaneFull(err) { // a full lane stays full for a while
			return err
		}
		sleepCtx(context.WithoutCancel(ctx), time.Duration(attempt)*time.Second)
	}
}

func (s *settler) publishOnce(ctx context.Context, m *nats.Msg, msgID string) error {
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.wcfg.PublishTimeout)
	defer cancel()
	pctx, span := tracing.Tracer().Start(pctx, "publish "+m.Subject, trace.WithSpanKind(trace.SpanKindProducer))
	defer span.End()
	tracing.Inject(pctx, m.Header) // the API's consumer (or the lane) continues the trace
	start := time.Now()
	if _, err := s.js.PublishMsg(pctx, m, jetstream.WithMsgID(msgID)); err != nil {
		span.SetStatus(codes.Error, err.Error())
		s.tally.publishFailed(m.Subject)
		return fmt.Errorf("publishing to %s: %w", m.Subject, err)
	}
	s.tally.published(m.Subject, time.Since(start))
	return nil
}

// publishProgress sends a job's progress report: a plain NATS message, nobody has to be listening and
// nothing is stored.
func publishProgress(nc *nats.Conn, subject string, data []byte) {
	_ = nc.Publish(subject, data)
}

// ack acknowledges and waits for the server to confirm it. Without a delivery (the advisory and rescue
// paths) the message is removed from the work queue instead (its consumer gave up on it).
func (s *settler) ack(ctx context.Context, d *delivery) error {
	if d.msg == nil {
		return s.remove(ctx, d)
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.wcfg.PublishTimeout)
	defer cancel()
	return d.msg.DoubleAck(actx)
}

func (s *settler) nak(d *delivery, delay time.Duration) {
	if d.msg == nil {
		return // the advisory is retried instead
	}
	if delay <= 0 {
		_ = d.msg.Nak()
		return
	}
	_ = d.msg.NakWithDelay(delay)
}

// inProgress tells the server the delivery is still being worked on (keepAlive).
func inProgress(msg jetstream.Msg) { _ = msg.InProgress() }

// remove deletes a message its consumer gave up on from the work queue (at MaxDeliver it would
// otherwise stay there for ever).
func (s *settler) remove(ctx context.Context, d *delivery) error {
	stream, err := s.js.Stream(ctx, s.cfg.RequestsStream())
	if err != nil {
		return fmt.Errorf("opening the requests stream: %w", err)
	}
	if err := stream.DeleteMsg(ctx, d.seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return fmt.Errorf("removing message %d from the work queue: %w", d.seq, err)
	}
	return nil
}

// rememberSoon records a request's end without waiting for the server to store it: one fewer round
// trip (and fsync). apply uses it only where no outbox was recorded: an end that owes no event (a
// request without a mediaId to answer) and finish's, after an interrupted settlement, so a later
// duplicate is acked at once instead of searching the streams again (outbox.go). A write the server
// refuses or never confirms within wait is reported to failed (a metric), since nobody waits for it.
func (m *settledMemory) rememberSoon(ctx context.Context, reqSeq uint64, state string, wait time.Duration, failed func()) error {
	if _, err := m.bucket(ctx); err != nil {
		return err
	}
	subject := "$KV." + m.cfg.Buckets().Settled() + "." + strconv.FormatUint(reqSeq, 10)
	f, err := m.kv.js.PublishAsync(subject, []byte(state))
	if err != nil {
		return fmt.Errorf("recording settled request %d: %w", reqSeq, err)
	}
	go func() {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-f.Ok():
		case <-f.Err():
			failed()
		case <-t.C:
			failed()
		}
	}()
	return nil
}
