package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/job"
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

// Processor runs requests to their outcomes. The pipeline implements it.
type Processor interface {
	// Triage looks at a request cheaply and routes it to a lane (or ends it: missing, unsupported …).
	Triage(ctx context.Context, req contracts.Request) job.Outcome
	// Process runs a request of lane; an upload of the other kind comes back as a Route outcome.
	Process(ctx context.Context, req contracts.Request, lane job.Kind) job.Outcome
}

// WorkerConfig holds one instance's pull-loop settings.
type WorkerConfig struct {
	// Lanes are the lanes this instance serves and its slots in each (jobs of that kind at once).
	// Every instance also triages, whatever its lanes.
	Lanes           map[job.Kind]int
	TriageSlots     int           // requests triaged at once (each a stat and an 8 KiB read)
	InProgressEvery time.Duration // 0: a third of the shortest ack wait (triage's or a lane's)
	BackoffBase     time.Duration // first NakWithDelay
	BackoffMax      time.Duration // cap of the growing delay
	DrainTimeout    time.Duration // how long in-flight jobs may finish after a stop
	PublishTimeout  time.Duration
	PullWait        time.Duration // how long one pull request waits for a message
	// RescueEvery is how often the worker looks for stranded work, messages no consumer will deliver
	// again (rescue.go); it also looks at start-up. 0: every minute.
	RescueEvery time.Duration

	// Admission, when set, is asked before every pull: while a dependency the jobs need is down it
	// blocks, so the worker takes no work it would only hand back, burning a delivery each time.
	Admission Admission

	// Words tell the jobs' errors (required; the app hands in pipeline.Words): the public sentence
	// of a request given up, and the whole chain for the log line and the dead letter's Mw-Last-Error.
	Words job.Words
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
		Lanes:          DefaultSlots(2),
		TriageSlots:    4, // I/O only (a few round trips each): enough to keep the lanes fed
		BackoffBase:    5 * time.Second,
		BackoffMax:     3 * time.Minute,
		DrainTimeout:   30 * time.Second,
		PublishTimeout: 10 * time.Second,
		PullWait:       10 * time.Second,
		RescueEvery:    time.Minute,
	}
}

// Validate checks the settings.
func (c WorkerConfig) Validate() error {
	if len(c.Lanes) == 0 {
		return fmt.Errorf("an instance must serve at least one lane (WorkerConfig.Lanes: one or more of %s)", job.KindsInWords())
	}
	for l, n := range c.Lanes {
		if !slices.Contains(Lanes, l) {
			return fmt.Errorf("unknown lane %q: lanes are %s", l, job.KindsInWords())
		}
		if n < 1 {
			return fmt.Errorf("the %s lane needs at least 1 slot, got %d (WorkerConfig.Lanes[%s])", l, n, l)
		}
	}
	switch {
	case c.TriageSlots < 1:
		return fmt.Errorf("triage slots must be at least 1, got %d", c.TriageSlots)
	case c.BackoffBase <= 0 || c.BackoffMax < c.BackoffBase:
		return fmt.Errorf("backoff base %s and max %s must be positive with max ≥ base", c.BackoffBase, c.BackoffMax)
	case c.DrainTimeout < 0:
		return fmt.Errorf("drain timeout must not be negative")
	case c.PublishTimeout <= 0 || c.PullWait < time.Second:
		return fmt.Errorf("publish timeout must be positive and pull wait at least 1s")
	case c.RescueEvery < 0:
		return fmt.Errorf("the rescue period must not be negative, got %s", c.RescueEvery)
	}
	return nil
}

// ErrDraining is the cause given to jobs cancelled because the drain timeout passed.
var ErrDraining = errors.New("worker is shutting down")

// Worker is the pull loop: it pulls from triage and from the lanes it serves, one message per free
// slot, keeps each in progress while it runs, and hands its outcome to the settlement (settle.go).
// Beside it run the advisory path (advisory.go) and the rescue (rescue.go), which settle the same way.
type Worker struct {
	cfg     Config
	wcfg    WorkerConfig
	js      jetstream.JetStream
	proc    Processor
	log     zerolog.Logger
	pools   map[job.Kind]*slots.Pool   // by lane; "" is triage
	busy    map[job.Kind]*atomic.Int64 // messages being handled, by lane
	held    atomic.Int64               // messages being handled
	settler *settler
	backlog *backlog
}

// Observer is told how each message was settled; it feeds metrics. It may be nil.
type Observer interface {
	Settled(outcome string, kind job.Kind, deliveries uint64)
	Published(subject string, d time.Duration)
	PublishFailed(subject string)
	// Rescued is told of each stranded message the worker settled (rescue.go): lane "" is triage;
	// action is retried, gave_up, removed (its request was settled or moved on) or finished.
	Rescued(lane job.Kind, action string)
}

