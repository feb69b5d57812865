// Package app wires mediaworker together: one constructor builds the NATS connection (or the embedded
// server), the streams, the object store, the scanner, the transcoders, the pipeline, the pull loop and the
// HTTP server from one Config. cmd/mediaworker only fills the Config from flags and environment.
package app

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/mediaworker/mediaworker/ingest"
	natsjs "github.com/mediaworker/mediaworker/jetstream"
	"github.com/mediaworker/mediaworker/job"
	"github.com/mediaworker/mediaworker/membudget"
	"github.com/mediaworker/mediaworker/objstore/natsobj"
	"github.com/mediaworker/mediaworker/objstore/s3"
	"github.com/mediaworker/mediaworker/pipeline"
	"github.com/mediaworker/mediaworker/scanner"
	"github.com/mediaworker/mediaworker/transcoder"
	"github.com/mediaworker/mediaworker/webhooks"
)

// Storage backends.
const (
	StorageNATS = "nats"
	StorageS3   = "s3"
)

// NATSConfig says how to reach NATS: a URL, or an embedded server when URL is empty.
type NATSConfig struct {
	URL  string            // empty: start the embedded server
	Auth natsjs.ClientAuth // the worker's credentials; the embedded server accepts them (see EmbeddedConfig.Auth)
	// Embedded configures the embedded server; its Auth is always NATSConfig.Auth (see embedded).
	Embedded natsjs.EmbeddedConfig
}

// embedded is the embedded server's configuration with the worker's credentials.
func (c NATSConfig) embedded() natsjs.EmbeddedConfig {
	e := c.Embedded
	e.Auth = c.Auth
	return e
}

// Config is everything `mediaworker run` needs.
type Config struct {
	NATS      NATSConfig
	Provision bool // create or update streams and consumer at start
	Streams   natsjs.Config
	Worker    natsjs.WorkerConfig
	Lanes     string // the lanes this instance serves: "all" (ServedLanes), a subset (natsjs.ParseLanes)
	// PerLane are each lane's settings in this instance, by kind (DefaultConfig has every registered
	// kind's, from job.Spec.Lane).
	PerLane map[job.Kind]*LaneConfig
	// MaxMemory is the memory budget in bytes of each lane (membudget): a job's transform starts only
	// while the expected peaks of its lane's transforms running, its own included, fit in it (images
	// from their headers, videos from their probes, ffmpeg's processes counted in the video lane's);
	// a job larger than the whole budget runs alone in its lane. A budget per lane keeps lanes
	// independent: a long encode never holds images back. Slots still bound how many jobs run; this
	// bounds the bytes they hold. 0 turns the budgets off.
	MaxMemory int64

	Storage string // nats | s3
	S3      s3.Config
	NATSObj natsobj.Config

	Scanner scanner.Config
	// MaxSignatureAge fails readiness when clamd's official signatures are older; 0 never judges them.
	MaxSignatureAge time.Duration
	Pipeline        pipeline.Config
	Images          transcoder.ImageConfig
	Videos          transcoder.VideoConfig
	// Documents is the document renderer's, started only when a recipe asks for documents.
	Documents transcoder.DocumentConfig

	HTTPAddr     string // "" disables HTTP
	ServeObjects bool   // serve /objects/<bucket>/<key> from the NATS object store
	URLSigning   URLSigningConfig
	ScanAPI      ScanAPIConfig

	// NoReuse turns the reuse memory off: every upload is transformed, even bytes seen an hour ago
	// (every upload is scanned either way). Reuse bounds the memory; Pipeline.ReuseAcrossBuckets says
	// whether it is shared across buckets.
	NoReuse bool
	Reuse   natsjs.ReuseConfig

	// Ingest turns the object store's upload events into requests (package ingest).
	Ingest ingest.Config

	// Webhooks are the HTTP endpoints answers and virus events are delivered to (none by default).
	Webhooks webhooks.Config
}

// LaneConfig is one lane's settings in this instance (its consumer's, shared by every instance, are
// natsjs.Config.Lanes).
type LaneConfig struct {
	Slots int // how many of the kind's jobs run at once
}

// defaultLanes are every registered kind's lane settings on a machine of cores CPUs.
func defaultLanes(cores int) map[job.Kind]*LaneConfig {
	out := map[job.Kind]*LaneConfig{}
	for k, n := range natsjs.DefaultSlots(cores) {
		out[k] = &LaneConfig{Slots: n}
	}
	return out
}

