package jetstream

import (
	"strconv"

	"github.com/mediaworker/mediaworker/job"
	"github.com/nats-io/nats.go"
)

// Messages larger than the server accepts. A request is stored only if it fits the server's max
// payload, but what the worker publishes about it can be larger: a response echoes the request's
// mediaUrl, a dead letter carries the whole request plus headers saying why. A publish refused for its
// size fails the same way on every delivery, so handing it back would redo the job each time and end,
// after the last one, as "stopped answering" with nobody told why. Both are made to fit before the
// first publish instead (requests have a far smaller limit of their own: contracts, so this is the
// last line, not the first).

// headerAllowance is kept free of a message's payload for its headers (ids, trace context, the
// dead-letter headers, which clip their longest value at 512 bytes).
const headerAllowance = 8 << 10

// HeaderPayloadTruncated on a dead letter says its payload was cut to fit and how long it was.
const HeaderPayloadTruncated = "Mw-Payload-Truncated"

// fitOutcome replaces an outcome whose answer would not fit limit (the server's max payload) with a
// short failure (job.Unpublishable). It reports whether it did.
func fitOutcome(d *delivery, out *job.Outcome, evs []event, limit int) bool {
	for _, ev := range evs {
		if ev.deadLetter || out.Kind == job.Route || len(ev.msg.Data)+headerAllowance <= limit {
			continue
		}
		*out = job.Unpublishable(d.req, out.MediaKind, len(ev.msg.Data), limit)
		return true
	}
	return false
}

// fitDeadLetter cuts a dead letter's payload so the copy fits; the header says how long it was. The
// operator still sees the request's start, why it died and where it came from.
func fitDeadLetter(m *nats.Msg, serverMax int) {
	limit := serverMax - headerAllowance
	if len(m.Data) <= limit || limit <= 0 {
		return
	}
	m.Header.Set(HeaderPayloadTruncated, strconv.Itoa(len(m.Data)))
	m.Data = m.Data[:limit]
}

// maxPayload is the connected server's limit (nats.go reports 0 before the first INFO).
func maxPayload(nc *nats.Conn) int {
	if n := int(nc.MaxPayload()); n > 0 {
		return n
	}
	return 1 << 20 // the server's default
}
