package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/job"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// The safety net for a delivery that died with its worker. A worker settles the last allowed delivery
// itself (DLQ + failure response + Term), but if it crashes during that delivery nobody does: the
// message stays in the work queue forever and the server only emits a MAX_DELIVERIES advisory, to
// nobody unless a stream captures it. Provision creates that stream before any failure can happen; the
// worker consumes it and finishes the job the dead worker could not.

// AdvisoryCapture is the advisory capture as Config lays it out: the stream that keeps our consumers'
// max-deliveries advisories, and the durable every instance shares on it.
type AdvisoryCapture struct{ c Config }

// AdvisoryCapture is c's advisory capture.
func (c Config) AdvisoryCapture() AdvisoryCapture { return AdvisoryCapture{c} }

// Stream is the stream capturing max-deliveries advisories of our consumers.
func (a AdvisoryCapture) Stream() string { return a.c.streamPrefix() + "_MEDIA_ADVISORIES" }

// Subjects are the advisories the server sends when a message of the requests stream reached
// MaxDeliver on one of our consumers (triage or a lane); an operator's own consumers are not ours.
func (a AdvisoryCapture) Subjects() []string {
	subjects := []string{a.subject(a.c.Durable)}
	for _, k := range Lanes {
		subjects = append(subjects, a.subject(a.c.Lane(k).Durable()))
	}
	return subjects
}

func (a AdvisoryCapture) subject(durable string) string {
	return fmt.Sprintf("$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.%s.%s", a.c.RequestsStream(), durable)
}

func (a AdvisoryCapture) durable() string { return a.c.Durable + "-advisories" }

func (a AdvisoryCapture) streamConfig() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        a.Stream(),
		Description: "max-deliveries advisories of the mediaworker consumer (requests whose worker died on the last delivery)",
		Subjects:    a.Subjects(),
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    a.c.Replicas,
		MaxAge:      a.c.DLQMaxAge,
		MaxMsgs:     -1,
	}
}

// ConsumerConfig is the durable every instance shares on the advisory stream.
func (a AdvisoryCapture) ConsumerConfig() jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       a.durable(),
		Description:   "mediaworker instances move requests that exhausted their deliveries to the DLQ",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       30 * time.Second,
		MaxDeliver:    advisoryAttempts + 1, // the handler gives up at advisoryAttempts itself
		MaxAckPending: 16,
		Replicas:      a.c.Replicas,
	}
}

// maxDeliveriesAdvisory is the part of io.nats.jetstream.advisory.v1.max_deliver we use.
type maxDeliveriesAdvisory struct {
	Stream     string `json:"stream"`
	Consumer   string `json:"consumer"`
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries uint64 `json:"deliveries"`
}

// advisories finish the requests whose worker died on their last delivery, from the max-deliveries
// advisories captured in the advisory stream.
type advisories struct {
	s       *settler
	backlog *backlog
	wait    time.Duration // WorkerConfig.PullWait
	log     zerolog.Logger
}

// run handles advisories until ctx ends. Every instance runs it; the shared durable
// hands each advisory to one of them.
func (a *advisories) run(ctx context.Context) {
	capture := a.s.cfg.AdvisoryCapture()
	cons, err := a.s.js.Consumer(ctx, capture.Stream(), capture.durable())
	if err != nil {
		a.log.Warn().Err(err).Msg("no max-deliveries advisory consumer (provision the streams at start, or run `mediaworker streams apply`); requests whose worker died on their last delivery will stay in the work queue")
		return
	}
	for ctx.Err() == nil {
		msg, err := nextMsg(ctx, cons, a.wait)
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) {
				a.log.Warn().Err(err).Msg("pulling an advisory failed; retrying")
				sleepCtx(ctx, time.Second)
			}
			continue
		}
		last, attempt := false, uint64(1)
		if meta, err := msg.Metadata(); err == nil {
			attempt = meta.NumDelivered
			last = attempt >= advisoryAttempts
		}
		if err := a.handle(ctx, msg, last); err != nil {
			if last {
				a.log.Error().Err(err).Str("advisory", string(msg.Data())).Msg("handling a max-deliveries advisory failed on its last attempt; dropping it")
				settleMsg(msg, actTerm, 0)
				continue
			}
			// The jobs' own backoff: ten attempts span the same ≥ 10 minutes an outage may last.
			delay := a.s.wcfg.backoff(attempt)
			a.log.Warn().Err(err).Dur("retry_in", delay).Msg("handling a max-deliveries advisory failed; will retry")
			settleMsg(msg, actNak, delay)
			continue
		}
		settleMsg(msg, actAck, 0)
	}
}

// advisoryAttempts bounds the handling of one advisory: a request that cannot be answered or copied
// after this many tries is logged and dropped, never retried without end.
const advisoryAttempts = 10

