package jetstream

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/mediaworker/mediaworker/contracts"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Client is the API's side of the contract for mediaworker's own callers (`submit`, the benchmarks):
// it publishes requests as a careful API does and hears the answers, so the request subject, the
// deduplicating message id and the answer subjects are written here once, beside the worker that
// reads them. Open it on a connection from Connect.
type Client struct {
	js   jetstream.JetStream
	cfg  Config
	subj contracts.Subjects
}

// NewClient returns a client of cfg's app on js.
func NewClient(js jetstream.JetStream, cfg Config) *Client {
	return &Client{js: js, cfg: cfg, subj: cfg.Subjects()}
}

// submitTimeout bounds one request's publish when ctx has no earlier deadline.
const submitTimeout = 10 * time.Second

// Submit publishes req on the request subject with Nats-Msg-Id = its mediaId, so a retried publish is
// dropped by the stream's duplicate window, and Nats-Expected-Stream = the requests stream, so a
// request is never stored by another stream that happens to listen on the subject.
func (c *Client) Submit(ctx context.Context, req contracts.Request) error {
	data, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("encoding the request: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, submitTimeout)
	defer cancel()
	if err := publishRequest(pctx, c.js, &nats.Msg{Subject: c.subj.Request, Data: data},
		jetstream.WithMsgID(req.MediaID), jetstream.WithExpectStream(c.cfg.RequestsStream())); err != nil {
		return fmt.Errorf("publishing the request to %s: %w (are the streams provisioned? `mediaworker streams apply`)", c.subj.Request, err)
	}
	return nil
}

// publishRequest publishes a request as an API would: the client's Submit, and the operator's replay
// of a dead letter (dlq.go). The worker itself publishes only through apply.go.
func publishRequest(ctx context.Context, js jetstream.JetStream, m *nats.Msg, opts ...jetstream.PublishOpt) error {
	_, err := js.PublishMsg(ctx, m, opts...)
	return err
}

// AnswerKind says what an Answer is.
type AnswerKind string

// The answers a worker sends about a request.
const (
	AnswerResponse AnswerKind = "response" // a contracts.Response: the request's end
	AnswerVirus    AnswerKind = "virus"    // a contracts.VirusEvent, published before its response
	AnswerProgress AnswerKind = "progress" // a contracts.Progress of a video job
)

// Answer is one message a worker sent about a request, as it came (decode it by Kind).
type Answer struct {
	Kind AnswerKind
	Data []byte
	At   time.Time // when it arrived
}

// Listen calls fn with every answer of the app (or only those of the kinds named) until the returned
// stop is called. It returns once the server has the subscriptions, so a request submitted after it
// cannot be answered unheard. The answers come in order on one goroutine: a virus event always before
// the response it goes with.
//
// It subscribes to the answer subjects themselves (the response, the virus event, progress.*), never
// to the app's wildcard: an API's user in deploy/nats/accounts.conf may subscribe to exactly those, and
// requests, lanes' work and dead letters are no traffic of a listener's. The subscriptions share one
// channel, which the connection's reader fills in the order the server sent: that keeps a virus event
// ahead of its response, as one subscription would.
func (c *Client) Listen(fn func(Answer), kinds ...AnswerKind) (stop func(), err error) {
	nc := c.js.Conn()
	subjects := map[AnswerKind]string{AnswerResponse: c.subj.Response, AnswerVirus: c.subj.Virus,
		AnswerProgress: c.subj.ProgressWildcard()}
	if len(kinds) == 0 {
		kinds = []AnswerKind{AnswerResponse, AnswerVirus, AnswerProgress}
	}
	// The reader never blocks on a full channel (the message would be dropped as a slow consumer's):
	// a pump moves each message at once onto an unbounded queue that fn drains at its own pace.
	ch := make(chan *nats.Msg, 4096)
	var (
		subs  []*nats.Subscription
		names []string
	)
	unsubscribe := func() {
		for _, s := range subs {
			_ = s.Unsubscribe()
		}
	}
	for _, k := range kinds {
		subject, ok := subjects[k]
		if !ok {
			unsubscribe()
			return nil, fmt.Errorf("listening: unknown answer kind %q", k)
		}
		sub, err := nc.ChanSubscribe(subject, ch)
		if err != nil {
			unsubscribe()
			return nil, fmt.Errorf("subscribing to %s: %w", subject, err)
		}
		subs = append(subs, sub)
		names = append(names, subject)
	}
	if err := nc.Flush(); err != nil {
		unsubscribe()
		return nil, fmt.Errorf("subscribing to %s: %w", strings.Join(names, ", "), err)
	}
	done := make(chan struct{})
	q := newAnswerQueue()
	go func() { // the pump
		for {
			select {
			case m, ok := <-ch:
				if !ok { // nats.go closes only sync subscriptions' channels; be safe all the same
					q.close()
					return
				}
				a := Answer{Data: m.Data, At: time.Now()}
				switch {
				case m.Subject == c.subj.Response:
					a.Kind = AnswerResponse
				case m.Subject == c.subj.Virus:
					a.Kind = AnswerVirus
				case strings.HasPrefix(m.Subject, c.subj.Progress+"."):
					a.Kind = AnswerProgress
				default:
					continue
				}
				q.push(a)
			case <-done:
				q.close()
				return
			}
		}
	}()
	go func() { // the delivery, on one goroutine, in order
		for {
			a, ok := q.pop()
			if !ok {
				return
			}
			fn(a)
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			unsubscribe()
			close(done)
		})
	}, nil
}

