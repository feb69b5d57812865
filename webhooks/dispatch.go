package webhooks

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/mediaworker/mediaworker/contracts"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// Streams says where the worker's answers are: the app prefix (for the subjects), the responses
// stream, and its replicas (for the consumers). The jetstream package owns these; the app passes them.
type Streams struct {
	App       string
	Responses string // the responses stream's name
	DLQStream string // the dead-letter stream's name (entries are published on the DLQ subject, which it stores)
	Replicas  int
}

// Observer counts deliveries by endpoint and result (Result*).
type Observer interface {
	WebhookDelivery(endpoint, result string)
}

// Results an Observer is told of.
const (
	ResultDelivered    = "delivered"     // 2xx
	ResultRetry        = "retry"         // failed, another attempt is scheduled
	ResultDeadLettered = "dead_lettered" // failed its last attempt: copied to the DLQ
	ResultDisabled     = "disabled"      // 410 Gone: the endpoint was disabled
	ResultSkipped      = "skipped"       // not for this endpoint (recipe or bucket filter)
)

// Dead-letter headers: the same names the jetstream package gives its entries (app checks that they
// agree), and the webhook's own.
const (
	headerReason     = "Mw-Reason"
	headerLastError  = "Mw-Last-Error"
	headerDeliveries = "Mw-Deliveries"
	headerStream     = "Mw-Stream"
	headerStreamSeq  = "Mw-Stream-Seq"
	headerDeadAt     = "Mw-Dead-At"
	headerMsgID      = "Mw-Msg-Id"
	headerConsumer   = "Mw-Consumer"
	// HeaderEndpoint names the endpoint a dead-lettered delivery was for; HeaderStatus is its last
	// HTTP status (empty when no answer came), HeaderWebhookID the webhook-id it was sent with.
	HeaderEndpoint  = contracts.HeaderWebhookEndpoint
	HeaderStatus    = "Mw-Webhook-Status"
	HeaderWebhookID = "Mw-Webhook-Id"
	// ReasonWebhook is the Mw-Reason of a delivery that outlived its retry schedule.
	ReasonWebhook = "webhook-undelivered"
)

// Durable returns the name of endpoint name's consumer on the responses stream.
func Durable(name string) string { return "mediaworker-webhook-" + name }

// fetchWait is how long one pull waits for answers; it bounds how long Close waits for a loop.
const fetchWait = time.Second

// infoEvery is how often a loop reads its consumer's state, so an endpoint disabled or enabled by
// another instance (or with `nats consumer resume`) shows as such here too.
const infoEvery = 10 * time.Second