// NewWorker returns a worker. Provision must have run (here or by an operator) before Run.
func NewWorker(js jetstream.JetStream, cfg Config, wcfg WorkerConfig, proc Processor, obs Observer, log zerolog.Logger) (*Worker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := wcfg.Validate(); err != nil {
		return nil, err
	}
	if wcfg.Words == nil {
		return nil, errors.New("WorkerConfig.Words is not set: the worker tells a job's errors in the pipeline's words (pipeline.Words)")
	}
	if wcfg.InProgressEvery <= 0 {
		wcfg.InProgressEvery = cfg.shortestAckWait() / 3
	}
	done := newSettledMemory(js, cfg)
	w := &Worker{cfg: cfg, wcfg: wcfg, js: js, proc: proc, log: log,
		pools: map[job.Kind]*slots.Pool{job.Triage: slots.NewPool("triage", wcfg.TriageSlots)},
		busy:  map[job.Kind]*atomic.Int64{job.Triage: new(atomic.Int64)},
		settler: &settler{cfg: cfg, rules: rules{cfg: cfg, words: wcfg.Words}, wcfg: wcfg, js: js,
			tally: tally{obs: obs, words: wcfg.Words}, done: done, claims: &rescueClaims{mem: done}},
		backlog: &backlog{js: js, cfg: cfg, log: log}}
	for l, n := range wcfg.Lanes {
		w.pools[l] = slots.NewPool(string(l), n)
		w.busy[l] = new(atomic.Int64)
	}
	return w, nil
}

// LaneSlots describe one of this instance's pools: triage or a lane it serves.
type LaneSlots struct {
	Name    string // triage, image or video
	Durable string // the shared consumer it pulls from
	Size    int    // its slots
	busy    *atomic.Int64
}

// Busy is how many messages of the lane this instance is handling now (a pull waiting for a message
// holds a slot but is not counted).
func (l LaneSlots) Busy() int { return int(l.busy.Load()) }

// Slots lists triage, then the served lanes in Lanes order (for health and metrics).
func (w *Worker) Slots() []LaneSlots {
	out := []LaneSlots{{Name: "triage", Durable: w.cfg.Durable, Size: w.pools[job.Triage].Size(), busy: w.busy[job.Triage]}}
	for _, l := range Lanes {
		if p, ok := w.pools[l]; ok {
			out = append(out, LaneSlots{Name: string(l), Durable: w.cfg.Lane(l).Durable(), Size: p.Size(), busy: w.busy[l]})
		}
	}
	return out
}

// Capacity is how many messages this instance holds at most.
func (w *Worker) Capacity() int {
	n := 0
	for _, p := range w.pools {
		n += p.Size()
	}
	return n
}

// Held is how many messages this instance is handling now.
func (w *Worker) Held() int { return int(w.held.Load()) }

// Run pulls and processes messages until ctx ends, then drains: in-flight jobs get DrainTimeout to
// finish; what is left is cancelled and Nak'd for prompt redelivery. Run returns after every job settled.
func (w *Worker) Run(ctx context.Context) error {
	consumers := map[job.Kind]jetstream.Consumer{}
	for lane := range w.pools {
		durable := w.cfg.Durable
		if lane != job.Triage {
			durable = w.cfg.Lane(lane).Durable()
		}
		cons, err := w.js.Consumer(ctx, w.cfg.RequestsStream(), durable)
		if err != nil && ctx.Err() != nil {
			return nil // stopped before it started: nothing to drain
		}
		if err != nil {
			return fmt.Errorf("looking up consumer %s on stream %s (provision the streams at start, or run `mediaworker streams apply`): %w", durable, w.cfg.RequestsStream(), err)
		}
		consumers[lane] = cons
	}
	// Jobs outlive the pull context during the drain; they are cancelled only when the drain times out.
	jobsCtx, cancelJobs := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancelJobs(nil)
	var loops, jobs sync.WaitGroup
	loops.Add(2)
	advisories := &advisories{s: w.settler, backlog: w.backlog, wait: w.wcfg.PullWait, log: w.log}
	rescue := &rescuer{s: w.settler, backlog: w.backlog, every: w.wcfg.RescueEvery, log: w.log}
	go func() { defer loops.Done(); advisories.run(ctx) }()
	go func() { defer loops.Done(); rescue.run(ctx) }()
	for lane, cons := range consumers {
		loops.Add(1)
		go func() { defer loops.Done(); w.pull(ctx, jobsCtx, &jobs, lane, cons) }()
	}
	loops.Wait()

	done := make(chan struct{})
	go func() { jobs.Wait(); close(done) }()
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

// pull is one lane's loop (lane "" is triage): a free slot, admission, then exactly one message. The
// worker never asks for more than it has free slots for, so a message is never buffered here.
func (w *Worker) pull(ctx, jobsCtx context.Context, jobs *sync.WaitGroup, lane job.Kind, cons jetstream.Consumer) {
	pool := w.pools[lane]
	for ctx.Err() == nil {
		release, err := pool.Acquire(ctx)
		if err != nil {
			return
		}
		if err := w.admit(ctx); err != nil {
			release()
			return
		}
		msg, err := nextMsg(ctx, cons, w.wcfg.PullWait)
		if err != nil {
			release()
			if ctx.Err() == nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) {
				w.log.Warn().Err(err).Str("lane", laneName(lane)).Msg("pulling failed; retrying")
				sleepCtx(ctx, time.Second)
			}
			continue
		}
		jobs.Add(1)
		w.held.Add(1)
		w.busy[lane].Add(1)
		go func() {
			defer jobs.Done()
			defer release()
			defer w.held.Add(-1)
			defer w.busy[lane].Add(-1)
			w.handle(jobsCtx, lane, msg)
		}()
	}
}