// slots are lane's slots (0 when unset).
func (c Config) slots(lane job.Kind) int {
	if l := c.PerLane[lane]; l != nil {
		return l.Slots
	}
	return 0
}

// DefaultMaxMemory is the memory budget's default, each lane's: with it and the default slots, the
// worker's peak RSS stayed under 300 MiB over three passes of a mixed corpus of real files
// (bench/RESULTS.md, "Memory"), its idle RSS and the embedded NATS server included; ffmpeg's
// processes are beside it, in the video lane's budget.
const DefaultMaxMemory = 128 << 20

// DefaultConfig returns the embedded, single-machine default of DESIGN.md.
func DefaultConfig() Config {
	c := Config{
		// The embedded server is a single server holding the only copy: fsync every write, so a power
		// cut loses nothing acknowledged (about 1 ms per write; docs/operations.md has the measurements).
		NATS: NATSConfig{Embedded: natsjs.EmbeddedConfig{Listen: "127.0.0.1:4222", DataDir: "./data", SyncAlways: true}},

		Provision: true,
		Streams:   natsjs.DefaultConfig(),
		Worker:    natsjs.DefaultWorkerConfig(),
		Lanes:     "all",
		PerLane:   defaultLanes(runtime.NumCPU()),
		MaxMemory: DefaultMaxMemory,
		Storage:   StorageNATS,
		S3:        s3.DefaultConfig(),
		NATSObj:   natsobj.DefaultConfig(),
		Scanner:   scanner.DefaultConfig(),
		// freshclam checks for updates every 2 hours; three days without one is an outage, not a delay.
		MaxSignatureAge: 72 * time.Hour,
		Pipeline:        pipeline.DefaultConfig(),
		Images:          transcoder.DefaultImageConfig(),
		Videos:          transcoder.DefaultVideoConfig(),
		Documents:       transcoder.DefaultDocumentConfig(),
		HTTPAddr:        "127.0.0.1:8080",
		ServeObjects:    true,
		URLSigning:      DefaultURLSigningConfig(),
		ScanAPI:         DefaultScanAPIConfig(),
		Reuse:           natsjs.DefaultReuseConfig(),
		Ingest:          ingest.DefaultConfig(),
	}
	c.Pipeline.TmpDir = filepath.Join(os.TempDir(), "mediaworker")
	return c
}