// answerQueue is an unbounded FIFO between Listen's pump and its delivery goroutine.
type answerQueue struct {
	mu     sync.Mutex
	cond   *sync.Cond
	items  []Answer
	closed bool
}

func newAnswerQueue() *answerQueue {
	q := &answerQueue{}
	q.cond = sync.NewCond(&q.mu)
	return q
}

func (q *answerQueue) push(a Answer) {
	q.mu.Lock()
	q.items = append(q.items, a)
	q.mu.Unlock()
	q.cond.Signal()
}

func (q *answerQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.cond.Broadcast()
}

// pop waits for the next answer; false once the queue is closed (what is left is dropped: the
// listener stopped).
func (q *answerQueue) pop() (Answer, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.items) == 0 && !q.closed {
		q.cond.Wait()
	}
	if q.closed {
		return Answer{}, false
	}
	a := q.items[0]
	q.items[0] = Answer{}
	q.items = q.items[1:]
	return a, true
}

// Follow reads the responses stream (responses and virus events, as stored, every instance's) with an
// ordered consumer until ctx ends (nil) or reading fails. It starts at the first message stored since
// since, or at the newest atLeast messages when those reach further back; begin is called just before
// the first message (a retry after a failure reads the same messages again). fn gets each message
// with its headers (a response's HeaderOutcome) and the time it was stored.
func (c *Client) Follow(ctx context.Context, since time.Time, atLeast uint64, begin func(), fn func(subject string, header nats.Header, data []byte, stored time.Time)) error {
	ctx, cancel := context.WithCancel(ctx) // ends the Stop goroutine below when this returns
	defer cancel()
	stream, err := c.js.Stream(ctx, c.cfg.ResponsesStream())
	if err != nil {
		return fmt.Errorf("opening the responses stream: %w", err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return fmt.Errorf("reading the responses stream's state: %w", err)
	}
	cfg := jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverNewPolicy}
	if last := info.State.LastSeq; info.State.Msgs > 0 {
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &since
		if last > atLeast {
			// When the newest atLeast messages reach back before since, start there instead.
			if m, err := stream.GetMsg(ctx, last-atLeast+1); err == nil && m.Time.Before(since) {
				cfg.DeliverPolicy, cfg.OptStartTime, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, nil, m.Sequence
			}
		} else {
			cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverAllPolicy, nil
		}
	}
	begin()
	cons, err := stream.OrderedConsumer(ctx, cfg)
	if err != nil {
		return fmt.Errorf("following the responses stream: %w", err)
	}
	msgs, err := cons.Messages()
	if err != nil {
		return fmt.Errorf("following the responses stream: %w", err)
	}
	go func() { <-ctx.Done(); msgs.Stop() }()
	for {
		m, err := msgs.Next()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("following the responses stream: %w", err)
		}
		meta, err := m.Metadata()
		if err != nil {
			continue
		}
		fn(m.Subject(), m.Headers(), m.Data(), meta.Timestamp)
	}
}
