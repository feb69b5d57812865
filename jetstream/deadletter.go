package jetstream

import (
	"context"
	"fmt"
	"net/textproto"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Headers the worker writes on dead letters.
const (
	HeaderReason      = "Mw-Reason"       // parse-error | max-deliveries
	HeaderLastError   = "Mw-Last-Error"   // the last error, as a person reads it
	HeaderDeliveries  = "Mw-Deliveries"   // deliveries so far
	HeaderStream      = "Mw-Stream"       // origin stream
	HeaderStreamSeq   = "Mw-Stream-Seq"   // origin stream sequence
	HeaderPublishedAt = "Mw-Published-At" // when the request was stored (RFC 3339)
	HeaderDeadAt      = "Mw-Dead-At"      // when it was dead-lettered (RFC 3339)
	HeaderMsgID       = "Mw-Msg-Id"       // the request's own Nats-Msg-Id, kept for operators
)

// copiedHeaders are the request headers a copy (dead letter, lane message) carries over: the trace
// context and our own Mw- headers. Everything else stays behind, above all the Nats-* headers that
// steer the publish itself: a request published with Nats-Expected-Stream would make the DLQ refuse
// its copy for ever (err_code 10060), Nats-Msg-Id would collide with the copy's dedupe id, and
// Nats-Rollup or Nats-TTL would purge or expire the DLQ.
var copiedHeaders = map[string]bool{"Traceparent": true, "Tracestate": true, "Baggage": true}

// copyHeaders adds the allowed headers of from to to, and the request's Nats-Msg-Id as HeaderMsgID.
func copyHeaders(to, from nats.Header) {
	for k, vs := range from {
		ck := textproto.CanonicalMIMEHeaderKey(k)
		if !copiedHeaders[ck] && !strings.HasPrefix(ck, "Mw-") {
			continue
		}
		for _, v := range vs {
			to.Add(k, v)
		}
	}
	if id := from.Get(jetstream.MsgIDHeader); id != "" {
		to.Set(HeaderMsgID, id)
	}
}

// origin says where a dead letter came from.
type origin struct {
	stream     string
	seq        uint64
	deliveries uint64
	published  time.Time
}

// deadLetter copies the original request to the DLQ stream with headers saying why. The payload is
// unchanged; of its headers only the allow-list (copyHeaders) comes along. The copy's own Nats-Msg-Id
// is derived from its origin, so a second attempt (the advisory path after the worker's) is dropped.
func (w *Worker) deadLetter(ctx context.Context, data []byte, hdr nats.Header, o origin, reason string, cause error) error {
	m := nats.NewMsg(w.cfg.Subjects().DLQ)
	m.Data = data
	copyHeaders(m.Header, hdr)
	m.Header.Set(HeaderReason, reason)
	if cause != nil {
		m.Header.Set(HeaderLastError, clipReason(cause.Error()))
	}
	m.Header.Set(HeaderDeliveries, strconv.FormatUint(o.deliveries, 10))
	m.Header.Set(HeaderStream, o.stream)
	m.Header.Set(HeaderStreamSeq, strconv.FormatUint(o.seq, 10))
	if !o.published.IsZero() {
		m.Header.Set(HeaderPublishedAt, o.published.UTC().Format(time.RFC3339Nano))
	}
	m.Header.Set(HeaderDeadAt, time.Now().UTC().Format(time.RFC3339Nano))
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.wcfg.PublishTimeout)
	defer cancel()
	_, err := w.js.PublishMsg(pctx, m, jetstream.WithMsgID(fmt.Sprintf("dlq/%s/%d", o.stream, o.seq)))
	if err != nil {
		w.publishFailed(m.Subject)
		return fmt.Errorf("publishing to %s: %w", m.Subject, err)
	}
	return nil
}
