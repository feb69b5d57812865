package app

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mediaworker/mediaworker/console"
	"github.com/mediaworker/mediaworker/contracts"
	natsjs "github.com/mediaworker/mediaworker/jetstream"
	"github.com/mediaworker/mediaworker/job"
	"github.com/mediaworker/mediaworker/pipeline"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// recentOutcomes is how many outcomes the console lists; seedMessages is how many of the newest
// messages of the responses stream are read at start at least (an infected upload writes two).
const (
	recentOutcomes = 50
	seedMessages   = 2 * recentOutcomes
	rememberedJobs = 500 // durations kept for joining with responses
)

// consoleState is what the console knows beyond what NATS and the parts answer on demand: the jobs this
// instance holds, their durations, the recent outcomes and the throughput ring. The outcomes come from
// the responses stream (every instance's, and from before a restart), not from this process's memory.
type consoleState struct {
	streams natsjs.Config
	log     zerolog.Logger
	ring    *console.Ring

	mu        sync.Mutex
	jobs      map[uint64]*trackedJob
	nextJob   uint64
	durations map[string]jobEnd // by mediaId, for jobs this instance ran
	order     []string          // durations' keys, oldest first
	recent    []console.Outcome // newest first
	viruses   map[string]contracts.VirusEvent

	stop func()
}

type jobEnd struct {
	kind     string
	file     string
	duration time.Duration
}

// trackedJob is one job in the console's list: running, or waiting for another delivery after a
// transient failure (retrying), until its request is answered.
type trackedJob struct {
	console.Job
	req      contracts.Request // the request's identity, to replace the entry when it is delivered again
	retrying bool
}

// sameRequest reports whether a and b are one request, as far as the console can tell (it does not
// see the stream sequence).
func sameRequest(a, b contracts.Request) bool {
	return a.MediaID == b.MediaID && a.S3Bucket == b.S3Bucket && a.S3Key == b.S3Key
}

func newConsoleState(streams natsjs.Config, log zerolog.Logger) *consoleState {
	return &consoleState{streams: streams, log: log, ring: &console.Ring{}, jobs: map[uint64]*trackedJob{},
		durations: map[string]jobEnd{}, viruses: map[string]contracts.VirusEvent{}, stop: func() {}}
}

// track wraps the pipeline so the console sees the jobs in hand and how long each took.
func (s *consoleState) track(p natsjs.Processor) natsjs.Processor { return trackedProcessor{p, s} }

type trackedProcessor struct {
	next natsjs.Processor
	s    *consoleState
}

// Triage is quick and is not tracked while it runs; but a request it hands back (the object store
// down, say) is still owed an answer, so it is listed as retrying like a lane's job, until it is
// triaged, its lane's job starts or it is answered.
func (t trackedProcessor) Triage(ctx context.Context, req contracts.Request) pipeline.Outcome {
	start := time.Now()
	out := t.next.Triage(ctx, req)
	s := t.s
	s.mu.Lock()
	defer s.mu.Unlock()
	s.forgetRequest(req)
	if out.Kind == pipeline.Retry {
		s.nextJob++
		s.jobs[s.nextJob] = &trackedJob{Job: console.Job{MediaID: req.MediaID, File: console.FileName(req.S3Key), Started: start, Progress: -1},
			req: req, retrying: true}
		s.forgetRetrying(rememberedJobs)
	}
	return out
}

// forgetRequest drops the retrying entry a delivery of req left: a new delivery replaces it.
func (s *consoleState) forgetRequest(req contracts.Request) {
	for id, j := range s.jobs {
		if j.retrying && sameRequest(j.req, req) {
			delete(s.jobs, id)
		}
	}
}