// handle gives up on the message the advisory names, through the same settlement as the retry
// path: the API is answered, the request copied to the DLQ, the message removed from the work queue.
// On the last attempt a failing DLQ copy is logged and skipped, so the message does not stay for ever.
func (a *advisories) handle(ctx context.Context, msg jetstream.Msg, last bool) error {
	var adv maxDeliveriesAdvisory
	if err := json.Unmarshal(msg.Data(), &adv); err != nil || adv.StreamSeq == 0 {
		a.log.Warn().Str("advisory", string(msg.Data())).Msg("ignoring an advisory without a stream sequence")
		return nil
	}
	// A plain request has no deadline of its own (the JetStream calls add one): an unanswered one
	// during a leader election must not stall this loop until shutdown.
	gctx, cancel := context.WithTimeout(ctx, a.s.wcfg.PublishTimeout)
	orig, err := LeaderGetMsg(gctx, a.s.js.Conn(), a.s.cfg.RequestsStream(), adv.StreamSeq)
	cancel()
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil // settled after all (or already moved by another instance)
	}
	if err != nil {
		return fmt.Errorf("fetching message %d: %w", adv.StreamSeq, err)
	}
	// The rescue (rescue.go) may have found the same message: one of the two settles it, by the same
	// claim. One under way elsewhere makes this attempt wait (the advisory is retried, and finds the
	// message gone once the rescue removed it); a rescue that stored its copy leaves only the removal.
	claim, err := a.s.claims.claim(ctx, adv.StreamSeq)
	if err != nil {
		return err
	}
	if claim == "" {
		return fmt.Errorf("a rescue of message %d is under way", adv.StreamSeq)
	}
	d := storedDelivery(a.s.cfg.laneOf(orig.Subject), orig.Data, orig.Header, adv.StreamSeq, orig.Time, adv.Deliveries, nil)
	if claim == claimRequeued {
		return a.s.apply(ctx, d, plan{then: actRemove}, a.log)
	}
	d.lastChance = last
	req, perr := contracts.ParseRequest(orig.Data)
	if perr == nil || contracts.Correlatable(perr) {
		d.req = req
	}
	// Its last delivery may have settled it and only the ack got lost: then it is answered (or routed)
	// already, and giving up now would send a second, opposite answer. Remove it and stop.
	state, ob, err := a.s.done.recall(ctx, d.reqSeq)
	if err != nil {
		return fmt.Errorf("reading the settled-requests memory for %d: %w", d.reqSeq, err)
	}
	if state == settledPublishing {
		a.log.Info().Uint64("seq", d.reqSeq).Msg("max-deliveries advisory for a request whose settlement was interrupted; finishing it")
		return a.s.finish(ctx, d, ob, a.log.With().Uint64("seq", d.reqSeq).Logger())
	}
	if state == settledFinal || d.lane == job.Triage && state == settledRouted {
		a.log.Info().Uint64("seq", d.reqSeq).Str("settled", state).Msg("max-deliveries advisory for a request settled already; removing it")
		return a.s.apply(ctx, d, plan{then: actRemove}, a.log)
	}
	// Triage may have routed it and died before recording "routed": its lane copy is on its way, and
	// giving up here would answer the request twice (the rescue asks the same).
	if moved, err := a.backlog.movedOn(ctx, d); err != nil {
		return err
	} else if moved {
		a.log.Info().Uint64("seq", d.reqSeq).Msg("max-deliveries advisory for a request whose copy is on its way; removing it")
		return a.s.apply(ctx, d, plan{then: actRemove}, a.log)
	}
	cause := fmt.Errorf("the worker handling delivery %d of %d stopped answering (crashed or cut off)", adv.Deliveries, a.s.cfg.MaxDeliver)
	log := a.log.With().Str("lane", laneName(d.lane)).Uint64("seq", d.reqSeq).Str("mediaId", d.req.MediaID).Logger()
	return a.s.settle(ctx, d, a.s.rules.gaveUpAfter(d.req, d.lane, adv.Deliveries, cause), facts{}, log)
}

// LeaderGetMsg fetches a message by sequence from the stream's leader; a removed one is
// jetstream.ErrMsgNotFound. Stream.GetMsg would use a direct get (our streams allow them, for
// `nats stream view`), which any replica may answer:
// a follower that has not yet applied the leader's delete of a settled request would hand back a
// message that is already done, and the advisory path would dead-letter it and publish a second
// outcome. The leader has applied every ack.
func LeaderGetMsg(ctx context.Context, nc *nats.Conn, stream string, seq uint64) (*jetstream.RawStreamMsg, error) {
	req, _ := json.Marshal(struct {
		Seq uint64 `json:"seq"`
	}{seq})
	reply, err := nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+stream, req)
	if err != nil {
		return nil, err
	}
	var resp struct {
		Error *struct {
			Code        int    `json:"code"`
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
		Message *struct {
			Subject string    `json:"subject"`
			Seq     uint64    `json:"seq"`
			Header  []byte    `json:"hdrs"`
			Data    []byte    `json:"data"`
			Time    time.Time `json:"time"`
		} `json:"message"`
	}
	if err := json.Unmarshal(reply.Data, &resp); err != nil {
		return nil, fmt.Errorf("decoding the stream's reply: %w", err)
	}
	if resp.Error != nil {
		if resp.Error.ErrCode == int(jetstream.JSErrCodeMessageNotFound) {
			return nil, jetstream.ErrMsgNotFound
		}
		return nil, fmt.Errorf("getting message %d: %s (%d)", seq, resp.Error.Description, resp.Error.ErrCode)
	}
	if resp.Message == nil {
		return nil, errors.New("getting message: empty reply")
	}
	m := &jetstream.RawStreamMsg{Subject: resp.Message.Subject, Sequence: resp.Message.Seq,
		Data: resp.Message.Data, Time: resp.Message.Time}
	if len(resp.Message.Header) > 0 {
		if m.Header, err = nats.DecodeHeadersMsg(resp.Message.Header); err != nil {
			return nil, fmt.Errorf("decoding message headers: %w", err)
		}
	}
	return m, nil
}
