package jetstream

import (
	"fmt"
	"net/textproto"
	"strconv"
	"strings"
	"time"

	"github.com/mediaworker/mediaworker/job"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Headers the worker writes on dead letters.
const (
	HeaderReason      = "Mw-Reason"       // parse-error | max-deliveries
	HeaderLastError   = "Mw-Last-Error"   // the last error's whole chain, for operators (a response says less)
	HeaderDeliveries  = "Mw-Deliveries"   // deliveries so far
	HeaderStream      = "Mw-Stream"       // origin stream
	HeaderStreamSeq   = "Mw-Stream-Seq"   // origin stream sequence
	HeaderPublishedAt = "Mw-Published-At" // when the request was stored (RFC 3339)
	HeaderDeadAt      = "Mw-Dead-At"      // when it was dead-lettered (RFC 3339)
	HeaderMsgID       = "Mw-Msg-Id"       // the request's own Nats-Msg-Id, kept for operators
	HeaderConsumer    = "Mw-Consumer"     // the durable that gave up: triage's or a lane's (the console counts per lane)
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
	// The API's id. A lane's work message carries it already; its own Nats-Msg-Id is triage's.
	if id := from.Get(jetstream.MsgIDHeader); id != "" && from.Get(HeaderRequestSeq) == "" {
		to.Set(HeaderMsgID, id)
	}
}

// deadLetterMsg is the DLQ copy of a delivery's request, with headers saying why, and its Nats-Msg-Id.
// The payload is unchanged; of its headers only the allow-list (copyHeaders) comes along. The id is
// derived from the request, so a second attempt (the advisory path after the worker's) is dropped.
// f gives the time it is dead-lettered at and the server's limit on its size.
func (r rules) deadLetterMsg(d *delivery, reason string, cause error, f facts) (*nats.Msg, string) {
	m := nats.NewMsg(r.cfg.Subjects().DLQ)
	m.Data = d.data
	copyHeaders(m.Header, d.header)
	m.Header.Del(HeaderRequestSeq) // a lane's bookkeeping; Mw-Stream-Seq says the same
	m.Header.Set(HeaderReason, reason)
	if cause != nil {
		// The operator's copy: the whole chain (endpoints, scratch paths, a tool's words), which the
		// response never carries; on one line, as a header value must be.
		m.Header.Set(HeaderLastError, clipReason(strings.Join(strings.Fields(r.words.Detail(cause)), " ")))
	}
	m.Header.Set(HeaderDeliveries, strconv.FormatUint(d.deliveries, 10))
	m.Header.Set(HeaderStream, r.cfg.RequestsStream())
	consumer := r.cfg.Durable
	if d.lane != job.Triage {
		consumer = r.cfg.Lane(d.lane).Durable()
	}
	m.Header.Set(HeaderConsumer, consumer)
	m.Header.Set(HeaderStreamSeq, strconv.FormatUint(d.reqSeq, 10))
	if !d.published.IsZero() {
		m.Header.Set(HeaderPublishedAt, d.published.UTC().Format(time.RFC3339Nano))
	}
	m.Header.Set(HeaderDeadAt, f.now.UTC().Format(time.RFC3339Nano))
	fitDeadLetter(m, f.maxPayload)
	return m, fmt.Sprintf("dlq/%s/%d", r.cfg.RequestsStream(), d.reqSeq)
}
