package pipeline

import (
	"context"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/objstore"
	"github.com/mediaworker/mediaworker/scanner"
	"github.com/mediaworker/mediaworker/tracing"
	"github.com/mediaworker/mediaworker/transcoder"
	"go.opentelemetry.io/otel/codes"
)

// Scanner scans exactly size bytes read from r with clamd.
type Scanner interface {
	Scan(ctx context.Context, r io.Reader, size int64) (scanner.Verdict, error)
}

// InPlaceScanner is a Scanner that can also scan a finished file where it lies (clamd on a unix socket:
// FILDES), which costs clamd less than the stream: no copy through the socket and none on its disk.
// When ScansInPlace says so, the download goes to the scratch file only and ScanFile scans it there.
type InPlaceScanner interface {
	Scanner
	ScansInPlace() bool
	ScanFile(ctx context.Context, path string) (scanner.Verdict, error)
}

// ImageTransformer turns one image into the variants of a recipe.
type ImageTransformer interface {
	// TransformRecipe writes the variants specs describe; nil specs: the default recipe's.
	TransformRecipe(ctx context.Context, srcPath, outDir string, specs []transcoder.ImageVariantSpec) (transcoder.ImageResult, error)
}

// VideoTransformer turns one video into an MP4, a poster and optionally HLS.
type VideoTransformer interface {
	// Probe describes the upload (and refuses it if it is not a video within the limits) before a
	// slot is taken; TransformProbed reuses what it learned.
	Probe(ctx context.Context, path string) (*transcoder.VideoProbe, error)
	TransformProbed(ctx context.Context, probe *transcoder.VideoProbe, outDir string) (transcoder.VideoResult, error)
}

// Verdicts remembers virus verdicts across deliveries. The infected object is deleted before the
// virus event is durable; should the worker die or a reply be lost in between, the next delivery finds
// no object, and without this record it would answer "not found" instead of "virus detected".
type Verdicts interface {
	Remember(ctx context.Context, ev contracts.VirusEvent) error
	Recall(ctx context.Context, mediaID string) (*contracts.VirusEvent, error) // nil, nil: none
}

// Observer is told when a stage ends, what clamd said and how many bytes moved; it feeds metrics.
// It may be nil.
type Observer interface {
	StageDone(kind MediaKind, stage string, d time.Duration, err error)
	Scanned(verdict string)                // clean, infected, refused, error
	Transferred(direction string, n int64) // "in" (download) or "out" (upload)
}

// Config holds the pipeline's own settings.
type Config struct {
	TmpDir           string // parent of the per-job scratch dirs
	MaxInputBytes    int64  // refuse larger objects before download (and while streaming)
	PublicBaseURL    string // "" → the store's own URL for each key
	QuarantineBucket string // "" → infected objects are deleted

	// MinFreeBytes is the scratch space that must stay free beside a job's needs; DiskFactor × the
	// object's size is what a job needs (input plus outputs). Short of that the job waits and retries.
	MinFreeBytes int64
	DiskFactor   float64

	// JobTimeout is the stall interval (--job-timeout): how long a phase may go without progress.
	// Fetching (stat, download, scan, detect) and storing (upload) move their bytes in calls that do
	// not report, so each of those phases gets JobTimeout as a whole; a video's transform gets it from
	// its last sign of progress (watch: ffmpeg's position advanced, or a tool used CPU time), however
	// long it runs in all. Running out is a stall, never the input's fault: transient, retried with
	// backoff. What makes a transform the input's fault is its CPU time (the transcoder's RLIMIT_CPU
	// budgets) or a declared limit, which are the same on an idle machine and a busy one.
	JobTimeout time.Duration
	// MaxTransformTime (--max-transform-time) caps a transform's wall-clock time however it
	// progresses, so a tool that keeps moving forever still ends. It is far above any CPU budget (an
	// encode may use at most --video-max-cpu-time of CPU, 2 h, and a 10 s clip 10 min): only a
	// machine too busy to give a transform a fraction of a core gets there, so running out is retried
	// like a stall. An image's transform has no other bound in time: see enter.
	MaxTransformTime time.Duration
	// Recipes are the output sets requests may name, by name. The default recipe is always known:
	// absent here, it is the image transformer's default variants.
	Recipes map[string]Recipe
	// ReuseFingerprint changes whenever a setting that shapes outputs changes (sizes, qualities,
	// recipes, video settings): it is part of the reuse memory's key, so outputs made under other
	// settings are never handed out as this configuration's.
	ReuseFingerprint string
	// ReuseAcrossBuckets answers an upload from the same bytes remembered in another bucket (reuse.go).
	// Off by default: a fast "reused" answer tells the request's tenant that another bucket's tenant
	// uploaded exactly these bytes within the reuse TTL, and the worker reads a bucket the request never
	// named. Turn it on only where every bucket belongs to one tenant.
	ReuseAcrossBuckets bool
}

