package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/mediaworker/mediaworker/contracts"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The safety net for a delivery that died with its worker. A worker settles the last allowed delivery
// itself (DLQ + failure response + Term), but if it crashes during that delivery nobody does: the
// message stays in the work queue forever and the server only emits a MAX_DELIVERIES advisory, to
// nobody unless a stream captures it. Provision creates that stream before any failure can happen; the
// worker consumes it and finishes the job the dead worker could not.

// AdvisoryStream is the stream capturing max-deliveries advisories of the shared consumer.
func (c Config) AdvisoryStream() string { return c.streamPrefix() + "_MEDIA_ADVISORIES" }

// AdvisorySubject is the advisory the server sends when a request reached MaxDeliver.
func (c Config) AdvisorySubject() string {
	return fmt.Sprintf("$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.%s.%s", c.RequestsStream(), c.Durable)
}

func (c Config) advisoryDurable() string { return c.Durable + "-advisories" }

func (c Config) advisoryStreamConfig() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        c.AdvisoryStream(),
		Description: "max-deliveries advisories of the mediaworker consumer (requests whose worker died on the last delivery)",
		Subjects:    []string{c.AdvisorySubject()},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    c.Replicas,
		MaxAge:      c.DLQMaxAge,
		MaxMsgs:     -1,
	}
}

// AdvisoryConsumerConfig is the durable every instance shares on the advisory stream.
func (c Config) AdvisoryConsumerConfig() jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       c.advisoryDurable(),
		Description:   "mediaworker instances move requests that exhausted their deliveries to the DLQ",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       30 * time.Second,
		MaxDeliver:    -1,
		MaxAckPending: 16,
		Replicas:      c.Replicas,
	}
}

// maxDeliveriesAdvisory is the part of io.nats.jetstream.advisory.v1.max_deliver we use.
type maxDeliveriesAdvisory struct {
	Stream     string `json:"stream"`
	Consumer   string `json:"consumer"`
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries uint64 `json:"deliveries"`
}

// runAdvisories handles advisories until ctx ends. Every instance runs it; the shared durable hands
// each advisory to one of them.
func (w *Worker) runAdvisories(ctx context.Context) {
	cons, err := w.js.Consumer(ctx, w.cfg.AdvisoryStream(), w.cfg.advisoryDurable())
	if err != nil {
		w.log.Warn().Err(err).Msg("no max-deliveries advisory consumer (run with --provision or `mediaworker streams apply`); requests whose worker died on their last delivery will stay in the work queue")
		return
	}
	for ctx.Err() == nil {
		msg, err := w.next(ctx, cons)
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) {
				w.log.Warn().Err(err).Msg("pulling an advisory failed; retrying")
				sleepCtx(ctx, time.Second)
			}
			continue
		}
		if err := w.handleAdvisory(ctx, msg); err != nil {
			w.log.Warn().Err(err).Msg("handling a max-deliveries advisory failed; will retry")
			_ = msg.NakWithDelay(w.wcfg.BackoffBase)
			continue
		}
		_ = msg.Ack()
	}
}

func (w *Worker) handleAdvisory(ctx context.Context, msg jetstream.Msg) error {
	var adv maxDeliveriesAdvisory
	if err := json.Unmarshal(msg.Data(), &adv); err != nil || adv.StreamSeq == 0 {
		w.log.Warn().Str("advisory", string(msg.Data())).Msg("ignoring an advisory without a stream sequence")
		return nil
	}
	reqs, err := w.js.Stream(ctx, w.cfg.RequestsStream())
	if err != nil {
		return fmt.Errorf("opening requests stream: %w", err)
	}
	orig, err := reqs.GetMsg(ctx, adv.StreamSeq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil // settled after all (or already moved by another instance)
	}
	if err != nil {
		return fmt.Errorf("fetching request %d: %w", adv.StreamSeq, err)
	}
	cause := fmt.Errorf("the worker handling delivery %d of %d stopped answering (crashed or cut off)", adv.Deliveries, w.cfg.MaxDeliver)
	o := origin{stream: w.cfg.RequestsStream(), seq: adv.StreamSeq, deliveries: adv.Deliveries, published: orig.Time}
	if err := w.deadLetterRaw(ctx, orig.Data, orig.Header, o, "max-deliveries", cause); err != nil {
		return err
	}
	log := w.log.With().Uint64("seq", adv.StreamSeq).Logger()
	if req, perr := contracts.ParseRequest(orig.Data); perr == nil || isCorrelatable(perr) {
		resp := contracts.Response{MediaID: req.MediaID, OriginalURL: req.MediaURL,
			Error: fmt.Sprintf("gave up after %d deliveries: %v", adv.Deliveries, cause)}
		id := fmt.Sprintf("%s/%d/%s", req.MediaID, adv.StreamSeq, "gave-up")
		if err := w.publish(ctx, w.cfg.Subjects().Response, resp, id); err != nil {
			return err
		}
		log = log.With().Str("mediaId", req.MediaID).Logger()
	}
	if err := reqs.DeleteMsg(ctx, adv.StreamSeq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return fmt.Errorf("removing request %d from the work queue: %w", adv.StreamSeq, err)
	}
	log.Error().Err(cause).Msg("request exhausted its deliveries; moved to the dead-letter stream")
	if w.obs != nil {
		w.obs.Settled("dead_lettered", "", adv.Deliveries)
	}
	return nil
}

func isCorrelatable(err error) bool {
	var pe *contracts.ParseError
	return errors.As(err, &pe) && pe.Correlatable
}