// Dispatcher runs one delivery loop per endpoint.
type Dispatcher struct {
	js      jetstream.JetStream
	streams Streams
	subj    contracts.Subjects
	sched   []time.Duration
	obs     Observer
	log     zerolog.Logger
	runners []*runner

	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

// Start creates (or updates) each endpoint's consumer and starts delivering. An endpoint that was
// disabled (its consumer paused) stays disabled.
func Start(ctx context.Context, js jetstream.JetStream, streams Streams, cfg Config, obs Observer, log zerolog.Logger) (*Dispatcher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if obs == nil {
		obs = nopObserver{}
	}
	d := &Dispatcher{js: js, streams: streams, subj: contracts.SubjectsFor(streams.App), sched: cfg.schedule(), obs: obs, log: log.With().Str("component", "webhooks").Logger()}
	if err := d.checkRetention(ctx); err != nil {
		return nil, err
	}
	for _, e := range cfg.All() {
		r, err := d.newRunner(ctx, e)
		if err != nil {
			return nil, err
		}
		d.runners = append(d.runners, r)
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	d.cancel = cancel
	for _, r := range d.runners {
		if r.ep.wantsProgress() {
			if err := r.followProgress(rctx); err != nil {
				d.Close()
				return nil, err
			}
		}
		if r.cons != nil {
			d.wg.Go(func() { r.run(rctx) })
		}
	}
	return d, nil
}

// checkRetention refuses a retry schedule the responses stream does not keep answers for: a retry is
// the stream's copy delivered again, so an answer that expires (MaxAge) while its retries are still
// due is never sent and never reaches the DLQ either, silently.
func (d *Dispatcher) checkRetention(ctx context.Context) error {
	s, err := d.js.Stream(ctx, d.streams.Responses)
	if err != nil {
		return fmt.Errorf("looking up stream %s: %w", d.streams.Responses, err)
	}
	maxAge := s.CachedInfo().Config.MaxAge
	var span time.Duration
	for _, w := range d.sched {
		span += w
	}
	if maxAge > 0 && span >= maxAge {
		return fmt.Errorf("the webhook retry schedule spans %s, but stream %s keeps an answer only %s: answers still being retried would expire unsent and never reach the DLQ; shorten the retry schedule or keep the responses longer", span, d.streams.Responses, maxAge)
	}
	return nil
}

// Close stops the loops and waits for them; a delivery under way is cancelled and handed back, to be
// sent again (with the same webhook-id) by this or another instance. Idempotent.
func (d *Dispatcher) Close() {
	d.once.Do(func() {
		for _, r := range d.runners {
			if r.progress != nil {
				_ = r.progress.Unsubscribe()
			}
		}
		if d.cancel != nil {
			d.cancel()
		}
		d.wg.Wait()
	})
}

// States returns each endpoint's state, in the configured order.
func (d *Dispatcher) States() []State {
	out := make([]State, 0, len(d.runners))
	for _, r := range d.runners {
		out = append(out, r.snapshot())
	}
	return out
}

// Enable resumes a disabled endpoint: the deliveries it holds are sent again from where it stopped.
func (d *Dispatcher) Enable(ctx context.Context, name string) error {
	for _, r := range d.runners {
		if r.ep.Name == name {
			if r.cons == nil { // progress only: disabled on this instance alone
				r.mu.Lock()
				r.st.Status = StatusHealthy
				r.mu.Unlock()
				return nil
			}
			return Enable(ctx, d.js, d.streams, name)
		}
	}
	return fmt.Errorf("no webhook endpoint named %q", name)
}

// Enable resumes endpoint name's consumer (for `mediaworker webhooks enable`, which has no Dispatcher).
func Enable(ctx context.Context, js jetstream.JetStream, streams Streams, name string) error {
	if _, err := js.ResumeConsumer(ctx, streams.Responses, Durable(name)); err != nil {
		return fmt.Errorf("resuming consumer %s on %s: %w", Durable(name), streams.Responses, err)
	}
	return nil
}

type nopObserver struct{}

func (nopObserver) WebhookDelivery(string, string) {}

// runner is one endpoint's loop and state.
type runner struct {
	d      *Dispatcher
	ep     Endpoint
	sign   *signer
	client *deliverer
	cons   jetstream.Consumer // nil for an endpoint of progress only
	// progress is the endpoint's subscription to progress events (progress.go), nil without.
	progress *nats.Subscription
	durable  string
	slots    chan struct{}
	log      zerolog.Logger

	mu        sync.Mutex
	st        State
	holdUntil time.Time // no new pulls before this (429/502/503/504 or Retry-After)
}

func (d *Dispatcher) newRunner(ctx context.Context, e Endpoint) (*runner, error) {
	sg, err := newSigner(e)
	if err != nil {
		return nil, err
	}
	r := &runner{
		d: d, ep: e, sign: sg, durable: Durable(e.Name),
		client: &deliverer{client: newClient(e.timeout(), e.concurrency(), e.AllowPrivate), url: e.URL, sign: sg},
		slots:  make(chan struct{}, e.concurrency()),
		log:    d.log.With().Str("endpoint", e.Name).Logger(),
		st:     State{Name: e.Name, URL: Redact(e.URL), Status: StatusHealthy},
	}
	cc := jetstream.ConsumerConfig{
		Durable:     r.durable,
		Description: "mediaworker webhook deliveries to " + Redact(e.URL),
		AckPolicy:   jetstream.AckExplicitPolicy,
		// An attempt may wait for a slot (at most about one timeout) and then take one timeout: an
		// ack wait below that would hand it to another instance while it is still being sent.
		AckWait:       2*e.timeout() + 30*time.Second,
		MaxDeliver:    -1, // the retry schedule decides the last attempt (deliver)
		MaxAckPending: 10000,
		// A new endpoint gets the answers from now on, not the stream's days of history.
		DeliverPolicy: jetstream.DeliverNewPolicy,
		Replicas:      d.streams.Replicas,
	}
	if e.wants(EventResponse) {
		cc.FilterSubjects = append(cc.FilterSubjects, d.subj.Response)
	}
	if e.wants(EventVirus) {
		cc.FilterSubjects = append(cc.FilterSubjects, d.subj.Virus)
	}
	if len(cc.FilterSubjects) == 0 {
		return r, nil // progress only (progress.go): nothing kept to read
	}
	if old, err := d.js.Consumer(ctx, d.streams.Responses, r.durable); err == nil {
		// What cannot change, and what says the endpoint is disabled, are kept.
		oc := old.CachedInfo().Config
		cc.DeliverPolicy, cc.OptStartSeq, cc.OptStartTime, cc.PauseUntil = oc.DeliverPolicy, oc.OptStartSeq, oc.OptStartTime, oc.PauseUntil
	} else if !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil, fmt.Errorf("looking up consumer %s on %s: %w", r.durable, d.streams.Responses, err)
	}
	if r.cons, err = d.js.CreateOrUpdateConsumer(ctx, d.streams.Responses, cc); err != nil {
		return nil, fmt.Errorf("creating consumer %s on %s for webhook endpoint %q: %w", r.durable, d.streams.Responses, e.Name, err)
	}
	r.noteInfo(r.cons.CachedInfo())
	return r, nil
}

// run pulls as many answers as there are free slots and delivers each in a goroutine of its own.
func (r *runner) run(ctx context.Context) {
	lastInfo := time.Now()
	for ctx.Err() == nil {
		if time.Since(lastInfo) > infoEvery {
			lastInfo = time.Now()
			if info, err := r.cons.Info(ctx); err == nil {
				r.noteInfo(info)
			}
		}
		if wait := r.hold(); wait > 0 {
			sleep(ctx, min(wait, time.Second))
			continue
		}
		select {
		case r.slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		n := 1
		for n < cap(r.slots) {
			select {
			case r.slots <- struct{}{}:
				n++
				continue
			default:
			}
			break
		}
		batch, err := r.cons.Fetch(n, jetstream.FetchMaxWait(fetchWait))
		if err != nil {
			r.release(n)
			if ctx.Err() == nil {
				r.log.Warn().Err(err).Msg("pulling answers to deliver")
				sleep(ctx, time.Second)
			}
			continue
		}
		got := 0
		for msg := range batch.Messages() {
			got++
			r.d.wg.Go(func() {
				defer r.release(1)
				r.deliver(ctx, msg)
			})
		}
		r.release(n - got)
	}
}

func (r *runner) release(n int) {
	for range n {
		<-r.slots
	}
}

func (r *runner) hold() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return time.Until(r.holdUntil)
}

// deliver makes one attempt at one answer and settles the message by its result.
func (r *runner) deliver(ctx context.Context, msg jetstream.Msg) {
	meta, err := msg.Metadata()
	if err != nil {
		_ = msg.Term()
		return
	}
	if !r.matches(msg) {
		_ = msg.Ack()
		r.d.obs.WebhookDelivery(r.ep.Name, ResultSkipped)
		return
	}
	attempt := int(meta.NumDelivered)
	id := webhookID(r.ep.Name, msg.Headers().Get(nats.MsgIdHdr), meta.Sequence.Stream)
	body := msg.Data()
	if len(body) > RecommendedMaxBody {
		r.log.Warn().Int("bytes", len(body)).Int("recommended", RecommendedMaxBody).Str("webhook_id", id).
			Msg("answer is larger than Standard Webhooks recommends; sent whole, as published")
	}
	stop := keepInProgress(msg)
	res := r.client.send(ctx, id, body)
	stop()
	if ctx.Err() != nil {
		_ = msg.Nak() // closing: hand it back now rather than after the ack wait
		return
	}
	log := r.log.With().Str("webhook_id", id).Uint64("stream_seq", meta.Sequence.Stream).Int("attempt", attempt).Logger()
	switch {
	case res.ok():
		if err := msg.DoubleAck(ctx); err != nil {
			// Sent, but not recorded: it will be sent again with the same webhook-id, which the
			// receiver drops as the spec asks.
			log.Warn().Err(err).Msg("delivered, but the acknowledgement was not confirmed")
		}
		r.note(res, StatusHealthy)
		r.d.obs.WebhookDelivery(r.ep.Name, ResultDelivered)
	case res.status == 410:
		if r.disable(ctx, res) {
			_ = msg.Nak() // kept on the paused consumer: sent when the endpoint is enabled again
		} else {
			// Not paused (refused by the account, or a server before 2.11): handed straight back it
			// would be sent again at once, and again, to the endpoint that said it is gone.
			_ = msg.NakWithDelay(r.d.sched[min(attempt, len(r.d.sched))-1])
		}
		r.d.obs.WebhookDelivery(r.ep.Name, ResultDisabled)
	case attempt > len(r.d.sched):
		if err := r.deadLetter(ctx, msg, meta, id, res, attempt); err != nil {
			log.Error().Err(err).Msg("copying an undeliverable webhook to the DLQ; trying again later")
			_ = msg.NakWithDelay(r.d.sched[len(r.d.sched)-1])
			return
		}
		_ = msg.TermWithReason("webhook undelivered after its last attempt")
		r.note(res, StatusRetrying)
		r.d.obs.WebhookDelivery(r.ep.Name, ResultDeadLettered)
		log.Error().Str("error", res.describe()).Msg("webhook undelivered after its last attempt: copied to the DLQ")
	default:
		// Retry-After may lengthen the schedule's wait, never shorten it: a receiver answering 429
		// with "Retry-After: 1" would otherwise spend the whole day-long schedule in seconds and
		// send the answer to the DLQ while it is still struggling.
		delay := max(r.d.sched[attempt-1], min(res.retryAfter, maxRetryAfter))
		if res.backoff() {
			// The endpoint asked for a pause: no new pulls until it is over, so the answers behind
			// this one do not each try (and fail) in the meantime.
			pause := r.d.sched[0]
			if res.retryAfter > 0 {
				pause = min(res.retryAfter, maxRetryAfter)
			}
			r.mu.Lock()
			r.holdUntil = time.Now().Add(pause)
			r.mu.Unlock()
		}
		_ = msg.NakWithDelay(delay)
		r.note(res, StatusRetrying)
		r.d.obs.WebhookDelivery(r.ep.Name, ResultRetry)
		log.Warn().Str("error", res.describe()).Dur("retry_in", delay).Msg("webhook not delivered; retrying")
	}
}

// inProgressEvery is how often a delivery under way tells the server it is still being worked on. The
// consumer's ack wait is sized for this instance's timeout, but another instance (a rolling change of
// the timeout) or an operator may have set it shorter: without this, a slow delivery would be handed
// to another loop and sent twice at once. Every AckWait the worker sets is at least 30 s.
var inProgressEvery = 10 * time.Second

// keepInProgress marks msg in progress now and every inProgressEvery until the returned stop is called.
func keepInProgress(msg jetstream.Msg) (stop func()) {
	_ = msg.InProgress()
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(inProgressEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				_ = msg.InProgress()
			}
		}
	}()
	return func() {
		close(done)
		<-exited
	}
}