// OutageProbe is what an Admission may also offer: DownNow probes at once and reports whether a
// dependency the jobs need is down. A job that failed for a transient cause while one is down is held
// (InProgress) until it is back and then handed back at once, so an outage costs each request in hand
// one delivery, however long it lasts.
type OutageProbe interface {
	DownNow(ctx context.Context) bool
}

// admit waits until the admission hook lets work in (or ctx ends).
func (w *Worker) admit(ctx context.Context) error {
	if w.wcfg.Admission == nil {
		return ctx.Err()
	}
	return w.wcfg.Admission.Wait(ctx)
}

// nextMsg pulls exactly one message, waiting at most wait for it.
func nextMsg(ctx context.Context, cons jetstream.Consumer, wait time.Duration) (jetstream.Msg, error) {
	pullCtx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	return cons.Next(jetstream.FetchContext(pullCtx))
}

// handle runs one message, a request (triage) or a lane's work, to exactly one settlement.
func (w *Worker) handle(ctx context.Context, lane job.Kind, msg jetstream.Msg) {
	meta, err := msg.Metadata()
	if err != nil {
		w.log.Error().Err(err).Str("subject", msg.Subject()).Msg("message without JetStream metadata; terminating it")
		settleMsg(msg, actTerm, 0)
		return
	}
	d := newDelivery(lane, msg, meta)
	log := w.log.With().Str("lane", laneName(lane)).Uint64("seq", d.reqSeq).Uint64("delivery", d.deliveries).Logger()

	// One span per delivery, parented by the trace context the API put on the request.
	ctx, span := tracing.Tracer().Start(tracing.Extract(ctx, msg.Headers()), "process event",
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attribute.String("messaging.system", "nats"),
			attribute.String("messaging.destination.name", msg.Subject()),
			attribute.Int64("messaging.nats.stream_sequence", int64(meta.Sequence.Stream)),
			attribute.Int64("messaging.nats.delivered", int64(meta.NumDelivered))))
	defer span.End()

	req, perr := contracts.ParseRequest(msg.Data())
	d.req = req
	log = log.With().Str("mediaId", req.MediaID).Str("key", req.S3Key).Str("bucket", req.S3Bucket).Logger()
	// Before the refusal too: a refused request whose ack was lost (or whose worker died publishing the
	// refusal) is redelivered like any other, and refusing it again would store a second answer.
	if w.settledBefore(ctx, d, log) {
		return
	}
	if perr != nil {
		_ = w.settle(ctx, d, job.Refused(req, perr), log)
		return
	}
	span.SetAttributes(attribute.String("media.id", req.MediaID), attribute.String("media.key", req.S3Key))

	// InProgress runs until the message is settled: publishing the outcome may need retries too.
	stop := w.keepAlive(msg)
	defer stop()
	start := time.Now()
	var out job.Outcome
	if lane == job.Triage {
		out = w.proc.Triage(ctx, req)
	} else {
		out = w.proc.Process(w.withProgress(ctx, req.MediaID), req, lane)
	}
	log = log.With().Str("kind", string(out.MediaKind)).Dur("took", time.Since(start)).Logger()
	span.SetAttributes(attribute.String("media.kind", string(out.MediaKind)), attribute.String("media.outcome", out.Kind.String()))
	if out.Err != nil {
		span.SetStatus(codes.Error, out.Err.Error())
	}
	_ = w.settle(ctx, d, out, log)
}

