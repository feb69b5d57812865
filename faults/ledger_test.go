package faults

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/internal/testenv"
	natsjs "github.com/mediaworker/mediaworker/jetstream"
	"github.com/mediaworker/mediaworker/pipeline"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ---------------------------------------------------------------------------------------------------
// What the API sees.

// ledger records what the worker tells the API. The durable record is the responses stream (what an
// API consuming it sees: publishes are deduplicated by Nats-Msg-Id there); "wire" counts what a plain
// core-NATS subscriber saw, which may include a republished duplicate after a crash.
type ledger struct {
	t  *testing.T
	nc *nats.Conn
	js jetstream.JetStream

	mu        sync.Mutex
	wire      map[string]int
	respNext  uint64
	responses map[string][]contracts.Response
	viruses   map[string][]contracts.VirusEvent
	dlqNext   uint64
	dlq       []deadLetter
}

type deadLetter struct {
	seq    uint64
	data   []byte
	header nats.Header
}

// newLedger connects to urls (comma-separated) and keeps reconnecting for as long as the test runs.
func newLedger(t *testing.T, urls string) *ledger {
	t.Helper()
	nc, err := nats.Connect(urls, nats.Name("faults:"+t.Name()), nats.MaxReconnects(-1),
		nats.ReconnectWait(200*time.Millisecond), nats.RetryOnFailedConnect(false))
	if err != nil {
		t.Fatalf("connecting to nats: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	l := &ledger{t: t, nc: nc, js: js, wire: map[string]int{}, respNext: 1, dlqNext: 1,
		responses: map[string][]contracts.Response{}, viruses: map[string][]contracts.VirusEvent{}}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("NATS state at failure:\n%s", l.state())
		}
	})
	if _, err := nc.Subscribe(streams.Subjects().Response, func(m *nats.Msg) {
		var r contracts.Response
		_ = json.Unmarshal(m.Data, &r)
		l.mu.Lock()
		l.wire[r.MediaID]++
		l.mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return l
}

// sync reads what was added to the responses and DLQ streams since the last call.
func (l *ledger) sync() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l.mu.Lock()
	defer l.mu.Unlock()
	err := readStream(ctx, l.js, l.nc, streams.ResponsesStream(), &l.respNext, func(m *jetstream.RawStreamMsg) error {
		if m.Subject == streams.Subjects().Virus {
			if err := contracts.ValidateJSON(contracts.SchemaVirusEvent, m.Data); err != nil {
				l.t.Errorf("virus event does not match its schema: %v\n%s", err, m.Data)
			}
			var v contracts.VirusEvent
			_ = json.Unmarshal(m.Data, &v)
			l.viruses[v.MediaID] = append(l.viruses[v.MediaID], v)
			return nil
		}
		if err := contracts.ValidateJSON(contracts.SchemaResponse, m.Data); err != nil {
			l.t.Errorf("response does not match its schema: %v\n%s", err, m.Data)
		}
		var r contracts.Response
		_ = json.Unmarshal(m.Data, &r)
		l.responses[r.MediaID] = append(l.responses[r.MediaID], r)
		return nil
	})
	if err != nil {
		return err
	}
	return readStream(ctx, l.js, l.nc, streams.DLQStream(), &l.dlqNext, func(m *jetstream.RawStreamMsg) error {
		l.dlq = append(l.dlq, deadLetter{seq: m.Sequence, data: m.Data, header: m.Header})
		return nil
	})
}

// readStream reads messages next..LastSeq of a stream and advances next.
func readStream(ctx context.Context, js jetstream.JetStream, nc *nats.Conn, name string, next *uint64, fn func(*jetstream.RawStreamMsg) error) error {
	s, err := js.Stream(ctx, name)
	if err != nil {
		return fmt.Errorf("looking up stream %s: %w", name, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return fmt.Errorf("stream %s info: %w", name, err)
	}
	for ; *next <= info.State.LastSeq; *next++ {
		// Through the stream leader: a replica that lags a moment after a leader change answers "not
		// found" to a direct get for a message that exists, and the ledger would report it lost.
		m, err := natsjs.LeaderGetMsg(ctx, nc, name, *next)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // deleted (a replayed dead letter)
		}
		if err != nil {
			return fmt.Errorf("reading %s #%d: %w", name, *next, err)
		}
		if err := fn(m); err != nil {
			return err
		}
	}
	return nil
}

