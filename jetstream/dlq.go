package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/mediaworker/mediaworker/contracts"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// DeadLetter is one entry of the dead-letter stream: the original request and why it is there.
type DeadLetter struct {
	Seq         uint64      `json:"seq"`
	Time        time.Time   `json:"time"`
	MediaID     string      `json:"mediaId,omitempty"`
	Reason      string      `json:"reason"`
	LastError   string      `json:"lastError,omitempty"`
	Deliveries  int         `json:"deliveries"`
	OriginSeq   uint64      `json:"originSeq,omitempty"`
	Payload     []byte      `json:"-"`
	PayloadText string      `json:"payload"`
	Header      nats.Header `json:"headers,omitempty"`
}

// DLQ reads and manages the dead-letter stream for operators.
type DLQ struct {
	cfg Config
	js  jetstream.JetStream
}

// NewDLQ returns the dead-letter stream of cfg.
func NewDLQ(js jetstream.JetStream, cfg Config) *DLQ { return &DLQ{cfg: cfg, js: js} }

// ErrNotReplayable means the entry is not a request (a webhook delivery that outlived its retries).
var ErrNotReplayable = errors.New("not a request")

// ErrNoSuchEntry means the sequence is not (or no longer) in the dead-letter stream.
var ErrNoSuchEntry = errors.New("no such dead letter")

func (d *DLQ) stream(ctx context.Context) (jetstream.Stream, error) {
	s, err := d.js.Stream(ctx, d.cfg.DLQStream())
	if err != nil {
		return nil, fmt.Errorf("opening stream %s: %w", d.cfg.DLQStream(), err)
	}
	return s, nil
}

// List returns up to limit entries, oldest first (limit ≤ 0: all).
func (d *DLQ) List(ctx context.Context, limit int) ([]DeadLetter, error) {
	s, err := d.stream(ctx)
	if err != nil {
		return nil, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", d.cfg.DLQStream(), err)
	}
	var out []DeadLetter
	if info.State.Msgs == 0 {
		return out, nil
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		if limit > 0 && len(out) >= limit {
			break
		}
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // deleted by replay or purge
		}
		if err != nil {
			return out, fmt.Errorf("reading dead letter %d: %w", seq, err)
		}
		out = append(out, toDeadLetter(m))
	}
	return out, nil
}

// Get returns one entry.
func (d *DLQ) Get(ctx context.Context, seq uint64) (DeadLetter, error) {
	s, err := d.stream(ctx)
	if err != nil {
		return DeadLetter{}, err
	}
	m, err := s.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return DeadLetter{}, fmt.Errorf("%w: %d", ErrNoSuchEntry, seq)
	}
	if err != nil {
		return DeadLetter{}, fmt.Errorf("reading dead letter %d: %w", seq, err)
	}
	return toDeadLetter(m), nil
}

// Replay republishes the original payload of an entry to the request subject and then removes the
// entry. The replayed request gets a fresh Nats-Msg-Id, so the requests stream's duplicate window does
// not swallow it.
func (d *DLQ) Replay(ctx context.Context, seq uint64) error {
	dl, err := d.Get(ctx, seq)
	if err != nil {
		return err
	}
	if ep := dl.Header.Get(contracts.HeaderWebhookEndpoint); ep != "" {
		// Its payload is an answer, not a request: replayed as a request it would be refused as
		// junk, and the endpoint would still not have it.
		return fmt.Errorf("%w: dead letter %d is a webhook delivery to endpoint %q, not a request; it cannot be replayed as one (delete it once the receiver has the answer)", ErrNotReplayable, seq, ep)
	}
	m := nats.NewMsg(d.cfg.Subjects().Request)
	m.Data = dl.Payload
	m.Header.Set("Mw-Replayed-From", strconv.FormatUint(seq, 10))
	id := fmt.Sprintf("replay/%s/%d/%d", d.cfg.DLQStream(), seq, time.Now().UnixNano())
	if err := publishRequest(ctx, d.js, m, jetstream.WithMsgID(id)); err != nil {
		return fmt.Errorf("republishing dead letter %d: %w", seq, err)
	}
	return d.Delete(ctx, seq)
}

// Delete removes one entry.
func (d *DLQ) Delete(ctx context.Context, seq uint64) error {
	s, err := d.stream(ctx)
	if err != nil {
		return err
	}
	if err := s.DeleteMsg(ctx, seq); err != nil {
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return fmt.Errorf("%w: %d", ErrNoSuchEntry, seq)
		}
		return fmt.Errorf("deleting dead letter %d: %w", seq, err)
	}
	return nil
}

// Purge removes every entry and returns how many there were.
func (d *DLQ) Purge(ctx context.Context) (uint64, error) {
	s, err := d.stream(ctx)
	if err != nil {
		return 0, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, err
	}
	if err := s.Purge(ctx); err != nil {
		return 0, fmt.Errorf("purging %s: %w", d.cfg.DLQStream(), err)
	}
	return info.State.Msgs, nil
}

func toDeadLetter(m *jetstream.RawStreamMsg) DeadLetter {
	dl := DeadLetter{
		Seq:         m.Sequence,
		Time:        m.Time,
		Reason:      m.Header.Get(HeaderReason),
		LastError:   m.Header.Get(HeaderLastError),
		Payload:     m.Data,
		PayloadText: string(m.Data),
		Header:      m.Header,
	}
	dl.Deliveries, _ = strconv.Atoi(m.Header.Get(HeaderDeliveries))
	dl.OriginSeq, _ = strconv.ParseUint(m.Header.Get(HeaderStreamSeq), 10, 64)
	var probe struct {
		MediaID any `json:"mediaId"`
	}
	if json.Unmarshal(m.Data, &probe) == nil {
		if s, ok := probe.MediaID.(string); ok {
			dl.MediaID = s
		}
	}
	return dl
}