// maxRetryAfter bounds how long an endpoint's Retry-After may park a delivery: a day, about the spec's
// whole schedule, so a wrong header cannot hold an answer past the stream's retention.
const maxRetryAfter = 24 * time.Hour

// matches applies the endpoint's recipe and bucket filters. A recipe filter judges answers only (a
// virus event names no recipe); a bucket filter judges both, and an answer whose bucket is unknown is
// not sent to an endpoint that asked for certain buckets only.
func (r *runner) matches(msg jetstream.Msg) bool {
	if len(r.ep.Recipes) == 0 && len(r.ep.Buckets) == 0 {
		return true
	}
	var probe struct {
		Recipe   string `json:"recipe"`
		S3Bucket string `json:"s3Bucket"`
	}
	_ = json.Unmarshal(msg.Data(), &probe)
	virus := msg.Subject() == r.d.subj.Virus
	if len(r.ep.Recipes) > 0 && !virus {
		recipe := probe.Recipe
		if recipe == "" {
			recipe = contracts.DefaultRecipe
		}
		if !contains(r.ep.Recipes, recipe) {
			return false
		}
	}
	if len(r.ep.Buckets) > 0 {
		bucket := probe.S3Bucket
		if !virus {
			bucket = msg.Headers().Get(contracts.HeaderBucket)
		}
		if !contains(r.ep.Buckets, bucket) {
			return false
		}
	}
	return true
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// disable pauses the endpoint's consumer: on the server, so every instance stops, a restart keeps it
// stopped, and nothing it holds is lost; `mediaworker webhooks enable NAME` resumes it.
// It says whether the consumer is paused.
func (r *runner) disable(ctx context.Context, res result) bool {
	r.note(res, StatusDisabled)
	if r.cons == nil {
		r.log.Error().Str("url", Redact(r.ep.URL)).Msg("webhook endpoint answered 410 Gone: progress to it stops until this instance restarts")
		return false
	}
	if _, err := r.d.js.PauseConsumer(ctx, r.d.streams.Responses, r.durable, time.Now().AddDate(100, 0, 0)); err != nil {
		r.log.Error().Err(err).Msg("pausing the consumer of an endpoint that answered 410 Gone; its deliveries are retried on the schedule instead")
		return false
	}
	r.log.Error().Str("url", Redact(r.ep.URL)).Msg("webhook endpoint answered 410 Gone: disabled (its deliveries are kept; `mediaworker webhooks enable " + r.ep.Name + "` resumes them)")
	return true
}

// deadLetter copies an answer that outlived its schedule to the DLQ, with the endpoint and the last
// status, so an operator sees what was not delivered where.
func (r *runner) deadLetter(ctx context.Context, msg jetstream.Msg, meta *jetstream.MsgMetadata, id string, res result, attempts int) error {
	m := nats.NewMsg(r.d.subj.DLQ)
	m.Data = msg.Data()
	m.Header.Set(headerReason, ReasonWebhook)
	m.Header.Set(headerLastError, fmt.Sprintf("webhook %s (%s): %s", r.ep.Name, Redact(r.ep.URL), res.describe()))
	m.Header.Set(headerDeliveries, strconv.Itoa(attempts))
	m.Header.Set(headerStream, r.d.streams.Responses)
	m.Header.Set(headerStreamSeq, strconv.FormatUint(meta.Sequence.Stream, 10))
	m.Header.Set(headerDeadAt, time.Now().UTC().Format(time.RFC3339))
	m.Header.Set(headerConsumer, r.durable)
	if mid := msg.Headers().Get(nats.MsgIdHdr); mid != "" {
		m.Header.Set(headerMsgID, mid)
	}
	m.Header.Set(HeaderEndpoint, r.ep.Name)
	if res.status != 0 {
		m.Header.Set(HeaderStatus, strconv.Itoa(res.status))
	}
	m.Header.Set(HeaderWebhookID, id)
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := r.d.js.PublishMsg(pctx, m, jetstream.WithMsgID("webhook-dlq/"+id)); err != nil {
		return fmt.Errorf("publishing to %s: %w", r.d.subj.DLQ, err)
	}
	return nil
}

// webhookID is the delivery's webhook-id: the same for every attempt of one answer at one endpoint
// (the spec's idempotency key), different across endpoints. It is made of the answer's Nats-Msg-Id
// (the worker's stable id of the answer) or, lacking one, its stream sequence.
func webhookID(endpoint, natsMsgID string, seq uint64) string {
	src := natsMsgID
	if src == "" {
		src = "seq/" + strconv.FormatUint(seq, 10)
	}
	h := sha256.Sum256([]byte(endpoint + "\x00" + src))
	return "msg_" + hex.EncodeToString(h[:16])
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