// DefaultConfig returns the defaults: 500 MiB inputs, scratch under the OS temp dir with 256 MiB kept
// free, 30 minutes without progress for a stall and 6 hours at most for a transform.
func DefaultConfig() Config {
	return Config{
		TmpDir:           os.TempDir(),
		MaxInputBytes:    500 << 20,
		MinFreeBytes:     256 << 20,
		DiskFactor:       3,
		JobTimeout:       30 * time.Minute,
		MaxTransformTime: 6 * time.Hour,
	}
}

// Validate checks the settings.
func (c Config) Validate() error {
	if c.TmpDir == "" {
		return errors.New("tmp dir is empty")
	}
	if c.MaxInputBytes <= 0 {
		return fmt.Errorf("max input bytes must be positive, got %d", c.MaxInputBytes)
	}
	if c.MinFreeBytes < 0 || c.DiskFactor < 1 {
		return fmt.Errorf("min free bytes must not be negative and disk factor must be at least 1, got %d and %g", c.MinFreeBytes, c.DiskFactor)
	}
	if c.JobTimeout <= 0 {
		return fmt.Errorf("job timeout must be positive, got %s", c.JobTimeout)
	}
	if c.MaxTransformTime < c.JobTimeout {
		return fmt.Errorf("max transform time %s must be at least the job timeout %s (the stall interval)", c.MaxTransformTime, c.JobTimeout)
	}
	if c.QuarantineBucket != "" {
		if err := contracts.ValidateBucket(c.QuarantineBucket); err != nil {
			return fmt.Errorf("quarantine bucket %q %v", c.QuarantineBucket, err)
		}
	}
	return validateRecipes(c.Recipes)
}

// Pipeline runs jobs. It is safe for concurrent use. It runs the steps; each concept is its own type:
// fetching and scanning the upload (fetcher: download.go, triage.go), what differs by kind (kinds.go),
// storing the outputs (storer: outputs.go) and the memory of repeated bytes (reuser: reuse.go).
type Pipeline struct {
	cfg      Config
	in       *fetcher
	kinds    kinds // what differs by kind (kinds.go)
	out      *storer
	reuse    *reuser
	observer Observer
	now      func() time.Time
	memory   MemoryBudget               // the shared budget
	lanes    map[MediaKind]MemoryBudget // a kind's own budget, when it has one (Deps.LaneMemory)
	scratch  *scratchDirs               // the jobs' scratch dirs (scratch.go)
}

// fetcher looks the upload up, downloads it, has clamd scan it and settles an infected one.
type fetcher struct {
	cfg      Config
	store    objstore.Store
	scanner  Scanner
	observer Observer
	verdicts Verdicts
	now      func() time.Time
}

// storer puts a job's outputs into the store and names their URLs.
type storer struct {
	cfg     Config
	store   objstore.Store
	signURL func(url, key string) string
}

// reuser is the memory of repeated bytes (reuse.go).
type reuser struct {
	cfg   Config
	reuse Reuse // nil: off
	store objstore.Store
	out   *storer // the URLs of copied outputs
}

// Deps are the capabilities a pipeline composes.
type Deps struct {
	Store    objstore.Store
	Scanner  Scanner
	Images   ImageTransformer
	Videos   VideoTransformer
	Observer Observer // nil: nobody is told
	Verdicts Verdicts // nil: verdicts are not remembered across deliveries
	// SignURL, if set, turns a variant's URL into the one the response carries (signed, expiring).
	SignURL func(url, key string) string
	// Reuse answers repeated clean bytes from what they became before (reuse.go): the scan still
	// runs, the transform does not; nil: every upload is transformed.
	Reuse Reuse
	// Memory, if set, admits each transform by its expected memory (memory.go); nil: slots alone
	// bound what runs at once.
	Memory MemoryBudget
	// LaneMemory holds a kind's own budget, by kind: its jobs take from it, the others from Memory,
	// so a video larger than its budget runs alone in its lane without holding images back. A kind
	// without an entry takes from Memory.
	LaneMemory map[MediaKind]MemoryBudget
	// Documents renders documents for recipes that ask for them (kind_document.go); nil: none does.
	Documents DocumentRenderer
}

