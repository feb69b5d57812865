package jetstream

import (
	"fmt"

	"github.com/nats-io/nats.go"
)

// TapMsg is one message a Tap saw, as it crossed the wire.
type TapMsg struct {
	Subject, Reply string
	// HeaderBytes is the size of the header block on the wire (NATS/1.0, its lines, the blank line).
	HeaderBytes int
	Data        []byte
}

// Tap hears every message on subject (wildcards allowed: ">" is the whole account) through nc, a plain
// core subscription that stores and acknowledges nothing: the benchmarks count what a job makes the
// server do with it. fn runs on the subscription's goroutine; it must not keep m.Data. stop ends it.
func Tap(nc *nats.Conn, subject string, fn func(m TapMsg)) (stop func(), err error) {
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		fn(TapMsg{Subject: m.Subject, Reply: m.Reply, HeaderBytes: headerBytes(m.Header), Data: m.Data})
	})
	if err != nil {
		return nil, fmt.Errorf("tapping %s: %w", subject, err)
	}
	// A tap of the whole account must not drop what it is counting under a burst.
	_ = sub.SetPendingLimits(-1, -1)
	if err := nc.Flush(); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("tapping %s: %w", subject, err)
	}
	return func() { _ = sub.Unsubscribe() }, nil
}

func headerBytes(h nats.Header) int {
	if len(h) == 0 {
		return 0
	}
	n := len("NATS/1.0\r\n\r\n")
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + 2 + len(v) + 2
		}
	}
	return n
}
