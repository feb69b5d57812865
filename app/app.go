package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/ingest"
	natsjs "github.com/mediaworker/mediaworker/jetstream"
	"github.com/mediaworker/mediaworker/job"
	"github.com/mediaworker/mediaworker/membudget"
	"github.com/mediaworker/mediaworker/objstore"
	"github.com/mediaworker/mediaworker/objstore/natsobj"
	"github.com/mediaworker/mediaworker/objstore/s3"
	"github.com/mediaworker/mediaworker/pipeline"
	"github.com/mediaworker/mediaworker/scanner"
	"github.com/mediaworker/mediaworker/transcoder"
	"github.com/mediaworker/mediaworker/webhooks"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
)

// App is a wired, running-ready worker.
type App struct {
	cfg      Config
	log      zerolog.Logger
	embedded *server.Server
	nc       *nats.Conn
	js       jetstream.JetStream
	store    objstore.Store
	scanner  *scanner.Scanner
	sigs     *signatureWatch
	deps     *Deps // the pull loops' admission: intake pauses while a dependency is down
	console  *consoleState
	memory   map[job.Kind]*membudget.Budget // each lane's memory budget; nil: none (MaxMemory 0)
	scan     *scanHandler
	worker   *natsjs.Worker
	ingest   *ingest.Ingester // nil: ingest off
	metrics  *metrics
	webhooks *webhooks.Dispatcher // nil: no endpoints
	health   *health              // /health and /health/ready, made once the worker is
	http     *http.Server
	httpLn   net.Listener
	starting *Starting // answers on httpLn until Run serves the App there; nil without
	tmpLock  *os.File
	// TMPDIR as it was before New, restored by Close (tests run several apps in one process).
	oldTMPDIR            string
	hadTMPDIR, setTMPDIR bool
	closers              []func()
}

// New builds every part from cfg. On error, whatever was started is stopped again.
func New(ctx context.Context, cfg Config, log zerolog.Logger) (*App, error) {
	return newApp(ctx, cfg, log, nil)
}