// New returns a pipeline.
func New(cfg Config, d Deps) (*Pipeline, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("pipeline config: %w", err)
	}
	if d.Store == nil || d.Scanner == nil || d.Images == nil || d.Videos == nil {
		return nil, errors.New("pipeline needs a store, a scanner and both transformers")
	}
	out := &storer{cfg: cfg, store: d.Store, signURL: d.SignURL}
	return &Pipeline{
		cfg:      cfg,
		in:       &fetcher{cfg: cfg, store: d.Store, scanner: d.Scanner, observer: d.Observer, verdicts: d.Verdicts, now: time.Now},
		kinds:    kindHandlers(d),
		out:      out,
		reuse:    &reuser{cfg: cfg, reuse: d.Reuse, store: d.Store, out: out},
		observer: d.Observer,
		now:      time.Now,
		memory:   d.Memory,
		lanes:    d.LaneMemory,
		scratch:  &scratchDirs{root: cfg.TmpDir},
	}, nil
}

// job is the state that flows through the steps of one request.
type job struct {
	ctx    context.Context // the job's context; each phase adds its own budget
	cancel context.CancelFunc
	// endPhase ends the current phase's context (see enter).
	endPhase context.CancelFunc
	req      contracts.Request
	lane     MediaKind // the pool this job runs in ("" in tests: any)
	keys     contracts.OutputKeys
	recipe   Recipe    // the outputs the request asks for
	hash     hash.Hash // the upload's SHA-256 as it is downloaded
	sha256   string    // its hex digest, once downloaded
	reuseKey string    // the reuse memory's key of this upload, "" when reuse does not apply
	reused   bool      // answered from the reuse memory
	done     bool      // answered before the last step (reused): the steps after are skipped
	dir      string    // scratch dir, from the pool scratch, emptied and given back to it at the end
	scratch  *scratchDirs
	input    string    // dir/input
	head     *headCopy // the input's first bytes, kept as they were downloaded (sniff reads them)
	sniffed  *sniffed  // what the upload is, sniffed once (sniff.go)
	info     objstore.Info
	mime     string
	kind     MediaKind
	probe    *transcoder.VideoProbe // a video's description, from detection
	probing  *pendingProbe          // a video's probe, started beside the scan (probe.go)
	scanned  chan scanResult        // clamd's verdict on the downloaded bytes
	made     made                   // what the transform made (or the reuse memory recalled): response.go
	outs     []output               // files the transform made, uploaded by the next step
	memory   func()                 // gives back the memory admit took (memory.go)
	out      Outcome
}

// step is one stage of a job. Returning a non-nil error ends the job; setting j.out.Kind (Infected,
// Route) ends it too. The context is checked between steps.
type step struct {
	name  string
	phase phase
	run   func(ctx context.Context, j *job) error
}

// phase groups steps under one time budget. Fetching (stat, download, scan, detect) and storing
// (upload) wait on the store, clamd and NATS: each gets --job-timeout as a whole. Transforming is the
// job's own work: it may take as long as it keeps moving (a stall is --job-timeout without progress),
// up to MaxTransformTime. Running out of time is a stall in every phase, transient: the job runs again.
// Only CPU time (RLIMIT_CPU, in the transcoder) or a declared limit makes a transform the input's fault.
type phase int

const (
	fetching phase = iota
	admitting
	transforming
	storing
)

// ErrJobTimeout is the cause of a transform cancelled at MaxTransformTime, moving or not: transient,
// like a stall (wall-clock time is never the input's fault).
var ErrJobTimeout = errors.New("transform ran past the longest a transform may take")

// ErrStalled is the cause of a phase cancelled for making no progress: a fetch or an upload that took
// longer than --job-timeout, or a transform without a sign of progress for --job-timeout.
var ErrStalled = errors.New("stalled")