func (t trackedProcessor) Process(ctx context.Context, req contracts.Request, lane pipeline.MediaKind) pipeline.Outcome {
	s := t.s
	start := time.Now()
	file := console.FileName(req.S3Key)
	s.mu.Lock()
	s.forgetRequest(req)
	s.nextJob++
	id := s.nextJob
	s.jobs[id] = &trackedJob{Job: console.Job{MediaID: req.MediaID, File: file, Started: start, Progress: -1}, req: req}
	s.mu.Unlock()

	out := t.next.Process(ctx, req, lane)

	s.mu.Lock()
	defer s.mu.Unlock()
	if out.Kind == pipeline.Retry {
		// Handed back (after a hold while a dependency is down, or with a backoff): the request is
		// still owed an answer, so it stays listed until one is on the responses stream (record).
		s.jobs[id].retrying = true
		s.forgetRetrying(rememberedJobs)
	} else {
		delete(s.jobs, id)
		if _, ok := s.durations[req.MediaID]; !ok {
			s.order = append(s.order, req.MediaID)
		}
		s.durations[req.MediaID] = jobEnd{kind: string(out.MediaKind), file: file, duration: time.Since(start)}
		if len(s.order) > rememberedJobs {
			delete(s.durations, s.order[0])
			s.order = s.order[1:]
		}
		// The worker publishes the response after this returns, so it normally finds the duration;
		// fill it in should the response have been listed first (a redelivery settling late).
		for i := range s.recent {
			if s.recent[i].MediaID == req.MediaID && s.recent[i].Duration == 0 {
				s.recent[i].Duration = time.Since(start)
			}
		}
	}
	return out
}

// forgetRetrying drops the oldest retrying entries beyond keep: their answers may come from another
// instance after this console lost track of the stream, and the list must not grow forever.
func (s *consoleState) forgetRetrying(keep int) {
	var ids []uint64
	for id, j := range s.jobs {
		if j.retrying {
			ids = append(ids, id)
		}
	}
	if len(ids) <= keep {
		return
	}
	slices.Sort(ids) // ids grow with each delivery: the lowest are the oldest
	for _, id := range ids[:len(ids)-keep] {
		delete(s.jobs, id)
	}
}

// progressed records a progress report (videos publish them while they transcode).
func (s *consoleState) progressed(p contracts.Progress) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, j := range s.jobs {
		if j.MediaID == p.MediaID {
			j.Progress = p.Percent / 100
			if k, ok := progressKind(); ok {
				j.Kind = string(k)
			}
		}
	}
}

// progressKind is the kind whose jobs report progress (the one kind that does: a report tells the
// job's kind), false when no single kind does.
func progressKind() (job.Kind, bool) {
	var out []job.Kind
	for _, spec := range job.Specs() {
		if spec.Progress {
			out = append(out, spec.Kind)
		}
	}
	if len(out) != 1 {
		return "", false
	}
	return out[0], true
}

func (s *consoleState) inFlight() []console.Job {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]console.Job, 0, len(s.jobs))
	for _, j := range s.jobs {
		job := j.Job
		if j.retrying {
			job.State = "retrying"
		}
		out = append(out, job)
	}
	slices.SortFunc(out, func(a, b console.Job) int { return a.Started.Compare(b.Started) })
	return out
}

func (s *consoleState) outcomes() ([]console.Outcome, *console.Ring) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.recent), s.ring
}

// start follows the responses stream (seeded with the last hour, or the newest seedMessages when that
// reaches further back) and the progress subjects, until stop.
func (s *consoleState) start(js jetstream.JetStream) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	client := natsjs.NewClient(js, s.streams)
	stopListening, err := client.Listen(func(a natsjs.Answer) {
		var p contracts.Progress
		if json.Unmarshal(a.Data, &p) == nil {
			s.progressed(p)
		}
	}, natsjs.AnswerProgress)
	if err != nil {
		s.log.Warn().Err(err).Msg("console: subscribing to job progress failed; progress bars stay empty")
	}
	go func() {
		defer close(done)
		var lastErr string
		for {
			// A restart of the follower reads the same messages again: it starts from a clean list.
			err := client.Follow(ctx, time.Now().Add(-time.Hour), seedMessages, s.clear, s.record)
			if ctx.Err() != nil {
				return
			}
			if err != nil && err.Error() != lastErr { // once per cause, not every 5 s of an outage
				lastErr = err.Error()
				s.log.Warn().Err(err).Msg("console: reading the responses stream failed; trying again every 5s")
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(5 * time.Second):
			}
		}
	}()
	s.stop = sync.OnceFunc(func() {
		cancel()
		<-done
		if stopListening != nil {
			stopListening()
		}
	})
}

// clear forgets the outcomes read so far.
func (s *consoleState) clear() {
	s.mu.Lock()
	s.recent, s.ring = nil, &console.Ring{}
	s.mu.Unlock()
}