// newApp is New, serving HTTP on starting's listener when there is one (Starting.NewApp).
func newApp(ctx context.Context, cfg Config, log zerolog.Logger, starting *Starting) (_ *App, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// a is a local, not the named result: `return nil, err` nils the result, and the closers below
	// (and this cleanup) must still see the app as built.
	a := &App{cfg: cfg, log: log}
	if cfg.HTTPAddr != "" {
		a.starting = starting
	}
	defer func() {
		if err != nil {
			a.Close()
		}
	}()

	a.metrics = newMetrics()
	if err := a.prepareTmpDir(); err != nil {
		return nil, err
	}
	if err := a.connect(ctx); err != nil {
		return nil, err
	}
	if cfg.Provision {
		if err := natsjs.Provision(ctx, a.js, cfg.Streams); err != nil {
			return nil, fmt.Errorf("provisioning streams: %w", err)
		}
		if !cfg.NoReuse {
			// Here, once, rather than by the first jobs of every instance at the same moment.
			if err := natsjs.ProvisionReuse(ctx, a.js, cfg.Streams, cfg.Reuse); err != nil {
				return nil, fmt.Errorf("provisioning the reuse memory: %w", err)
			}
		}
	} else if err := natsjs.CheckOwnership(ctx, a.js, cfg.Streams); err != nil {
		return nil, fmt.Errorf("checking the streams: %w", err)
	}
	if cfg.HTTPAddr != "" {
		if err := a.listenHTTP(); err != nil {
			return nil, err
		}
	}
	if a.store, err = a.openStore(ctx); err != nil {
		return nil, err
	}
	a.closers = append(a.closers, func() { _ = a.store.Close() })

	if a.scanner, err = scanner.New(cfg.Scanner); err != nil {
		return nil, fmt.Errorf("creating scanner: %w", err)
	}
	a.sigs = newSignatureWatch(a.scanner, cfg.MaxSignatureAge)
	a.metrics.watchSignatures(a.sigs.ageSeconds)
	a.scan = newScanHandler(cfg.ScanAPI, cfg.Pipeline.MaxInputBytes, cfg.Pipeline.TmpDir, cfg.Pipeline.MinFreeBytes, a.scanner, a.metrics, a.log)
	// clamd's defaults pass what they cannot scan as clean: refuse to start against a clamd whose
	// limits are below our input cap. A clamd that is down is not fatal: jobs wait for it anyway.
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = a.scanner.CheckLimits(cctx, cfg.Pipeline.MaxInputBytes)
	cancel()
	switch {
	case scanner.IsMisconfigured(err):
		return nil, fmt.Errorf("checking clamd at %s: %w", cfg.Scanner.Addr, err)
	case err != nil:
		a.log.Warn().Err(err).Msg("could not check clamd's limits (clamd unreachable?); jobs wait until it answers")
	}
	images, err := transcoder.NewImages(cfg.Images)
	if err != nil {
		return nil, fmt.Errorf("creating image transcoder: %w", err)
	}
	videos, err := transcoder.NewVideos(cfg.Videos)
	if err != nil {
		return nil, fmt.Errorf("creating video transcoder: %w", err)
	}
	images.UseFFmpeg(videos) // APNG and AVIF sequences, under the video limits
	docs, err := a.documents(ctx, cfg, videos)
	if err != nil {
		return nil, err
	}

	// While clamd, the store or scratch space is down the pull loops take nothing, so an outage does not
	// burn deliveries; a job's failed fetch, scan or upload makes the watcher look at once.
	deps, err := a.watchDeps(context.WithoutCancel(ctx), DefaultDepsConfig())
	if err != nil {
		return nil, err
	}
	a.deps = deps
	var reuse pipeline.Reuse
	if !cfg.NoReuse {
		reuse = natsjs.NewReuseMemory(a.js, cfg.Streams, cfg.Reuse)
		cfg.Pipeline.ReuseFingerprint = reuseFingerprint(cfg)
	}
	pdeps := pipeline.Deps{
		Store: a.store, Scanner: a.scanner, Images: images, Videos: videos,
		Observer: reportingObserver{a.metrics, deps}, Verdicts: natsjs.NewVerdicts(a.js, cfg.Streams),
		SignURL: a.signURL(), Reuse: reuse,
	}
	if docs != nil { // a nil *Documents in the interface would look like a renderer
		pdeps.Documents = docs
	}
	if cfg.MaxMemory > 0 {
		// A budget per lane, each of MaxMemory: the image lane's bounds the decodes in this process
		// (what the worker's peak RSS is made of), the video lane's the ffmpeg processes beside it. One
		// budget for both made lanes wait on each other: a 1080p encode is estimated above the default
		// budget, ran alone in it, and held every image for the whole encode.
		a.memory = map[job.Kind]*membudget.Budget{}
		lanes := map[job.Kind]pipeline.MemoryBudget{}
		for _, spec := range job.Specs() {
			b, err := membudget.New(cfg.MaxMemory)
			if err != nil {
				return nil, fmt.Errorf("creating the %s lane's memory budget (MaxMemory): %w", spec.Kind, err)
			}
			a.memory[spec.Kind] = b
			a.closers = append(a.closers, func() { _ = b.Close() })
			lanes[spec.Kind] = b // a child process's memory (ffmpeg's) is its own: no heap to give back
			if spec.InProcess {
				lanes[spec.Kind] = heapReturningBudget{b, cfg.MaxMemory / 2}
			}
			a.metrics.watchMemory(string(spec.Kind), b)
		}
		pdeps.LaneMemory = lanes
	}
	pipe, err := pipeline.New(cfg.Pipeline, pdeps)
	if err != nil {
		return nil, err
	}
	wcfg := cfg.workerConfig()
	wcfg.Admission = deps
	wcfg.Words = pipeline.Words
	if a.worker, err = natsjs.NewWorker(a.js, cfg.Streams, wcfg, a.consoleParts().track(pipe), a.metrics, log); err != nil {
		return nil, err
	}
	a.metrics.watchLanes(a.worker.Slots())
	a.health = &health{cfg: a.cfg, nc: a.nc, js: a.js, store: a.store, scanner: a.scanner, sigs: a.sigs, deps: deps, worker: a.worker}
	if cfg.Ingest.Enabled {
		if a.ingest, err = ingest.New(ctx, a.js, cfg.Ingest, ingest.Options{
			App: cfg.Streams.App, RequestSubject: cfg.Streams.Subjects().Request, Durable: cfg.Streams.Durable,
			Replicas: cfg.Streams.Replicas, ObjectStore: cfg.Storage == StorageNATS, Store: a.store,
			Quarantine: cfg.Pipeline.QuarantineBucket, Remember: cfg.Streams.ResponseMaxAge, Log: log,
		}); err != nil {
			return nil, fmt.Errorf("starting ingest: %w", err)
		}
		a.metrics.watchIngest(a.ingest.Counts)
	}
	if err := a.startWebhooks(ctx); err != nil {
		return nil, err
	}
	return a, nil
}

// heapReturningBudget gives the Go heap's free pages back to the system when a large transform is
// admitted, and every heapReturnEvery while it runs. Between collections the heap holds garbage and
// idle pages (object-store chunks, the embedded NATS server's caches: some 20–40 MiB), which the
// runtime returns only slowly; a large decode (a 24 MP HEIC's 140 MiB) on top of them is what sets
// the worker's peak RSS. With a budget per lane the video lane's downloads and uploads go on during
// such a decode (before, a video's transform and a large image's excluded each other), and on a
// loaded machine the decode takes tens of seconds: returning the heap only at its start let the peak
// reach 301 MiB. A forced collection costs a few milliseconds, next to the seconds such a decode takes.
type heapReturningBudget struct {
	*membudget.Budget
	large int64 // the estimate from which a job counts as large
}