// Process runs one validated request of lane (image or video) to its outcome. An upload that turns
// out to be of the other kind is not transformed here: its outcome routes it to its own lane. Scratch
// files are removed before it returns.
func (p *Pipeline) Process(ctx context.Context, req contracts.Request, lane MediaKind) (out Outcome) {
	defer func() { out.Response = withSource(out.Response, req) }()
	if contracts.ValidateMediaURL(req.MediaURL) != nil {
		// Every answer's originalUrl is a URI, and one the contract allows: without one from the
		// request, the object's own URL, in the form its variants' URLs take.
		req.MediaURL = p.out.url(req.S3Bucket, req.S3Key)
	}
	j := &job{req: req, lane: lane, keys: contracts.KeysFor(req)}
	j.recipe, _ = p.cfg.recipe(req) // an unknown one is refused by the first step (stat) before any work
	j.ctx, j.cancel = context.WithCancel(ctx)
	j.out = Outcome{Kind: Success, Response: newResponse(req)}
	defer j.cleanup()

	steps := []step{
		{"preparing", fetching, p.prepare},
		{"checking", fetching, p.check},
		{"downloading", fetching, p.in.download},
		{"scanning", fetching, p.scan},
		{"detecting", fetching, p.detect},
		{"waiting for memory", admitting, p.admit},
		{"transforming", transforming, p.transform},
		{"uploading", storing, p.upload},
	}
	cur, pctx, limit := phase(-1), j.ctx, time.Duration(0)
	for _, s := range steps {
		if s.phase != cur {
			cur = s.phase
			pctx, limit = p.enter(j, cur)
		}
		if pctx.Err() != nil {
			return p.fail(j, p.stopped(pctx, s.name, limit))
		}
		start := p.now()
		sctx, span := tracing.Tracer().Start(pctx, s.name)
		err := s.run(sctx, j)
		if err != nil && pctx.Err() != nil {
			err = p.stopped(pctx, s.name, limit)
		}
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
		if p.observer != nil {
			p.observer.StageDone(j.kind, s.name, p.now().Sub(start), err)
		}
		if err != nil {
			return p.fail(j, err)
		}
		if j.out.Kind != Success { // infected, or routed to the other lane
			return j.out
		}
		if j.done { // reused
			break
		}
	}
	j.respond()
	p.reuse.remember(pctx, j)
	return j.out
}

// enter starts a phase: its context carries the phase's time budget (the stall interval, and for a
// transform the watchdog and MaxTransformTime) and is cancelled when the next phase starts or the job
// ends. The limit it returns is the stall interval, for stopped's message.
//
// An image's transform is not watched: it runs in libvips, in this process, where a call cannot be
// interrupted (cancelling one frees nothing until it returns, and throws the finished work away) and
// reports nothing while it runs; its cost is bounded by the pixel, frame and metadata limits checked
// before any pixel is decoded. So a slow image on a busy machine finishes, however long its calls
// take; MaxTransformTime still applies between them.
func (p *Pipeline) enter(j *job, ph phase) (context.Context, time.Duration) {
	if j.endPhase != nil {
		j.endPhase()
	}
	if ph == admitting {
		// Waiting for memory is not a stall: another job holds it, and it ends when that job's
		// transform does. Only the job's own context (a shutdown, a lost delivery) ends the wait.
		ctx, cancel := context.WithCancel(j.ctx)
		j.endPhase = cancel
		return ctx, 0
	}
	if ph != transforming {
		ctx, cancel := context.WithTimeoutCause(j.ctx, p.cfg.JobTimeout, ErrStalled)
		j.endPhase = cancel
		return ctx, p.cfg.JobTimeout
	}
	ctx, cancel := context.WithTimeoutCause(j.ctx, p.cfg.MaxTransformTime, ErrJobTimeout)
	j.endPhase = cancel
	if h, ok := p.kinds[j.kind]; ok && h.watched() {
		wctx, stop := watch(ctx, p.cfg.JobTimeout)
		ctx, j.endPhase = wctx, func() { stop(); cancel() }
	}
	return ctx, p.cfg.JobTimeout
}

// stopped explains a step whose context ended: a stall (of the store, clamd or NATS while fetching or
// storing, of a media tool or the machine while transforming), a transform at MaxTransformTime, a
// shutdown or a lost delivery. None of them is the input's fault: all are transient.
func (p *Pipeline) stopped(ctx context.Context, stage string, limit time.Duration) error {
	cause := context.Cause(ctx)
	within := limit.Round(time.Millisecond)
	switch {
	case errors.Is(cause, ErrJobTimeout):
		most := p.cfg.MaxTransformTime
		return transientSaid(stage, fmt.Sprintf("still running after %s, the longest a transform may take (the machine is far too busy); will retry", most),
			fmt.Errorf("%w: still running after %s (Pipeline.MaxTransformTime); will retry", ErrJobTimeout, most))
	case errors.Is(cause, ErrStalled) && stage == "transforming":
		return transientSaid(stage, fmt.Sprintf("the media tool made no progress within %s (it stalled, or the machine is too busy to run it); will retry", within),
			fmt.Errorf("%w: no progress within %s (ffmpeg's position did not advance and it used no CPU time); will retry", ErrStalled, within))
	case errors.Is(cause, ErrStalled):
		return transientSaid(stage, fmt.Sprintf("no progress within %s (a slow or stalled object store, virus scanner or NATS server)", within),
			fmt.Errorf("%w: no progress within %s (a slow or stalled store, clamd or NATS); will retry", ErrStalled, within))
	}
	return transientSaid(stage, jobStopped, fmt.Errorf("job stopped: %w", cause))
}

