package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/pipeline"
	"github.com/mediaworker/mediaworker/progress"
	"github.com/mediaworker/mediaworker/slots"
	"github.com/mediaworker/mediaworker/tracing"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Processor runs one validated request to its outcome. The pipeline implements it.
type Processor interface {
	Process(ctx context.Context, req contracts.Request) pipeline.Outcome
}

// WorkerConfig holds one instance's pull-loop settings.
type WorkerConfig struct {
	Slots           int           // messages held at once by this instance (image + video slots)
	InProgressEvery time.Duration // 0: a third of AckWait
	BackoffBase     time.Duration // first NakWithDelay
	BackoffMax      time.Duration // cap of the growing delay
	DrainTimeout    time.Duration // how long in-flight jobs may finish after a stop
	PublishTimeout  time.Duration
	PullWait        time.Duration // how long one pull request waits for a message

	// Admission, when set, is asked before every pull: while a dependency the jobs need is down it
	// blocks, so the worker takes no work it would only hand back, burning a delivery each time.
	Admission Admission
}

// Admission blocks while a dependency the jobs need (clamd, the object store, scratch space) is down
// and returns nil once work may be taken again; an error ends the wait (ctx ended). nil = always admit.
type Admission interface {
	Wait(ctx context.Context) error
}

// DefaultWorkerConfig returns sane defaults for a small machine. The backoff (5 s doubling to 3 min)
// with the default MaxDeliver of 10 spreads the deliveries over at least 10 minutes even with the
// jitter's −25 %: an outage of one dependency that long uses up no request.
func DefaultWorkerConfig() WorkerConfig {
	return WorkerConfig{
		Slots:          3,
		BackoffBase:    5 * time.Second,
		BackoffMax:     3 * time.Minute,
		DrainTimeout:   30 * time.Second,
		PublishTimeout: 10 * time.Second,
		PullWait:       10 * time.Second,
	}
}

// Validate checks the settings.
func (c WorkerConfig) Validate() error {
	switch {
	case c.Slots < 1:
		return fmt.Errorf("slots must be at least 1, got %d", c.Slots)
	case c.BackoffBase <= 0 || c.BackoffMax < c.BackoffBase:
		return fmt.Errorf("backoff base %s and max %s must be positive with max ≥ base", c.BackoffBase, c.BackoffMax)
	case c.DrainTimeout < 0:
		return fmt.Errorf("drain timeout must not be negative")
	case c.PublishTimeout <= 0 || c.PullWait < time.Second:
		return fmt.Errorf("publish timeout must be positive and pull wait at least 1s")
	}
	return nil
}

// ErrDraining is the cause given to jobs cancelled because the drain timeout passed.
var ErrDraining = errors.New("worker is shutting down")

// Worker pulls requests from the shared durable consumer and settles each one by its outcome.
type Worker struct {
	cfg    Config
	wcfg   WorkerConfig
	js     jetstream.JetStream
	proc   Processor
	log    zerolog.Logger
	intake *slots.Pool
	obs    Observer
	held   atomic.Int64 // messages being handled (the intake also counts a pull in progress)
}

// Observer is told how each message was settled; it feeds metrics. It may be nil.
type Observer interface {
	Settled(outcome string, kind pipeline.MediaKind, deliveries uint64)
	Published(subject string, d time.Duration)
	PublishFailed(subject string)
}

// NewWorker returns a worker. Provision must have run (here or by an operator) before Run.
func NewWorker(js jetstream.JetStream, cfg Config, wcfg WorkerConfig, proc Processor, obs Observer, log zerolog.Logger) (*Worker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := wcfg.Validate(); err != nil {
		return nil, err
	}
	if wcfg.InProgressEvery <= 0 {
		wcfg.InProgressEvery = cfg.AckWait / 3
	}
	return &Worker{cfg: cfg, wcfg: wcfg, js: js, proc: proc, obs: obs, log: log,
		intake: slots.NewPool("intake", wcfg.Slots)}, nil
}