// heapReturnEvery is how often the heap is given back while a large transform runs.
const heapReturnEvery = time.Second

func (b heapReturningBudget) Acquire(ctx context.Context, n int64) (func(), error) {
	release, err := b.Budget.Acquire(ctx, n)
	if err != nil || n < b.large {
		return release, err
	}
	debug.FreeOSMemory()
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(heapReturnEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				debug.FreeOSMemory()
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(done) })
		release()
	}, nil
}

// prepareTmpDir makes the scratch parent, takes an exclusive lock on it (two instances sharing one would
// delete each other's work), removes job dirs a crashed run left behind, and points libvips' TMPDIR at it.
func (a *App) prepareTmpDir() error {
	dir := a.cfg.Pipeline.TmpDir
	if err := privateDir(dir, tmpDirSetting); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("opening tmp dir lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return fmt.Errorf("%s %s is in use by another mediaworker (give each instance its own %s)", tmpDirSetting, dir, tmpDirSetting.field)
	}
	a.tmpLock = f
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("reading tmp dir: %w", err)
	}
	removed := 0
	for _, e := range entries {
		if e.IsDir() && strings.HasPrefix(e.Name(), pipeline.ScratchPrefix) {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err == nil {
				removed++
			}
		}
	}
	if removed > 0 {
		a.log.Info().Int("dirs", removed).Str("tmp_dir", dir).Msg("removed scratch dirs left by an earlier run")
	}
	// libvips writes its temporary files under TMPDIR (and reads the variable once, at its first use).
	a.oldTMPDIR, a.hadTMPDIR = os.LookupEnv("TMPDIR")
	a.setTMPDIR = true
	return os.Setenv("TMPDIR", dir)
}

func (a *App) connect(ctx context.Context) error {
	cc := natsjs.ConnectConfig{URL: a.cfg.NATS.URL, Name: "mediaworker", Auth: a.cfg.NATS.Auth, Reconnect: true, Log: a.log}
	if cc.URL == "" {
		if err := privateDir(a.cfg.NATS.Embedded.DataDir, dataDirSetting); err != nil {
			return err
		}
		s, err := natsjs.StartEmbedded(a.cfg.NATS.embedded(), a.log)
		if err != nil {
			return err
		}
		a.embedded = s
		cc.Embedded = s
		a.log.Info().Str("listen", a.cfg.NATS.Embedded.Listen).Str("url", s.ClientURL()).Str("data_dir", a.cfg.NATS.Embedded.DataDir).
			Str("auth", orNone(a.cfg.NATS.Auth.Method(), a.cfg.NATS.Embedded.ServerConfig)).Msg("embedded nats server started")
	}
	nc, js, err := natsjs.Connect(cc)
	if err != nil {
		return err
	}
	a.nc, a.js = nc, js
	return nil
}

func (a *App) openStore(ctx context.Context) (objstore.Store, error) {
	cfg := a.cfg
	if cfg.Storage == StorageNATS && cfg.ServeObjects && a.httpLn != nil && cfg.NATSObj.BaseURL == natsobj.DefaultConfig().BaseURL {
		cfg.NATSObj.BaseURL = a.publicHTTPBase() + objectsPath
	}
	return OpenStore(ctx, cfg, a.js)
}

// OpenStore opens the configured object store; the NATS backend uses js.
func OpenStore(ctx context.Context, cfg Config, js jetstream.JetStream) (objstore.Store, error) {
	switch cfg.Storage {
	case StorageS3:
		s, err := s3.New(cfg.S3)
		if err != nil {
			return nil, fmt.Errorf("opening s3 store: %w", err)
		}
		return s, nil
	default:
		ncfg := cfg.NATSObj
		// Buckets are as replicated as the streams (natsobj's default of 1 would leave them on one node).
		ncfg.Replicas = max(ncfg.Replicas, cfg.Streams.Replicas)
		s, err := natsobj.New(js, ncfg)
		if err != nil {
			return nil, fmt.Errorf("opening nats object store: %w", err)
		}
		return s, nil
	}
}

