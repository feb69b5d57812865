package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/mediaworker/mediaworker/job"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// backlog reads what the streams hold about our messages, never changing it: the stranded messages a
// consumer will not deliver again, the sequences advisories name, a request's later copies.
type backlog struct {
	js  jetstream.JetStream
	cfg Config
	log zerolog.Logger
}

// findStranded lists the stored messages that triage's or a lane's consumer will not deliver again.
func (b *backlog) findStranded(ctx context.Context) ([]stranded, error) {
	stream, err := b.js.Stream(ctx, b.cfg.RequestsStream())
	if err != nil {
		return nil, fmt.Errorf("opening the requests stream: %w", err)
	}
	var out []stranded
	for _, lane := range append([]job.Kind{job.Triage}, Lanes...) {
		durable, subjects := b.cfg.Durable, []string{b.cfg.Subjects().Request}
		if lane != job.Triage {
			ln := b.cfg.Lane(lane)
			durable, subjects = ln.Durable(), ln.subjects()
		}
		cons, err := stream.Consumer(ctx, durable)
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			continue // not provisioned: nothing delivered, nothing stranded
		}
		if err != nil {
			return nil, fmt.Errorf("looking up consumer %s: %w", durable, err)
		}
		info, err := cons.Info(ctx)
		if err != nil {
			return nil, fmt.Errorf("reading consumer %s: %w", durable, err)
		}
		limit := info.AckFloor.Stream
		if info.NumAckPending == 0 {
			limit = info.Delivered.Stream
		}
		for _, subject := range subjects {
			err = scanSubject(ctx, stream, subject, 1, func(m *jetstream.RawStreamMsg) bool {
				if m.Sequence > limit {
					return false
				}
				out = append(out, stranded{lane: lane, seq: m.Sequence})
				return true
			})
			if err != nil && !errors.Is(err, errScanLimit) { // the first so many now, the rest once they are gone
				return nil, err
			}
		}
	}
	return out, nil
}

// errScanLimit says a scan read rescueScanLimit messages without reaching its end.
var errScanLimit = errors.New("too many messages to read in one go")

// scanSubject calls fn for the stored messages on subject from sequence from on, in order, until fn
// returns false, the subject has no more, or rescueScanLimit were read (errScanLimit).
func scanSubject(ctx context.Context, stream jetstream.Stream, subject string, from uint64, fn func(*jetstream.RawStreamMsg) bool) error {
	for range rescueScanLimit {
		m, err := stream.GetMsg(ctx, from, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading %s from %d: %w", subject, from, err)
		}
		if !fn(m) {
			return nil
		}
		from = m.Sequence + 1
	}
	return fmt.Errorf("reading %s: %w", subject, errScanLimit)
}

// advisedSeqs are the requests-stream sequences that max-deliveries advisories waiting in
// APP_MEDIA_ADVISORIES name: the advisory path owns them. A failure to read says nothing is owned;
// the paths end in the same single outcome anyway (settled-requests memory, Nats-Msg-Id).
func (b *backlog) advisedSeqs(ctx context.Context) map[uint64]bool {
	owned := map[uint64]bool{}
	stream, err := b.js.Stream(ctx, b.cfg.AdvisoryCapture().Stream())
	if err != nil {
		return owned
	}
	_ = scanSubject(ctx, stream, ">", 1, func(m *jetstream.RawStreamMsg) bool {
		var adv maxDeliveriesAdvisory
		if json.Unmarshal(m.Data, &adv) == nil && adv.Stream == b.cfg.RequestsStream() {
			owned[adv.StreamSeq] = true
		}
		return true
	})
	return owned
}

// movedOn reports whether a later copy of d's request is stored in a lane: triage routed it (its
// lane copy, or its copy past a full lane's cap, is on its way), a lane re-routed it to the other lane,
// or an earlier rescue stored its copy. Then d is done with and answering it would answer the request
// twice. Only lane subjects are read, whose messages only the worker writes: what a request on the
// request subject carries says nothing (the API chooses it). A backlog too long to read in one go is
// taken as no copy, as before this check existed (the settled-requests memory still guards).
func (b *backlog) movedOn(ctx context.Context, d *delivery) (bool, error) {
	stream, err := b.js.Stream(ctx, b.cfg.RequestsStream())
	if err != nil {
		return false, fmt.Errorf("opening the requests stream: %w", err)
	}
	want := strconv.FormatUint(d.reqSeq, 10)
	for _, k := range Lanes {
		ln := b.cfg.Lane(k)
		// Its copy past a full lane's cap: an exact subject.
		_, err := stream.GetMsg(ctx, d.seq+1, jetstream.WithGetMsgSubject(ln.overflowSubject(d.reqSeq)))
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, jetstream.ErrMsgNotFound) {
			return false, fmt.Errorf("looking for a later copy of request %d: %w", d.reqSeq, err)
		}
		for _, subject := range ln.subjects() {
			found := false
			err := scanSubject(ctx, stream, subject, d.seq+1, func(m *jetstream.RawStreamMsg) bool {
				found = m.Header.Get(HeaderRequestSeq) == want
				return !found
			})
			if errors.Is(err, errScanLimit) {
				b.log.Warn().Uint64("seq", d.reqSeq).Str("subject", subject).Msg("too long a backlog to look for a later copy of the request; taking it as none")
				continue
			}
			if err != nil {
				return false, fmt.Errorf("looking for a later copy of request %d: %w", d.reqSeq, err)
			}
			if found {
				return true, nil
			}
		}
	}
	return false, nil
}