// Capacity is how many messages this instance holds at most.
func (w *Worker) Capacity() int { return w.intake.Size() }

// Held is how many messages this instance is handling now.
func (w *Worker) Held() int { return int(w.held.Load()) }

// Run pulls and processes messages until ctx ends, then drains: in-flight jobs get DrainTimeout to
// finish; what is left is cancelled and Nak'd for prompt redelivery. Run returns after every job settled.
func (w *Worker) Run(ctx context.Context) error {
	cons, err := w.js.Consumer(ctx, w.cfg.RequestsStream(), w.cfg.Durable)
	if err != nil && ctx.Err() != nil {
		return nil // stopped before it started: nothing to drain
	}
	if err != nil {
		return fmt.Errorf("looking up consumer %s on stream %s: %w", w.cfg.Durable, w.cfg.RequestsStream(), err)
	}
	// Jobs outlive the pull context during the drain; they are cancelled only when the drain times out.
	jobsCtx, cancelJobs := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancelJobs(nil)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); w.runAdvisories(ctx) }()

	for ctx.Err() == nil {
		release, err := w.intake.Acquire(ctx)
		if err != nil {
			break
		}
		if err := w.admit(ctx); err != nil {
			release()
			break
		}
		msg, err := w.next(ctx, cons)
		if err != nil {
			release()
			if ctx.Err() == nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) {
				w.log.Warn().Err(err).Msg("pulling a request failed; retrying")
				sleepCtx(ctx, time.Second)
			}
			continue
		}
		wg.Add(1)
		w.held.Add(1)
		go func() {
			defer wg.Done()
			defer release()
			defer w.held.Add(-1)
			// A job parked for a full pool of its kind may hand its intake slot back (slots.Gate).
			w.handle(slots.WithHandBack(jobsCtx, release), msg)
		}()
	}

	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	if w.Held() > 0 {
		w.log.Info().Int("in_flight", w.Held()).Dur("drain_timeout", w.wcfg.DrainTimeout).Msg("draining in-flight jobs")
	}
	select {
	case <-done:
	case <-time.After(w.wcfg.DrainTimeout):
		w.log.Warn().Int("in_flight", w.Held()).Msg("drain timeout passed; stopping jobs and handing them back for redelivery")
		cancelJobs(ErrDraining)
		<-done
	}
	return nil
}

// admit waits until the admission hook lets work in (or ctx ends).
func (w *Worker) admit(ctx context.Context) error {
	if w.wcfg.Admission == nil {
		return ctx.Err()
	}
	return w.wcfg.Admission.Wait(ctx)
}

// next pulls exactly one message: the worker never asks for more than it has free slots for.
func (w *Worker) next(ctx context.Context, cons jetstream.Consumer) (jetstream.Msg, error) {
	pullCtx, cancel := context.WithTimeout(ctx, w.wcfg.PullWait)
	defer cancel()
	return cons.Next(jetstream.FetchContext(pullCtx))
}

