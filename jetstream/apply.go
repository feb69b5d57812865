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
// publish, what to remember, and how to settle the message — computed by settle (an outcome's),
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
	// hold first waits while a dependency is down (holdThroughOutage), so an outage costs the request
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
}

// apply carries out p for d. A publish that fails hands the message back (errHandedBack), or, without
// a delivery to hand back, returns the error so the advisory or the rescue is tried again.
func (w *Worker) apply(ctx context.Context, d *delivery, p plan, log zerolog.Logger) error {
	if p.hold {
		w.holdThroughOutage(ctx, d, log)
	}
	if p.outbox != nil {
		w.recordOutbox(ctx, d, *p.outbox, log)
	}
	for _, ev := range p.events {
		err := w.publish(ctx, ev.msg, ev.id)
		if isLaneFull(err) && ev.lane != job.Triage {
			if err = w.laneFull(ctx, d, ev, log); errors.Is(err, errHandedBack) {
				return err
			}
		}
		if err != nil {
			if ev.deadLetter && d.lastChance {
				log.Error().Err(err).Str("payload", string(d.data)).Msg("dead-lettering failed on the last attempt; removing the request without a DLQ copy")
				continue
			}
			log.Warn().Err(err).Str("subject", ev.msg.Subject).Msg("publishing the outcome failed; handing the message back")
			w.nak(d, p.failDelay)
			return fmt.Errorf("%w: %w", errHandedBack, err)
		}
	}
	// Remembered (sent before the ack, not awaited) where no outbox was recorded: a redelivery after a
	// lost ack finds it (settled.go).
	if p.remember != "" {
		// Like the publishes: a job that finished as the drain timed out is still recorded.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.wcfg.PublishTimeout)
		err := w.done.rememberSoon(rctx, d.reqSeq, p.remember, w.wcfg.PublishTimeout, w.rememberFailed)
		cancel()
		if err != nil {
			// The memory is a guard against a lost ack after the duplicate window, not a dependency:
			// the events are out, so settle anyway. Handing the message back would run it again and, on
			// its last delivery, let the max-deliveries path send a second, opposite answer.
			w.rememberFailed()
			log.Warn().Err(err).Msg("recording the settlement failed; settling it anyway")
		}
	}
	if p.requeued {
		if err := w.markRequeued(ctx, d.seq); err != nil {
			return err
		}
	}
	switch p.then {
	case actAck:
		// The events are out; should the ack be lost, a redelivery republishes them under the same
		// Nats-Msg-Ids and the streams drop the copies.
		if err := w.ack(ctx, d); err != nil {
			if d.msg == nil {
				return err
			}
			log.Warn().Err(err).Msg("ack not confirmed")
		}
	case actTerm:
		if d.msg == nil {
			return w.remove(ctx, d)
		}
		_ = d.msg.TermWithReason(clipReason(p.reason))
	case actNak:
		w.nak(d, p.delay)
	case actRemove:
		return w.remove(ctx, d)
	}
	return nil
}

// laneFull handles a route that its lane's --max-queued cap refused. While deliveries remain, the
// request goes back with a backoff, so that requests for other lanes are routed meanwhile. On its last
// delivery it is neither held (a held request would keep a triage slot for as long as the lane stays
// full, and triage serves every lane) nor dead-lettered (a full lane is load, not a fault): its copy
// goes into the lane past the cap, on a subject of its own (overflowSubject), which the lane's consumer
// also reads. So a lane's backlog can exceed --max-queued by the requests that reached their last
// delivery while it was full: under overload that lasts longer than a request's deliveries (at the
// default backoff, over ten minutes) the lane's backlog grows with what keeps arriving, while the
// request subject's cap still answers the API's excess publishes with a refusal.
func (w *Worker) laneFull(ctx context.Context, d *delivery, ev event, log zerolog.Logger) error {
	if d.msg != nil && d.deliveries < uint64(w.cfg.MaxDeliver) {
		delay := w.backoff(d.deliveries)
		log.Warn().Str("subject", ev.msg.Subject).Dur("retry_in", delay).Msg("the lane is full (Config.MaxQueued); handing the request back")
		w.nak(d, delay)
		w.observe("retry", "", d)
		return errHandedBack
	}
	m := nats.NewMsg(w.cfg.overflowSubject(ev.lane, d.reqSeq))
	m.Header, m.Data = ev.msg.Header, ev.msg.Data
	log.Warn().Str("subject", m.Subject).Msg("the lane is full (Config.MaxQueued) on the request's last delivery; routing it past the cap")
	return w.publish(ctx, m, ev.id) // the same id: a second route of the request is still dropped
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

// publishProgress sends a job's progress report: a plain NATS message, nobody has to be listening and
// nothing is stored.
func (w *Worker) publishProgress(subject string, data []byte) {
	_ = w.js.Conn().Publish(subject, data)
}

// ack acknowledges and waits for the server to confirm it. Without a delivery (the advisory and rescue
// paths) the message is removed from the work queue instead (its consumer gave up on it).
func (w *Worker) ack(ctx context.Context, d *delivery) error {
	if d.msg == nil {
		return w.remove(ctx, d)
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.wcfg.PublishTimeout)
	defer cancel()
	return d.msg.DoubleAck(actx)
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

// inProgress tells the server the delivery is still being worked on (keepAlive).
func inProgress(msg jetstream.Msg) { _ = msg.InProgress() }

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

// rememberSoon records a request's end without waiting for the server to store it: one fewer round
// trip (and fsync). apply uses it only where no outbox was recorded: an end that owes no event (a
// request without a mediaId to answer) and finish's, after an interrupted settlement, so a later
// duplicate is acked at once instead of searching the streams again (outbox.go). A write the server
// refuses or never confirms within wait is reported to failed (a metric), since nobody waits for it.
func (m *settledMemory) rememberSoon(ctx context.Context, reqSeq uint64, state string, wait time.Duration, failed func()) error {
	if _, err := m.bucket(ctx); err != nil {
		return err
	}
	subject := "$KV." + m.cfg.SettledBucket() + "." + strconv.FormatUint(reqSeq, 10)
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

// rememberFailed counts a settled-requests record that was lost, as a failed publish to its bucket
// (mediaworker_publish_failures_total{subject="$KV.<APP>_MEDIA_SETTLED"}).
func (w *Worker) rememberFailed() { w.publishFailed("$KV." + w.cfg.SettledBucket()) }