// Validate checks every part and says which setting is wrong.
func (c Config) Validate() error {
	var errs []error
	add := func(what string, err error) {
		// Each of a part's errors on its own line with the prefix: `run` blames every line on the
		// settings that cause it (cmd/mediaworker/startup.go), and only a whole line can be matched.
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				errs = append(errs, fmt.Errorf("%s: %w", what, e))
			}
		} else if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", what, err))
		}
	}
	if c.NATS.URL == "" {
		add("embedded nats", c.NATS.embedded().Validate())
	} else {
		add("nats", c.NATS.Auth.Validate())
	}
	add("streams", c.Streams.Validate())
	if _, err := natsjs.ParseLanes(c.Lanes); err != nil {
		errs = append(errs, fmt.Errorf("lanes (Lanes): %w", err))
	}
	for _, k := range natsjs.Lanes {
		if n := c.slots(k); n < 1 {
			errs = append(errs, fmt.Errorf("the %s lane's slots (PerLane[%s].Slots) must be at least 1, got %d", k, k, n))
		}
	}
	if c.MaxMemory != 0 && c.MaxMemory < membudget.MinSize {
		errs = append(errs, fmt.Errorf("max memory (MaxMemory) %d bytes (%.1f MiB) is below the least budget, %d MiB: a 2048 px variant alone takes 16 MiB (0 turns the budget off)",
			c.MaxMemory, float64(c.MaxMemory)/(1<<20), membudget.MinSize>>20))
	}
	switch c.Storage {
	case StorageS3:
		add("s3", c.S3.Validate())
	case StorageNATS:
		add("nats object store", c.NATSObj.Validate())
	default:
		errs = append(errs, fmt.Errorf("storage must be %q or %q, got %q", StorageNATS, StorageS3, c.Storage))
	}
	add("scanner", c.Scanner.Validate())
	if c.MaxSignatureAge < 0 {
		errs = append(errs, fmt.Errorf("max signature age must not be negative, got %s (0 turns the check off)", c.MaxSignatureAge))
	}
	add("pipeline", c.Pipeline.Validate())
	add("images", c.Images.Validate())
	add("videos", c.Videos.Validate())
	if c.Pipeline.MaxTransformTime < c.Videos.MaxCPUTime {
		// Wall-clock time is never the input's fault: the cap must not stop a transform before the CPU
		// limit, which is, could (one thread of it on a core of its own).
		errs = append(errs, fmt.Errorf("max transform time %s is below the video max cpu time %s: a transform could be stopped before it used the CPU time it may",
			c.Pipeline.MaxTransformTime, c.Videos.MaxCPUTime))
	}
	add("url signing", c.URLSigning.Validate())
	add("webhooks", c.Webhooks.Validate())
	if !c.NoReuse {
		add("reuse", c.Reuse.Validate())
	}
	add("ingest", c.Ingest.Validate())
	if c.Ingest.Enabled {
		routes, _ := ingest.ParseRoutes(c.Ingest.Routes) // Validate told what is wrong with them
		for _, r := range routes {
			if q := c.Pipeline.QuarantineBucket; q != "" && r.Bucket == q {
				errs = append(errs, fmt.Errorf("ingest routes (Ingest.Routes): %q watches the quarantine bucket (Pipeline.QuarantineBucket): infected uploads moved there would be jobs again", r))
			}
			if _, ok := c.Pipeline.Recipes[r.Recipe]; r.Recipe != "" && !ok {
				errs = append(errs, fmt.Errorf("ingest routes (Ingest.Routes): %q names the recipe %q, which the config file's recipes do not define: every upload it watches would be refused", r, r.Recipe))
			}
		}
	}
	if c.Ingest.Enabled && c.Storage == StorageS3 && c.Ingest.Subjects == "" && c.Ingest.Stream == "" {
		errs = append(errs, fmt.Errorf("ingest with S3 storage needs the subjects the S3 server sends its events to (Ingest.Subjects) or a stream holding them (Ingest.Stream)"))
	}
	if c.ScanAPI.Enabled && c.ScanAPI.StallTimeout < 0 {
		errs = append(errs, fmt.Errorf("the scan API's stall timeout (ScanAPI.StallTimeout) %s must not be negative", c.ScanAPI.StallTimeout))
	}
	if c.ScanAPI.Enabled && c.ScanAPI.Concurrency < 1 {
		errs = append(errs, fmt.Errorf("scan api concurrency must be at least 1, got %d", c.ScanAPI.Concurrency))
	}
	if c.ScanAPI.Enabled && c.ScanAPI.Token == "" && c.HTTPAddr != "" && !isLoopback(c.HTTPAddr) {
		errs = append(errs, fmt.Errorf("POST /v1/scan would be open to the network on %s without a token: set ScanAPI.Token, or turn the scan API off (ScanAPI.Enabled false)", c.HTTPAddr))
	}
	if c.Scanner.MaxStreamBytes > 0 && c.Pipeline.MaxInputBytes > c.Scanner.MaxStreamBytes {
		errs = append(errs, fmt.Errorf("max input bytes (%d) is above what the scanner may stream (%d): inputs could not all be scanned", c.Pipeline.MaxInputBytes, c.Scanner.MaxStreamBytes))
	}
	return errors.Join(errs...)
}

// ServedLanes are the lanes this instance pulls from: Lanes as listed, or with "all" (the default)
// every kind's but those only recipes turn on (job.Spec.OptIn: documents) when none of this worker's
// recipes does.
func (c Config) ServedLanes() []job.Kind {
	lanes, _ := natsjs.ParseLanes(c.Lanes) // checked by Validate
	if c.Lanes != "" && c.Lanes != "all" {
		return lanes
	}
	return slices.DeleteFunc(lanes, func(k job.Kind) bool {
		spec, _ := job.SpecOf(k)
		return spec.OptIn && !c.Pipeline.Asks(k)
	})
}

// servedLanes are cfg.ServedLanes as /health and the log show them: "image,video".
func servedLanes(cfg Config) string {
	names := []string{}
	for _, k := range cfg.ServedLanes() {
		names = append(names, string(k))
	}
	return strings.Join(names, ",")
}

// workerConfig is the pull loop's configuration: the served lanes with their slots.
func (c Config) workerConfig() natsjs.WorkerConfig {
	w := c.Worker
	w.Lanes = map[job.Kind]int{}
	for _, l := range c.ServedLanes() {
		w.Lanes[l] = c.slots(l)
	}
	return w
}

// isLoopback reports whether a listen address only accepts connections from this machine.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
