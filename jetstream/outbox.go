package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// The outbox: a settlement that ends a request records what it is about to publish in the settled-
// requests memory before its first publish, and "final" after its last. A worker that dies in between
// (after publishing, before recording the end) leaves the outbox behind. Without it the next delivery,
// pulled perhaps only after a long outage and so past the streams' duplicate window, would run the job
// again and store a second outcome. With it, the next delivery finishes the settlement instead: it
// publishes only what the streams do not hold yet, records the end and acks.

// settledPublishing is the state of a request whose outbox is recorded and whose end is not.
const settledPublishing = "publishing"

// outbox is what an ending settlement owes, as recorded before its first publish.
type outbox struct {
	At     time.Time     `json:"at"` // when it was recorded: the owed events are stored after it
	Events []outboxEvent `json:"events"`
	Term   string        `json:"term,omitempty"` // the delivery ends in Term with this reason; "" is Ack
}

type outboxEvent struct {
	Subject string      `json:"subject"`
	Header  nats.Header `json:"header,omitempty"`
	Data    []byte      `json:"data"`
	ID      string      `json:"id"` // its Nats-Msg-Id
}

func newOutbox(evs []event, term string, now time.Time) outbox {
	ob := outbox{At: now.UTC(), Term: term}
	for _, e := range evs {
		ob.Events = append(ob.Events, outboxEvent{Subject: e.msg.Subject, Header: e.msg.Header, Data: e.msg.Data, ID: e.id})
	}
	return ob
}

func (e outboxEvent) msg() *nats.Msg {
	m := nats.NewMsg(e.Subject)
	for k, v := range e.Header {
		m.Header[k] = append([]string(nil), v...)
	}
	m.Data = e.Data
	return m
}

// Bounds of the search for an owed event in its stream: the worker's clock may be behind the server's,
// and a stream that holds a great many messages after the outbox is searched for a while, not for ever.
const (
	outboxClockSlack = time.Minute
	outboxSearchTime = 30 * time.Second
)

// finish completes a settlement that an earlier delivery began and did not end: the events it owed
// that their streams do not hold yet, then the end it recorded.
func (s *settler) finish(ctx context.Context, d *delivery, ob *outbox, log zerolog.Logger) error {
	p := plan{remember: settledFinal, then: actAck, failDelay: s.wcfg.backoff(d.deliveries)}
	if ob.Term != "" {
		p.then, p.reason = actTerm, ob.Term
	}
	for _, ev := range ob.Events {
		stored, err := s.stored(ctx, ev, ob.At)
		if err != nil {
			return err
		}
		if !stored {
			log.Info().Str("subject", ev.Subject).Str("id", ev.ID).Msg("publishing an event an interrupted settlement owed")
			p.events = append(p.events, event{msg: ev.msg(), id: ev.ID})
		}
	}
	return s.apply(ctx, d, p, log)
}

// stored says whether ev's stream holds it: a message on its subject with its Nats-Msg-Id, stored after
// the outbox was recorded. The streams' duplicate window cannot tell once it has passed, so the stream
// is read, headers only, from then on.
func (s *settler) stored(ctx context.Context, ev outboxEvent, since time.Time) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, outboxSearchTime)
	defer cancel()
	name := s.cfg.streamOf(ev.Subject)
	stream, err := s.js.Stream(ctx, name)
	if err != nil {
		return false, fmt.Errorf("opening stream %s: %w", name, err)
	}
	from := since.Add(-outboxClockSlack)
	last := stream.CachedInfo().State
	if last.Msgs == 0 || last.LastTime.Before(from) {
		return false, nil
	}
	c, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{ev.Subject},
		DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &from, HeadersOnly: true,
		// nats.go re-creates a failed ordered consumer inside Next, by default until it succeeds and
		// deaf to ctx: bounded, a stream deleted or a server gone mid-search ends the search.
		MaxResetAttempts: 4})
	if err != nil {
		return false, fmt.Errorf("reading stream %s: %w", name, err)
	}
	it, err := c.Messages()
	if err != nil {
		return false, fmt.Errorf("reading stream %s: %w", name, err)
	}
	defer it.Stop()
	if ci := c.CachedInfo(); ci != nil && ci.NumPending == 0 {
		return false, nil // nothing on its subject since the outbox
	}
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
			return false, fmt.Errorf("searching stream %s for %s: not done in %s", name, ev.ID, outboxSearchTime)
		}
		if err != nil {
			return false, fmt.Errorf("reading stream %s: %w", name, err)
		}
		if m.Headers().Get(jetstream.MsgIDHeader) == ev.ID {
			return true, nil
		}
		meta, err := m.Metadata()
		if err != nil {
			return false, fmt.Errorf("reading stream %s: %w", name, err)
		}
		if meta.NumPending == 0 || meta.Sequence.Stream >= last.LastSeq {
			return false, nil // read up to the last message there was when the search began
		}
	}
}

// recordOutbox records what an ending settlement is about to publish. Like the final record, it is a
// guard, not a dependency: when it cannot be written, the settlement goes on without it.
func (s *settler) recordOutbox(ctx context.Context, d *delivery, ob outbox, log zerolog.Logger) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.wcfg.PublishTimeout)
	defer cancel()
	if err := s.done.rememberOutbox(rctx, d.reqSeq, ob); err != nil {
		log.Warn().Err(err).Msg("recording the outcome before publishing it failed; publishing it anyway")
	}
}

func encodeOutbox(ob outbox) []byte {
	b, _ := json.Marshal(ob) // strings, bytes and a time: always encodes
	return b
}