// fail turns err into a Failed or Retry outcome with the failure response the API will see; a request
// refused as it stands (notAnInput) is answered as every refused request is (Refused).
func (p *Pipeline) fail(j *job, err error) Outcome {
	var pe *contracts.ParseError
	if errors.As(err, &pe) {
		out := Refused(j.req, pe)
		out.MediaKind, out.MIME = j.kind, j.mime
		return out
	}
	var e *Error
	if !errors.As(err, &e) {
		e = transient("processing", err)
	}
	kind, msg := Retry, e.Public()
	if e.Class == Permanent {
		kind, msg = Failed, withoutScratchPaths(j, msg)
	}
	return Outcome{Kind: kind, MediaKind: j.kind, MIME: j.mime, Err: e, Response: failureResponse(j.req, msg)}
}

func (j *job) cleanup() {
	j.releaseMemory()
	j.stopProbe()
	if j.endPhase != nil {
		j.endPhase()
	}
	j.cancel()
	if j.dir != "" {
		j.scratch.release(j)
	}
}

func (p *Pipeline) prepare(ctx context.Context, j *job) error {
	dir, err := p.scratch.take()
	if err != nil {
		return transient("preparing scratch dir", err)
	}
	j.dir, j.scratch = dir, p.scratch
	j.input = filepath.Join(dir, "input")
	return nil
}

// check refuses what is missing or over the input cap before a byte is downloaded, and waits (as a
// transient failure) when the scratch disk cannot hold the job.
func (p *Pipeline) check(ctx context.Context, j *job) error {
	info, err := p.in.stat(ctx, j)
	if err != nil || j.out.Kind != Success {
		return err
	}
	j.info = info
	free, err := FreeBytes(p.cfg.TmpDir)
	if err != nil {
		return transient("checking scratch space", err)
	}
	need := int64(float64(info.Size)*p.cfg.DiskFactor) + p.cfg.MinFreeBytes
	if free < need {
		return transientSaid("checking scratch space",
			fmt.Sprintf("the scratch disk has %s free; this job needs %s", objstore.FormatBytes(free), objstore.FormatBytes(need)),
			fmt.Errorf("scratch disk %s has %s free; this job needs %s (%.0f× the input plus %s kept free): free space there, point --tmp-dir (MW_TMP_DIR) at a larger disk, or lower --scratch-min-free (MW_SCRATCH_MIN_FREE)",
				p.cfg.TmpDir, objstore.FormatBytes(free), objstore.FormatBytes(need), p.cfg.DiskFactor, objstore.FormatBytes(p.cfg.MinFreeBytes)))
	}
	return nil
}

// detect takes what the upload is (sniffed once: sniff.go), routes it when it is not this lane's
// kind, and has its kind's handler check it.
func (p *Pipeline) detect(ctx context.Context, j *job) error {
	mime, kind, err := j.sniff()
	if err == nil {
		err = documentsRefused(j.recipe, mime, kind)
	}
	if err != nil {
		return err
	}
	j.mime, j.kind = mime, kind
	j.out.MediaKind = kind
	if j.lane != "" && kind != j.lane {
		// Triage sniffed the head, this is the whole file: rare, but never transform in the wrong pool.
		j.out = Routed(kind, mime)
		return nil
	}
	h, err := p.kinds.of(j)
	if err != nil {
		return nil // refused by transform, as before
	}
	return h.check(ctx, j)
}

func (p *Pipeline) transform(ctx context.Context, j *job) error {
	defer j.releaseMemory() // the outputs are files now: uploading them holds no pictures
	h, err := p.kinds.of(j)
	if err != nil {
		return err
	}
	// The outputs go next to the input: the transformers use fixed names that cannot be "input", and
	// a directory less per job is a mkdir and rmdir less (measurable at hundreds of jobs a second).
	m, err := h.transform(ctx, j, j.dir)
	if err != nil {
		return classed("transforming", err)
	}
	j.made, j.outs = m, m.outs
	return nil
}