// settledBefore acks a delivery whose request was settled already (its ack was lost after the duplicate
// window): triage's when it was routed, a lane's when it ended for good; one whose settlement was
// interrupted after its outbox was recorded is finished instead of run. The memory is a guard, not a
// dependency: if it cannot be read, the job runs.
func (w *Worker) settledBefore(ctx context.Context, d *delivery, log zerolog.Logger) bool {
	if d.lane == job.Triage && d.deliveries == 1 {
		return false // a request's first delivery: nothing can have settled it (a lane's copy can be a late duplicate)
	}
	state, ob, err := w.settler.done.recall(ctx, d.reqSeq)
	if err != nil {
		log.Warn().Err(err).Msg("could not read the settled-requests memory; running the job")
		return false
	}
	if state == "" && d.lane == job.Triage {
		if state, ob, err = w.routedBefore(ctx, d); err != nil {
			log.Warn().Err(err).Msg("could not look for the request's lane copy; running the job")
			return false
		}
	}
	if state == settledPublishing {
		// An earlier delivery published (some of) its outcome and died before recording the end.
		if err := w.settler.finish(ctx, d, ob, log); err != nil {
			log.Warn().Err(err).Msg("finishing an interrupted settlement failed; handing the message back")
			if !errors.Is(err, errHandedBack) {
				_ = w.settler.apply(ctx, d, plan{then: actNak, delay: w.wcfg.backoff(d.deliveries)}, log)
			}
			return true
		}
		log.Info().Str("settled", state).Msg("request settled already; finished its settlement without running again")
		w.settler.tally.settled("duplicate", "", d)
		return true
	}
	if state == "" || d.lane != job.Triage && state != settledFinal {
		return false
	}
	_ = w.settler.apply(ctx, d, plan{then: actAck}, log)
	log.Info().Str("settled", state).Msg("request settled already; acked without running again")
	w.settler.tally.settled("duplicate", "", d)
	return true
}

// routedBefore is how far a redelivered request went that the settled-requests memory does not know:
// triage routes without a record (settledState), so its lane copy is looked for in the requests stream
// (movedOn). Without one, the memory is read again: the lane records the request's end before it
// removes its copy, so a lane that finished between the first read and the search is seen now.
func (w *Worker) routedBefore(ctx context.Context, d *delivery) (string, *outbox, error) {
	moved, err := w.backlog.movedOn(ctx, d)
	if err != nil {
		return "", nil, err
	}
	if moved {
		return settledRouted, nil, nil
	}
	return w.settler.done.recall(ctx, d.reqSeq)
}

// settle hands out to the settlement with what only the pull loop knows: whether the drain stopped
// the job, and whether a dependency the jobs need is down now (the Admission's OutageProbe). The probe
// asks the dependencies at once, so it is made only for a retry that would otherwise wait out a backoff.
func (w *Worker) settle(ctx context.Context, d *delivery, out job.Outcome, log zerolog.Logger) error {
	var f facts
	if out.Kind == job.Retry {
		f.draining = errors.Is(context.Cause(ctx), ErrDraining)
		probe, ok := w.wcfg.Admission.(OutageProbe)
		f.outage = ok && !f.draining && d.msg != nil && d.deliveries < uint64(w.cfg.MaxDeliver) && probe.DownNow(ctx)
	}
	return w.settler.settle(ctx, d, out, f, log)
}

// withProgress makes the job's progress reports go out on its progress subject, at most once a second.
// They are plain NATS messages: nobody has to be listening, and nothing is stored.
func (w *Worker) withProgress(ctx context.Context, mediaID string) context.Context {
	subject := w.cfg.Subjects().ProgressSubject(mediaID)
	return progress.With(ctx, progress.Throttle(time.Second, func(f float64) {
		data, _ := json.Marshal(contracts.Progress{MediaID: mediaID, Percent: math.Round(f*1000) / 10, Stage: "transcoding"})
		publishProgress(w.js.Conn(), subject, data)
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
				inProgress(msg)
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done); <-finished }) }
}

// backoff grows exponentially with the delivery count, capped, with ±25% jitter so instances that failed
// together do not retry together.
func (c WorkerConfig) backoff(deliveries uint64) time.Duration {
	d := c.BackoffBase
	for i := uint64(1); i < deliveries && d < c.BackoffMax; i++ {
		d *= 2
	}
	d = min(d, c.BackoffMax)
	jitter := time.Duration(rand.Int64N(int64(d)/2+1)) - d/4
	return max(d+jitter, 100*time.Millisecond)
}

func laneName(lane job.Kind) string {
	if lane == job.Triage {
		return "triage"
	}
	return string(lane)
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