// handle runs one message to exactly one settlement.
func (w *Worker) handle(ctx context.Context, msg jetstream.Msg) {
	meta, err := msg.Metadata()
	if err != nil {
		w.log.Error().Err(err).Str("subject", msg.Subject()).Msg("message without JetStream metadata; terminating it")
		_ = msg.Term()
		return
	}
	log := w.log.With().Uint64("seq", meta.Sequence.Stream).Uint64("delivery", meta.NumDelivered).Logger()

	// One span per delivery, parented by the trace context the API put on the request.
	ctx, span := tracing.Tracer().Start(tracing.Extract(ctx, msg.Headers()), "process event",
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attribute.String("messaging.system", "nats"),
			attribute.String("messaging.destination.name", msg.Subject()),
			attribute.Int64("messaging.nats.stream_sequence", int64(meta.Sequence.Stream)),
			attribute.Int64("messaging.nats.delivered", int64(meta.NumDelivered))))
	defer span.End()

	req, err := contracts.ParseRequest(msg.Data())
	if err != nil {
		w.refuse(ctx, msg, meta, req, err, log)
		return
	}
	log = log.With().Str("mediaId", req.MediaID).Str("key", req.S3Key).Str("bucket", req.S3Bucket).Logger()
	span.SetAttributes(attribute.String("media.id", req.MediaID), attribute.String("media.key", req.S3Key))

	// InProgress runs until the message is settled: publishing the outcome may need retries too.
	stop := w.keepAlive(msg)
	defer stop()
	start := time.Now()
	out := w.proc.Process(w.withProgress(ctx, req.MediaID), req)
	log = log.With().Str("kind", string(out.MediaKind)).Dur("took", time.Since(start)).Logger()
	span.SetAttributes(attribute.String("media.kind", string(out.MediaKind)), attribute.String("media.outcome", out.Kind.String()))
	if out.Err != nil {
		span.SetStatus(codes.Error, out.Err.Error())
	}
	w.settle(ctx, msg, meta, req, out, log)
}

// refuse settles a request that failed validation: answered with a failure response when it names a
// mediaId, dead-lettered at once when there is nobody to answer.
func (w *Worker) refuse(ctx context.Context, msg jetstream.Msg, meta *jetstream.MsgMetadata, req contracts.Request, perr error, log zerolog.Logger) {
	var pe *contracts.ParseError
	if errors.As(perr, &pe) && pe.Correlatable {
		resp := contracts.Response{MediaID: req.MediaID, OriginalURL: req.MediaURL, Error: perr.Error()}
		if err := w.publish(ctx, w.cfg.Subjects().Response, resp, responseID(req.MediaID, meta, "invalid")); err != nil {
			log.Warn().Err(err).Msg("publishing the failure response for an invalid request failed; will retry")
			w.nak(msg, meta)
			return
		}
		log.Info().Str("mediaId", req.MediaID).Str("error", perr.Error()).Msg("request refused")
		_ = msg.TermWithReason(clipReason(perr.Error()))
		w.observe("invalid", "", meta)
		return
	}
	if err := w.deadLetter(ctx, msg.Data(), msg.Headers(), originOf(meta), "parse-error", perr); err != nil {
		log.Warn().Err(err).Msg("dead-lettering an unparseable request failed; will retry")
		w.nak(msg, meta)
		return
	}
	log.Warn().Str("error", perr.Error()).Msg("unparseable request moved to the dead-letter stream")
	_ = msg.TermWithReason("unparseable request: moved to DLQ")
	w.observe("dead_lettered", "", meta)
}