// Run serves HTTP and processes jobs until ctx ends, then drains and returns.
func (a *App) Run(ctx context.Context) error {
	httpErr := make(chan error, 1)
	if a.starting != nil {
		a.starting.handOver() // the start-up answers stop; the App answers on the same socket
	}
	if srv, ln := a.http, a.httpLn; srv != nil {
		// The goroutine keeps its own references: Close clears a.http, possibly before Serve starts.
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				httpErr <- err
			}
		}()
	}
	ready := a.log.Info().Str("lanes", servedLanes(a.cfg))
	for _, k := range a.cfg.ServedLanes() { // a lane not served has no slots to report
		ready = ready.Int("max_"+string(k)+"_jobs", a.cfg.slots(k))
	}
	ready.Str("storage", a.cfg.Storage).Str("clamd", a.cfg.Scanner.Addr).Str("http", a.cfg.HTTPAddr).
		Str("requests", a.cfg.Streams.Subjects().Request).Msg("mediaworker ready")

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- a.worker.Run(runCtx) }()
	ingestDone := make(chan struct{})
	if a.ingest != nil {
		// Upload events become requests while the worker runs; they stop first, with the pulling.
		go func() {
			defer close(ingestDone)
			if err := a.ingest.Run(runCtx); err != nil {
				a.log.Error().Err(err).Msg("ingest stopped: uploads are not turned into requests")
			}
		}()
	} else {
		close(ingestDone)
	}
	defer func() { cancel(); <-ingestDone }()
	var err error
	select {
	case err = <-done:
	case err = <-httpErr:
		cancel()
		<-done
		err = fmt.Errorf("http server: %w", err)
	}
	a.log.Info().Msg("stopped pulling; all jobs settled")
	return err
}

// Close stops everything New started. It is idempotent.
func (a *App) Close() {
	if a.http != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = a.http.Shutdown(sctx)
		cancel()
		_ = a.httpLn.Close() // Shutdown closes only listeners that Serve saw
		a.http = nil
	}
	a.starting.Close() // nil-safe; a no-op after Run's hand-over but for the socket, closed above
	for i := len(a.closers) - 1; i >= 0; i-- {
		a.closers[i]()
	}
	a.closers = nil
	if a.nc != nil {
		_ = a.nc.Drain()
		a.nc.Close()
		a.nc = nil
	}
	if a.embedded != nil {
		a.embedded.Shutdown()
		a.embedded.WaitForShutdown()
		a.embedded = nil
	}
	if a.tmpLock != nil {
		a.tmpLock.Close()
		a.tmpLock = nil
	}
	if a.setTMPDIR {
		if a.hadTMPDIR {
			os.Setenv("TMPDIR", a.oldTMPDIR)
		} else {
			os.Unsetenv("TMPDIR")
		}
		a.setTMPDIR = false
	}
}

// HTTPAddr is the address the HTTP server listens on (useful with port 0).
func (a *App) HTTPAddr() string {
	if a.httpLn == nil {
		return ""
	}
	return a.httpLn.Addr().String()
}

// signURL returns the pipeline's URL signer, or nil when URLs are not signed.
func (a *App) signURL() func(url, key string) string {
	sc := a.cfg.URLSigning
	if sc.Key == "" {
		return nil
	}
	return func(u, key string) string {
		if contracts.SignsPrefix(key) {
			return SignObjectPrefixURL(sc.Key, u, key, time.Now().Add(sc.TTL))
		}
		return SignObjectURL(sc.Key, u, key, time.Now().Add(sc.TTL))
	}
}

// orNone describes the embedded server's authentication for the log.
func orNone(method, serverConfig string) string {
	switch {
	case serverConfig != "":
		return "as " + serverConfig + " says"
	case method != "":
		return method
	}
	return "none (loopback only)"
}

// NATSURL is the client URL of the NATS in use.
func (a *App) NATSURL() string { return a.nc.ConnectedUrl() }

// documents starts the document renderer when a recipe asks for documents, nil otherwise: a worker
// without such a recipe never starts it and answers a document as it always did. Its check render
// runs now, so a renderer that cannot start under its limits stops the worker, and a kernel that
// lacks a confinement layer is a warning. With it the worker is made non-dumpable: its environment
// and memory (credentials) are then unreadable by another process of its user, the render child
// included, whatever the kernel's Landlock.
func (a *App) documents(ctx context.Context, cfg Config, videos *transcoder.Videos) (*transcoder.Documents, error) {
	asked := false
	for _, r := range cfg.Pipeline.Recipes {
		asked = asked || r.Documents
	}
	if !asked {
		return nil, nil
	}
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return nil, fmt.Errorf("making the worker non-dumpable before documents are rendered: %w", err)
	}
	docs, err := transcoder.NewDocuments(ctx, videos, cfg.Documents)
	if err != nil {
		return nil, fmt.Errorf("creating document renderer: %w", err)
	}
	if w := docs.Degraded(); w != "" {
		a.log.Warn().Msg(w)
	}
	inForce, _ := docs.Confinement()
	a.log.Info().Str("confinement", inForce).Msg("documents are rendered in a confined child process")
	return docs, nil
}