// await waits until every id has at least one response in the stream.
func (l *ledger) await(ids []string, timeout time.Duration) {
	l.t.Helper()
	testenv.Eventually(l.t, timeout, func() error {
		if err := l.sync(); err != nil {
			return err
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		missing := 0
		for _, id := range ids {
			if len(l.responses[id]) == 0 {
				missing++
			}
		}
		if missing > 0 {
			return fmt.Errorf("%d of %d requests have no response yet", missing, len(ids))
		}
		return nil
	})
}

// awaitDLQ waits until the DLQ holds at least n dead letters.
func (l *ledger) awaitDLQ(n int, timeout time.Duration) {
	l.t.Helper()
	testenv.Eventually(l.t, timeout, func() error {
		if err := l.sync(); err != nil {
			return err
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		if len(l.dlq) < n {
			return fmt.Errorf("dlq holds %d of %d dead letters", len(l.dlq), n)
		}
		return nil
	})
}

// one returns the single response of id, failing the test if there is not exactly one in the stream.
func (l *ledger) one(id string) contracts.Response {
	l.t.Helper()
	if err := l.sync(); err != nil {
		l.t.Fatal(err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	rs := l.responses[id]
	if len(rs) != 1 {
		l.t.Fatalf("%s: %d responses in the stream, want exactly 1: %+v", id, len(rs), rs)
	}
	return rs[0]
}

func (l *ledger) count(id string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.responses[id])
}

// wireCount says how many copies of id's response a core subscriber saw, for a test whose ledger
// stayed connected throughout. Every copy the responses stream holds went out on the wire too, but the
// stream can be read a moment before the subscriber's callback has run (the server stores and delivers
// on different goroutines, and the client calls back on yet another): a count read at once missed the
// one answer there was on a loaded CI machine. So it waits, bounded, for the stored copies to show.
func (l *ledger) wireCount(id string) int {
	l.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := l.caughtUp(); err != nil {
			l.t.Fatalf("counting responses on the wire: %v", err)
		}
		l.mu.Lock()
		wire, stored := l.wire[id], len(l.responses[id])
		l.mu.Unlock()
		if wire >= stored || time.Now().After(deadline) {
			return wire
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// caughtUp returns once the subscriber's callback has handled every message the server sent the
// ledger's connection before the call: the flush's PONG follows them on the socket, and a barrier runs
// after the callbacks of the messages queued ahead of it. Not to be called holding l.mu, which the
// callback takes.
func (l *ledger) caughtUp() error {
	if err := l.nc.FlushTimeout(10 * time.Second); err != nil {
		return fmt.Errorf("flushing: %w", err)
	}
	done := make(chan struct{})
	if err := l.nc.Barrier(func() { close(done) }); err != nil {
		return fmt.Errorf("setting a barrier: %w", err)
	}
	select {
	case <-done:
		return nil
	case <-time.After(10 * time.Second):
		return errors.New("the subscriber's callbacks did not catch up within 10s")
	}
}

func (l *ledger) total() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, rs := range l.responses {
		n += len(rs)
	}
	return n
}

func (l *ledger) deadLetters() []deadLetter {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]deadLetter(nil), l.dlq...)
}

// consumer returns triage's shared durable's info (every request is delivered there first).
func (l *ledger) consumer() *jetstream.ConsumerInfo {
	l.t.Helper()
	return l.consumerInfo(streams.Durable)
}

// lane returns a lane's shared durable's info.
func (l *ledger) lane(k pipeline.MediaKind) *jetstream.ConsumerInfo {
	l.t.Helper()
	return l.consumerInfo(streams.Lane(k).Durable())
}

// consumers are triage's and every lane's.
func (l *ledger) consumers() []*jetstream.ConsumerInfo {
	l.t.Helper()
	out := []*jetstream.ConsumerInfo{l.consumer()}
	for _, k := range natsjs.Lanes {
		out = append(out, l.lane(k))
	}
	return out
}

// deliveries counts the deliveries of triage and the lanes together.
func (l *ledger) deliveries() uint64 {
	l.t.Helper()
	var n uint64
	for _, info := range l.consumers() {
		n += info.Delivered.Consumer
	}
	return n
}

func (l *ledger) consumerInfo(durable string) *jetstream.ConsumerInfo {
	l.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := l.js.Consumer(ctx, streams.RequestsStream(), durable)
	if err != nil {
		l.t.Fatalf("looking up the consumer: %v", err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		l.t.Fatalf("consumer info: %v", err)
	}
	return info
}

// awaitEmptyQueue waits until the work queue holds nothing and nothing is pending an ack: every
// request was settled and removed.
func (l *ledger) awaitEmptyQueue(timeout time.Duration) {
	l.t.Helper()
	l.awaitEmptyStream(streams.RequestsStream(), timeout)
}

// awaitEmptyStream waits until the stream holds no messages.
func (l *ledger) awaitEmptyStream(name string, timeout time.Duration) {
	l.t.Helper()
	testenv.Eventually(l.t, timeout, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s, err := l.js.Stream(ctx, name)
		if err != nil {
			return err
		}
		info, err := s.Info(ctx)
		if err != nil {
			return err
		}
		if info.State.Msgs != 0 {
			return fmt.Errorf("stream %s holds %d messages", name, info.State.Msgs)
		}
		return nil
	})
}

// republished counts the ids whose response went out on the wire more than once (the stream's
// duplicate window kept the extra copies out of the stream).
// Unlike wireCount it does not wait for stored copies: across a NATS restart the ledger misses some.
func (l *ledger) republished(ids []string) int {
	l.t.Helper()
	if err := l.caughtUp(); err != nil {
		l.t.Fatalf("counting responses on the wire: %v", err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, id := range ids {
		if l.wire[id] > 1 {
			n++
		}
	}
	return n
}

// state describes the streams and consumers, for failure messages.
func (l *ledger) state() string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var b strings.Builder
	for _, name := range []string{streams.RequestsStream(), streams.ResponsesStream(), streams.DLQStream(), streams.AdvisoryCapture().Stream()} {
		s, err := l.js.Stream(ctx, name)
		if err != nil {
			fmt.Fprintf(&b, "  stream %s: %v\n", name, err)
			continue
		}
		info, err := s.Info(ctx)
		if err != nil {
			fmt.Fprintf(&b, "  stream %s: %v\n", name, err)
			continue
		}
		fmt.Fprintf(&b, "  stream %s: %d msgs, seq %d..%d, deleted %d", name, info.State.Msgs, info.State.FirstSeq, info.State.LastSeq, info.State.NumDeleted)
		if info.Cluster != nil {
			fmt.Fprintf(&b, ", leader %s", info.Cluster.Leader)
		}
		b.WriteString("\n")
		if name == streams.RequestsStream() && info.State.Msgs > 0 && info.State.Msgs < 20 {
			for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
				if m, err := s.GetMsg(ctx, seq); err == nil {
					fmt.Fprintf(&b, "    #%d %s\n", seq, m.Data)
				}
			}
		}
	}
	durables := []string{streams.Durable}
	for _, k := range natsjs.Lanes {
		durables = append(durables, streams.Lane(k).Durable())
	}
	for _, durable := range durables {
		c, err := l.js.Consumer(ctx, streams.RequestsStream(), durable)
		if err != nil {
			fmt.Fprintf(&b, "  consumer %s: %v\n", durable, err)
			continue
		}
		info, err := c.Info(ctx)
		if err != nil {
			fmt.Fprintf(&b, "  consumer %s: %v\n", durable, err)
			continue
		}
		fmt.Fprintf(&b, "  consumer %s: delivered %d (stream %d), ack floor %d (stream %d), pending %d, ack pending %d, redelivered %d, waiting pulls %d\n",
			durable, info.Delivered.Consumer, info.Delivered.Stream, info.AckFloor.Consumer, info.AckFloor.Stream,
			info.NumPending, info.NumAckPending, info.NumRedelivered, info.NumWaiting)
	}
	return b.String()
}