// settle maps an outcome to the events it owes and to exactly one of Ack, Term or Nak.
func (w *Worker) settle(ctx context.Context, msg jetstream.Msg, meta *jetstream.MsgMetadata, req contracts.Request, out pipeline.Outcome, log zerolog.Logger) {
	subj := w.cfg.Subjects()
	switch out.Kind {
	case pipeline.Success:
		if err := w.publish(ctx, subj.Response, out.Response, responseID(req.MediaID, meta, "success")); err != nil {
			log.Warn().Err(err).Msg("publishing the response failed; the job will run again")
			w.nak(msg, meta)
			return
		}
		// The response is out; should the ack be lost, a redelivery republishes it under the same
		// Nats-Msg-Id and the stream drops the copy.
		w.ack(ctx, msg, log)
		log.Info().Int("variants", len(out.Response.Processed)).Msg("job succeeded")
		w.observe("success", out.MediaKind, meta)

	case pipeline.Failed:
		if err := w.publish(ctx, subj.Response, out.Response, responseID(req.MediaID, meta, "failed")); err != nil {
			log.Warn().Err(err).Msg("publishing the failure response failed; will retry")
			w.nak(msg, meta)
			return
		}
		log.Info().Str("error", out.Response.Error).Msg("job failed permanently")
		_ = msg.TermWithReason(clipReason(out.Response.Error))
		w.observe("failed", out.MediaKind, meta)

	case pipeline.Infected:
		if err := w.publish(ctx, subj.Virus, out.Virus, responseID(req.MediaID, meta, "virus-event")); err != nil {
			log.Warn().Err(err).Msg("publishing the virus event failed; will retry")
			w.nak(msg, meta)
			return
		}
		if err := w.publish(ctx, subj.Response, out.Response, responseID(req.MediaID, meta, "virus")); err != nil {
			log.Warn().Err(err).Msg("publishing the virus response failed; will retry")
			w.nak(msg, meta)
			return
		}
		w.ack(ctx, msg, log)
		log.Warn().Str("virus", out.Virus.VirusName).Str("action", out.Virus.ActionTaken).Msg("virus detected")
		w.observe("infected", out.MediaKind, meta)

	default: // pipeline.Retry
		if errors.Is(context.Cause(ctx), ErrDraining) {
			// Not the job's fault: hand it back at once for another instance.
			_ = msg.Nak()
			log.Info().Msg("job stopped by shutdown; handed back for redelivery")
			w.observe("handed_back", out.MediaKind, meta)
			return
		}
		if meta.NumDelivered >= uint64(w.cfg.MaxDeliver) {
			w.giveUp(ctx, msg, meta, req, out, log)
			return
		}
		delay := w.backoff(meta.NumDelivered)
		log.Warn().Err(out.Err).Dur("retry_in", delay).Msg("job failed; will retry")
		_ = msg.NakWithDelay(delay)
		w.observe("retry", out.MediaKind, meta)
	}
}

// giveUp handles the last allowed delivery of a transient failure: tell the API, copy the request to
// the DLQ, and remove it from the work queue (at MaxDeliver it would otherwise stay there forever). If
// either publish fails, the message is handed back: the server then emits its MAX_DELIVERIES advisory
// and the advisory handler (runAdvisories) does the same work again, under the same Nats-Msg-Ids.
func (w *Worker) giveUp(ctx context.Context, msg jetstream.Msg, meta *jetstream.MsgMetadata, req contracts.Request, out pipeline.Outcome, log zerolog.Logger) {
	resp := out.Response
	resp.Success = false
	resp.Error = fmt.Sprintf("gave up after %d deliveries: %s", meta.NumDelivered, out.Response.Error)
	if err := w.publish(ctx, w.cfg.Subjects().Response, resp, responseID(req.MediaID, meta, "gave-up")); err != nil {
		log.Error().Err(err).Msg("publishing the gave-up response failed; leaving the request to the max-deliveries advisory")
		_ = msg.Nak()
		return
	}
	if err := w.deadLetter(ctx, msg.Data(), msg.Headers(), originOf(meta), "max-deliveries", out.Err); err != nil {
		log.Error().Err(err).Msg("dead-lettering failed; leaving the request to the max-deliveries advisory")
		_ = msg.Nak()
		return
	}
	_ = msg.TermWithReason("max deliveries reached: moved to DLQ")
	log.Error().Err(out.Err).Msg("job gave up; request moved to the dead-letter stream")
	w.observe("dead_lettered", out.MediaKind, meta)
}

func originOf(meta *jetstream.MsgMetadata) origin {
	return origin{stream: meta.Stream, seq: meta.Sequence.Stream, deliveries: meta.NumDelivered, published: meta.Timestamp}
}

// publishAttempts is how often an outcome's publish is tried before the message is handed back. The
// work is done by then (and an infected upload already deleted), so retrying here beats redoing it.
const publishAttempts = 3