// record adds one message of the responses stream, with its headers: a virus event is remembered until
// its response arrives; a response becomes an outcome.
func (s *consoleState) record(subject string, header nats.Header, data []byte, at time.Time) {
	subj := s.streams.Subjects()
	s.mu.Lock()
	defer s.mu.Unlock()
	if subject == subj.Virus {
		var v contracts.VirusEvent
		if json.Unmarshal(data, &v) == nil && v.MediaID != "" {
			s.viruses[v.MediaID] = v
		}
		return
	}
	if subject != subj.Response {
		return
	}
	var r contracts.Response
	if json.Unmarshal(data, &r) != nil || r.MediaID == "" {
		return
	}
	o := outcomeOf(r, header.Get(natsjs.HeaderOutcome), at)
	if v, ok := s.viruses[r.MediaID]; ok {
		o.Result, o.Virus, o.Action = console.ResultInfected, v.VirusName, v.ActionTaken
		o.File = console.FileName(v.S3Key)
		delete(s.viruses, r.MediaID)
	}
	for id, j := range s.jobs { // answered: no longer waiting for another delivery
		if j.retrying && j.MediaID == r.MediaID {
			o.File = j.File
			delete(s.jobs, id)
		}
	}
	if end, ok := s.durations[r.MediaID]; ok {
		o.Duration, o.File = end.duration, end.file
		if o.Kind == "" {
			o.Kind = end.kind
		}
	}
	s.ring.Add(at, o.Result)
	s.recent = slices.Insert(s.recent, 0, o)
	if len(s.recent) > recentOutcomes {
		s.recent = s.recent[:recentOutcomes]
	}
	if len(s.viruses) > recentOutcomes { // events whose response never came: do not grow forever
		clear(s.viruses)
	}
}

// outcomeOf reads a response as the console lists it; kind is its Mw-Outcome header (jetstream.
// HeaderOutcome), "" when it has none. The preview is a URL the response carries (the low WebP, or a
// video's poster), so the page shows nothing /objects would not serve to the API anyway; its
// placeholder and colour are the response's asset facts.
func outcomeOf(r contracts.Response, kind string, at time.Time) console.Outcome {
	o := console.Outcome{MediaID: r.MediaID, Time: at, Error: r.Error, Result: resultOf(r, kind)}
	if kind == "" && o.Result == console.ResultInfected {
		// An older worker's response: the signature's name from its text, should the virus event (which
		// names it, and which record prefers) be missing. A response with the header is shown as it is.
		o.Virus = strings.TrimSpace(strings.TrimPrefix(strings.TrimPrefix(r.Error, "virus detected"), ":"))
	}
	if r.Metadata != nil {
		for _, spec := range job.Specs() {
			if spec.Recognises != nil && spec.Recognises(r.Metadata.MIME) {
				o.Kind = string(spec.Kind)
			}
		}
		// As the response has them: the console checks them before it draws anything from them.
		o.ThumbHash, o.DominantColor, o.Reused = r.Metadata.ThumbHash, r.Metadata.DominantColor, r.Metadata.Reused
	}
	for _, v := range r.Processed {
		for _, spec := range job.Specs() {
			if spec.Preview != nil && spec.Preview(v) {
				o.PreviewURL = v.URL
				if o.Kind == "" { // the upload's type, when the answer has it, tells the kind (a document's variants are images)
					o.Kind = string(spec.Kind)
				}
			}
		}
	}
	return o
}

// resultOf is how the request ended, as the response's Mw-Outcome header says. A response without one
// was stored by a worker from before the header (responses are kept 7 days): only then is it read from
// the response itself, its success flag and the first words of its error, as those workers wrote them.
// Never for a response that has the header: an error's words are for people, and a failure whose text
// happens to start like another kind's is still a failure.
func resultOf(r contracts.Response, kind string) string {
	switch kind {
	case natsjs.OutcomeSuccess:
		return console.ResultSuccess
	case natsjs.OutcomeFailed:
		return console.ResultFailed
	case natsjs.OutcomeVirus:
		return console.ResultInfected
	case natsjs.OutcomeGaveUp:
		return console.ResultGaveUp
	case "":
		switch { // an older worker's response
		case r.Success:
			return console.ResultSuccess
		case strings.HasPrefix(r.Error, "virus detected"):
			return console.ResultInfected
		case strings.HasPrefix(r.Error, "gave up after"):
			return console.ResultGaveUp
		}
		return console.ResultFailed
	}
	// An outcome this version does not know (a newer worker's): what the response itself says.
	if r.Success {
		return console.ResultSuccess
	}
	return console.ResultFailed
}