// publish sends v as JSON with a publish ack and a Nats-Msg-Id, so a redelivered job's second response
// is dropped by the stream's duplicate window. It retries a failed publish in place.
func (w *Worker) publish(ctx context.Context, subject string, v any, msgID string) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encoding %s: %w", subject, err)
	}
	for attempt := 1; ; attempt++ {
		err = w.publishOnce(ctx, subject, data, msgID)
		if err == nil || attempt == publishAttempts {
			return err
		}
		sleepCtx(context.WithoutCancel(ctx), time.Duration(attempt)*time.Second)
	}
}

func (w *Worker) publishOnce(ctx context.Context, subject string, data []byte, msgID string) error {
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.wcfg.PublishTimeout)
	defer cancel()
	pctx, span := tracing.Tracer().Start(pctx, "publish "+subject, trace.WithSpanKind(trace.SpanKindProducer))
	defer span.End()
	m := nats.NewMsg(subject)
	m.Data = data
	tracing.Inject(pctx, m.Header) // the API's consumer continues the trace
	start := time.Now()
	if _, err := w.js.PublishMsg(pctx, m, jetstream.WithMsgID(msgID)); err != nil {
		span.SetStatus(codes.Error, err.Error())
		w.publishFailed(subject)
		return fmt.Errorf("publishing to %s: %w", subject, err)
	}
	if w.obs != nil {
		w.obs.Published(subject, time.Since(start))
	}
	return nil
}

// responseID is unique per request (stream sequence) and outcome: redeliveries of one request share it.
func responseID(mediaID string, meta *jetstream.MsgMetadata, outcome string) string {
	return fmt.Sprintf("%s/%d/%s", mediaID, meta.Sequence.Stream, outcome)
}

// withProgress makes the job's progress reports go out on its progress subject, at most once a second.
// They are plain NATS messages: nobody has to be listening, and nothing is stored.
func (w *Worker) withProgress(ctx context.Context, mediaID string) context.Context {
	subject := w.cfg.Subjects().ProgressSubject(mediaID)
	nc := w.js.Conn()
	return progress.With(ctx, progress.Throttle(time.Second, func(f float64) {
		data, _ := json.Marshal(contracts.Progress{MediaID: mediaID, Percent: math.Round(f*1000) / 10, Stage: "transcoding"})
		_ = nc.Publish(subject, data)
	}))
}

// keepAlive sends InProgress well inside AckWait until the returned stop is called.
func (w *Worker) keepAlive(msg jetstream.Msg) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(w.wcfg.InProgressEvery)
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
	var once sync.Once
	return func() { once.Do(func() { close(done); <-finished }) }
}

func (w *Worker) nak(msg jetstream.Msg, meta *jetstream.MsgMetadata) {
	_ = msg.NakWithDelay(w.backoff(meta.NumDelivered))
}

// backoff grows exponentially with the delivery count, capped, with ±25% jitter so instances that failed
// together do not retry together.
func (w *Worker) backoff(deliveries uint64) time.Duration {
	d := w.wcfg.BackoffBase
	for i := uint64(1); i < deliveries && d < w.wcfg.BackoffMax; i++ {
		d *= 2
	}
	d = min(d, w.wcfg.BackoffMax)
	jitter := time.Duration(rand.Int64N(int64(d)/2+1)) - d/4
	return max(d+jitter, 100*time.Millisecond)
}

// ack acknowledges and waits for the server to confirm it.
func (w *Worker) ack(ctx context.Context, msg jetstream.Msg, log zerolog.Logger) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.wcfg.PublishTimeout)
	defer cancel()
	if err := msg.DoubleAck(actx); err != nil {
		log.Warn().Err(err).Msg("ack not confirmed")
	}
}

func (w *Worker) observe(outcome string, kind pipeline.MediaKind, meta *jetstream.MsgMetadata) {
	if w.obs != nil {
		w.obs.Settled(outcome, kind, meta.NumDelivered)
	}
}

func (w *Worker) publishFailed(subject string) {
	if w.obs != nil {
		w.obs.PublishFailed(subject)
	}
}

func clipReason(s string) string {
	if len(s) > 512 {
		return s[:512]
	}
	return s
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
