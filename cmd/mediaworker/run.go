package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/mediaworker/mediaworker/app"
	natsjs "github.com/mediaworker/mediaworker/jetstream"
	"github.com/mediaworker/mediaworker/job"
	"github.com/mediaworker/mediaworker/tracing"
	"github.com/rs/zerolog"
)

// bindCommon registers the settings `run` and `submit` share: where NATS and the object store are.
func bindCommon(c *command, cfg *app.Config) {
	fs := c.fs
	fs.StringVar(&cfg.Streams.App, "app", cfg.Streams.App, "subject prefix: <app>.media.optimize.request etc.")
	fs.StringVar(&cfg.NATS.URL, "nats-url", cfg.NATS.URL, "NATS server URL; empty runs an embedded JetStream server")
	c.fallbacks["nats-url"] = []string{"NATS_URL"}
	bindNATSAuth(c, &cfg.NATS.Auth)
	fs.StringVar(&cfg.Storage, "storage", cfg.Storage, "object store: nats (JetStream object store of the NATS in use) or s3")
	fs.StringVar(&cfg.S3.Endpoint, "s3-endpoint", cfg.S3.Endpoint, "S3 endpoint host:port (with --storage s3)")
	fs.StringVar(&cfg.S3.AccessKey, "s3-access-key", cfg.S3.AccessKey, "S3 access key")
	fs.StringVar(&cfg.S3.SecretKey, "s3-secret-key", cfg.S3.SecretKey, "S3 secret key")
	c.fallbacks["s3-access-key"] = []string{"AWS_ACCESS_KEY_ID"}
	c.fallbacks["s3-secret-key"] = []string{"AWS_SECRET_ACCESS_KEY"}
	fs.StringVar(&cfg.S3.Region, "s3-region", cfg.S3.Region, "S3 region")
	fs.BoolVar(&cfg.S3.UseTLS, "s3-tls", cfg.S3.UseTLS, "use HTTPS to reach S3")
	fs.BoolVar(&cfg.S3.InsecureSkipVerify, "s3-insecure-skip-verify", cfg.S3.InsecureSkipVerify, "skip TLS certificate checks (self-signed test set-ups only)")
}

func cmdRun(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg := app.DefaultConfig()
	c := newCommand("run", "Run the worker. Without --nats-url (or NATS_URL) it starts an embedded NATS JetStream server\nwith its store under --data-dir, listening on --nats-listen so the nats CLI can connect.", "")
	bindCommon(c, &cfg)
	bindRun(c, &cfg)
	logLevel, logFormat := bindLog(c)
	clamdWait := bindStartup(c)
	c.bindConfig()
	if _, code, ok := parseOrUsage(c, args, stdout, stderr); !ok {
		return code
	}
	if !applyRecipes(c, &cfg, stderr) {
		return exitUsage
	}
	log, err := newLogger(stderr, *logLevel, *logFormat)
	if err != nil {
		fmt.Fprintf(stderr, "mediaworker run: %v\n", err)
		return exitUsage
	}
	for _, d := range slices.Concat(c.deprecated, c.emptyVars) {
		log.Warn().Msg(d)
	}
	for _, o := range c.overrides {
		log.Info().Msg(o)
	}
	if c.file != nil {
		log.Info().Str("file", c.file.path).Strs("recipes", recipeNames(cfg.Pipeline.Recipes)).Msg("settings read from the config file (variables and flags override it)")
	}
	// clamd is asked to scan whatever the worker accepts.
	cfg.Scanner.MaxStreamBytes = cfg.Pipeline.MaxInputBytes
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "mediaworker run: %s\n", oneLine(invalidSettings(c, args, bindRunSettings, err)))
		return exitUsage
	}
	if *clamdWait < 0 {
		fmt.Fprintf(stderr, "mediaworker run: --clamd-wait (MW_CLAMD_WAIT) is %s: it must be 0 or more\n", *clamdWait)
		return exitUsage
	}
	if err := app.PreflightLocal(cfg); err != nil {
		return failStart(stderr, exitFailure, err)
	}
	// From here start-up may wait minutes (clamd loading its database, NATS): HTTP answers at once and
	// says what it waits for, and the log says it when the wait begins, not when it gives up.
	var starting *app.Starting
	if cfg.HTTPAddr != "" {
		if starting, err = app.ServeStarting(cfg.HTTPAddr); err != nil {
			return failStart(stderr, exitFailure, err)
		}
		defer starting.Close()
	}
	starting.Set(fmt.Sprintf("checking clamd at %s", cfg.Scanner.Addr))
	if err := app.WaitForClamd(ctx, cfg, *clamdWait, func(msg string) {
		log.Warn().Str("clamd", cfg.Scanner.Addr).Str("http", cfg.HTTPAddr).Msg(msg)
		starting.Set(msg)
	}); err != nil {
		if ctx.Err() != nil {
			return exitOK
		}
		return failStart(stderr, exitFailure, err)
	}
	starting.Set("connecting to NATS, provisioning the streams and opening the object store")
	if tuneGoMemory() {
		log.Debug().Int("gogc", defaultGOGC).Int64("gomemlimit", defaultGoMemLimit).Msg("Go GC tuned for a bounded peak (set GOGC or GOMEMLIMIT to choose yourself)")
	}
	shutdownTracing, err := tracing.Setup(ctx, version)
	if err != nil {
		fmt.Fprintf(stderr, "mediaworker run: %s\n", oneLine(fmt.Sprintf("setting up tracing: %v; check the OTEL_* variables", err)))
		return exitUsage
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = shutdownTracing(sctx)
	}()
	if tracing.Enabled() {
		log.Info().Msg("tracing on: exporting spans over OTLP/HTTP as the OTEL_* variables say")
	}
	libvips := make(chan error, 1) // checked beside start-up, which takes longer
	// Only an instance that serves a lane transformed in process (images) needs libvips (a videos-only
	// box may lack it).
	if lanes, _ := natsjs.ParseLanes(cfg.Lanes); slices.ContainsFunc(lanes, inProcess) {
		go func() { libvips <- checkLibvips(ctx) }()
	} else {
		libvips <- nil
	}
	a, err := starting.NewApp(ctx, cfg, log)
	if err != nil && ctx.Err() != nil {
		log.Info().Msg("stopped during start-up")
		return exitOK
	}
	if err != nil {
		return failStart(stderr, exitFailure, err)
	}
	defer a.Close()
	if err := <-libvips; err != nil {
		return failStart(stderr, exitFailure, fmt.Errorf("%w; install libvips (scripts/install-deps.sh) — images cannot be transformed without it", err))
	}
	if err := a.Run(ctx); err != nil {
		log.Error().Err(err).Msg("stopped with an error")
		return exitFailure
	}
	return exitOK
}

// inProcess says whether kind's transforms run in the worker's own process (libvips).
func inProcess(k job.Kind) bool {
	s, _ := job.SpecOf(k)
	return s.InProcess
}

func bindRun(c *command, cfg *app.Config) {
	fs := c.fs
	fs.StringVar(&cfg.NATS.Embedded.Listen, "nats-listen", cfg.NATS.Embedded.Listen, "client address of the embedded NATS server; beyond loopback it requires a credential (--nats-token, --nats-user, --nats-nkey or --nats-server-config)")
	fs.StringVar(&cfg.NATS.Embedded.DataDir, "data-dir", cfg.NATS.Embedded.DataDir, "embedded NATS server's store directory")
	fs.BoolVar(&cfg.NATS.Embedded.SyncAlways, "nats-sync-always", cfg.NATS.Embedded.SyncAlways, "fsync every JetStream write of the embedded server, so a power cut loses nothing acknowledged (~1 ms per write); false: every --nats-sync-interval")
	durationVar(fs, &cfg.NATS.Embedded.SyncInterval, "nats-sync-interval", "without --nats-sync-always, how often the embedded server fsyncs (0: nats-server's 2m); a power loss loses what was acknowledged since")
	fs.StringVar(&cfg.NATS.Embedded.ServerConfig, "nats-server-config", cfg.NATS.Embedded.ServerConfig, "nats-server configuration file for the embedded server: accounts, users, permissions, operator (see deploy/nats)")
	fs.StringVar(&cfg.NATS.Embedded.TLSCert, "nats-listen-tls-cert", cfg.NATS.Embedded.TLSCert, "certificate (PEM) the embedded server presents: clients must then use TLS")
	fs.StringVar(&cfg.NATS.Embedded.TLSKey, "nats-listen-tls-key", cfg.NATS.Embedded.TLSKey, "key of --nats-listen-tls-cert")
	fs.BoolVar(&cfg.Provision, "provision", cfg.Provision, "create or update the streams and the consumer at start")
	fs.IntVar(&cfg.Streams.Replicas, "replicas", cfg.Streams.Replicas, "stream replicas (3 on a NATS cluster)")
	durationVar(fs, &cfg.Streams.AckWait, "ack-wait", "how long a delivery may go without ack or progress before redelivery")
	fs.IntVar(&cfg.Streams.MaxDeliver, "max-deliver", cfg.Streams.MaxDeliver, "deliveries before a request is dead-lettered")
	fs.IntVar(&cfg.Streams.MaxAckPending, "max-ack-pending", cfg.Streams.MaxAckPending, "messages in flight per consumer (triage and each lane) across all instances: at least 2 × the lane's slots of all instances (retries waiting count)")
	bindLaneLimits(fs, &cfg.Streams)
	fs.Int64Var(&cfg.Streams.MaxQueued, "max-queued", cfg.Streams.MaxQueued, "cap the request stream (0 = unlimited); a full queue refuses publishes")
	fs.StringVar(&cfg.Lanes, "lanes", cfg.Lanes, "lanes this instance serves: "+lanesHelp()+"; every instance also triages requests to the lanes")
	bindSlots(c, cfg)
	fs.Var(bytesFlag{&cfg.MaxMemory}, "max-memory", "memory budget of each lane's transforms running at once, each estimated from its header before it starts: the image lane's decodes in the worker and the video lane's ffmpeg processes beside it each get a budget of this size, so lanes never wait on each other; a job larger than its lane's budget runs alone in its lane (0: no budget, slots alone)")
	durationVar(fs, &cfg.Worker.DrainTimeout, "drain-timeout", "on SIGTERM, how long in-flight jobs may finish before they are stopped and handed back")
	durationVar(fs, &cfg.Worker.BackoffBase, "backoff-base", "first retry delay after a transient failure (doubles per delivery)")
	durationVar(fs, &cfg.Worker.BackoffMax, "backoff-max", "longest retry delay")

	fs.StringVar(&cfg.Pipeline.PublicBaseURL, "public-base-url", cfg.Pipeline.PublicBaseURL, "base of variant URLs (url = base + / + key); empty: the store's own URL")
	fs.StringVar(&cfg.Pipeline.QuarantineBucket, "quarantine-bucket", cfg.Pipeline.QuarantineBucket, "move infected uploads here instead of deleting them")
	fs.StringVar(&cfg.Pipeline.TmpDir, "tmp-dir", cfg.Pipeline.TmpDir, "scratch space for jobs (one per instance)")
	fs.Var(bytesFlag{&cfg.Pipeline.MaxInputBytes}, "max-input-bytes", "largest upload accepted (also the most clamd is asked to scan)")
	fs.Var(bytesFlag{&cfg.Pipeline.MinFreeBytes}, "scratch-min-free", "scratch space kept free; a job that would eat into it waits, and readiness fails below it")
	durationVar(fs, &cfg.Pipeline.JobTimeout, "job-timeout", "stall interval: how long a job may go without progress — a fetch (download, scan) or an upload as a whole; a video's transform since ffmpeg last moved (a new position, or CPU time used), however long it takes in all (an image's is not cut: libvips cannot be interrupted). A stall is retried, never the input's fault: that is CPU time (--video-cpu-per-second, --video-max-cpu-time) or a limit")
	durationVar(fs, &cfg.Pipeline.MaxTransformTime, "max-transform-time", "longest a transform may run however it progresses (at least --job-timeout and --video-max-cpu-time); past it the job is retried like a stall")

	fs.StringVar(&cfg.Scanner.Addr, "clamd-addr", cfg.Scanner.Addr, "clamd address: tcp://host:port or unix:///path")
	durationVar(fs, &cfg.Scanner.ScanTimeout, "clamd-scan-timeout", "longest wait for clamd's verdict")
	durationVar(fs, &cfg.MaxSignatureAge, "max-signature-age", "readiness fails when clamd's official signatures are older (0: never); a dev database is not judged")

	fs.Int64Var(&cfg.Images.MaxPixels, "image-max-pixels", cfg.Images.MaxPixels, "refuse images whose header declares more pixels (width × height × frames)")
	fs.Int64Var(&cfg.Images.MaxMetadataBytes, "image-max-metadata-bytes", cfg.Images.MaxMetadataBytes, "refuse images carrying more metadata (EXIF, XMP, colour profiles, comments), in bytes, before any decoder reads it")
	fs.IntVar(&cfg.Images.High, "image-high-size", cfg.Images.High, "long edge of the high WebP")
	fs.IntVar(&cfg.Images.Medium, "image-medium-size", cfg.Images.Medium, "long edge of the medium WebP")
	fs.IntVar(&cfg.Images.Low, "image-low-size", cfg.Images.Low, "long edge of the low WebP")
	fs.IntVar(&cfg.Images.QualityHigh, "image-high-quality", cfg.Images.QualityHigh, "WebP quality of the high variant")
	fs.IntVar(&cfg.Images.QualityMedium, "image-medium-quality", cfg.Images.QualityMedium, "WebP quality of the medium variant")
	fs.IntVar(&cfg.Images.QualityLow, "image-low-quality", cfg.Images.QualityLow, "WebP quality of the low variant")
	fs.IntVar(&cfg.Images.Effort, "image-webp-effort", cfg.Images.Effort, "WebP encoder effort 0 (fast) – 6 (small)")

	fs.StringVar(&cfg.Videos.FFmpeg, "ffmpeg", cfg.Videos.FFmpeg, "ffmpeg binary")
	fs.StringVar(&cfg.Videos.FFprobe, "ffprobe", cfg.Videos.FFprobe, "ffprobe binary")
	fs.IntVar(&cfg.Videos.MaxHeight, "video-max-height", cfg.Videos.MaxHeight, "cap of the output's short edge (1080 = 1080p)")
	fs.IntVar(&cfg.Videos.CRF, "video-crf", cfg.Videos.CRF, "x264 constant rate factor")
	fs.StringVar(&cfg.Videos.Preset, "video-preset", cfg.Videos.Preset, "x264 preset")
	fs.IntVar(&cfg.Videos.Threads, "video-threads", cfg.Videos.Threads, "ffmpeg threads per job")
	durationVar(fs, &cfg.Videos.MaxDuration, "video-max-duration", "refuse longer videos")
	fs.BoolVar(&cfg.Videos.HLS, "video-hls", cfg.Videos.HLS, "also write an HLS VOD playlist and segments")
	fs.BoolVar(&cfg.Videos.Remux, "video-remux", cfg.Videos.Remux, "copy the streams of uploads that already are H.264/AAC MP4/MOV within the caps instead of re-encoding them")
	fs.Int64Var(&cfg.Videos.MaxPixels, "video-max-pixels", cfg.Videos.MaxPixels, "refuse videos whose frames are larger (width × height)")
	fs.Int64Var(&cfg.Images.HEIFDecodePixels, "image-heif-decode-pixels", cfg.Images.HEIFDecodePixels, "total pixels of HEIC/AVIF images decoded at once (libheif needs ~7 bytes per pixel); a larger image decodes alone")
	fs.IntVar(&cfg.Images.MaxFrames, "image-max-frames", cfg.Images.MaxFrames, "refuse images (animations) declaring more frames")
	fs.IntVar(&cfg.Images.AnimationMaxFrames, "image-animation-max-frames", cfg.Images.AnimationMaxFrames, "animations (GIF, WebP, APNG, AVIF) with more frames become still images of their first frame (with a warning)")
	fs.Int64Var(&cfg.Images.AnimationMaxPixels, "image-animation-max-pixels", cfg.Images.AnimationMaxPixels, "animations whose high variant would hold more pixels over all frames become still images of their first frame (with a warning)")
	fs.Var(bytesFlag{&cfg.Videos.MaxMemoryBytes}, "video-max-memory", "address-space limit (RLIMIT_AS) of each ffmpeg/ffprobe process")
	durationVar(fs, &cfg.Videos.MaxCPUTime, "video-max-cpu-time", "CPU time one ffmpeg run may use (RLIMIT_CPU); inputs needing more are refused")
	durationVar(fs, &cfg.Videos.CPUPerInputSecond, "video-cpu-per-second", "CPU time a video's encode may use per second of input, counting 10 s more, if less than --video-max-cpu-time; inputs needing more are refused (0: --video-max-cpu-time only)")
	fs.StringVar(&cfg.Videos.Prlimit, "prlimit", cfg.Videos.Prlimit, "prlimit(1) program that starts ffmpeg/ffprobe under their resource limits")
	fs.Var(bytesFlag{&cfg.Videos.MaxOutputBytes}, "video-max-output-bytes", "largest encoded MP4; videos that would be larger are refused")

	fs.BoolVar(&cfg.NoReuse, "no-reuse", cfg.NoReuse, "transform every upload, even bytes seen before (by default a clean upload whose SHA-256 and recipe match a recent one in its bucket is answered from it: its variants are copied, not made again; every upload is scanned either way)")
	fs.BoolVar(&cfg.Pipeline.ReuseAcrossBuckets, "reuse-across-buckets", cfg.Pipeline.ReuseAcrossBuckets, "answer an upload from the same bytes remembered in another bucket; then a fast reused answer tells one bucket's tenant that another uploaded exactly these bytes (turn on only where all buckets are one tenant's)")
	bindReuseBounds(fs, &cfg.Reuse)

	fs.StringVar(&cfg.HTTPAddr, "http-addr", cfg.HTTPAddr, "console, health, metrics (and, with --storage nats, /objects) listen address; empty disables")
	fs.BoolVar(&cfg.ScanAPI.Enabled, "scan-api", cfg.ScanAPI.Enabled, "serve POST /v1/scan: an API streams an upload's bytes and gets clamd's verdict as JSON")
	fs.StringVar(&cfg.ScanAPI.Token, "scan-api-token", cfg.ScanAPI.Token, "operator token: /v1/scan and the console require it (empty: none; then keep --http-addr on loopback)")
	fs.IntVar(&cfg.ScanAPI.Concurrency, "scan-api-concurrency", cfg.ScanAPI.Concurrency, "scans /v1/scan runs at once (its own slots, never the jobs')")
	fs.Var(bytesFlag{&cfg.ScanAPI.MaxBytes}, "scan-api-max-bytes", "largest /v1/scan body (0: --max-input-bytes)")
	durationVar(fs, &cfg.ScanAPI.StallTimeout, "scan-api-stall-timeout", "a /v1/scan body that sends nothing this long is refused (408); bodies are received before a scan slot is taken")
	fs.BoolVar(&cfg.ServeObjects, "serve-objects", cfg.ServeObjects, "serve variants at /objects/<bucket>/<key> so response URLs work: with --storage nats, and with s3 when --url-signing-key is set (then point --public-base-url at <this worker>/objects/<bucket>)")
	fs.StringVar(&cfg.URLSigning.Key, "url-signing-key", cfg.URLSigning.Key, "HMAC secret (≥ 32 bytes): /objects serves only signed, expiring URLs, and response URLs are signed")
	durationVar(fs, &cfg.URLSigning.TTL, "url-signing-ttl", "lifetime of the signed URLs in responses")
	bindWebhooks(fs, &cfg.Webhooks)

	fs.BoolVar(&cfg.Ingest.Enabled, "ingest", cfg.Ingest.Enabled, "turn the object store's own upload events into requests: an upload into a watched bucket and prefix is answered with no API publishing anything (docs/ingest.md)")
	fs.StringVar(&cfg.Ingest.Routes, "ingest-routes", cfg.Ingest.Routes, "the uploads that start a job: comma-separated bucket[/prefix][*suffix][=recipe], the first match winning (e.g. media/uploads/)")
	fs.StringVar(&cfg.Ingest.Subjects, "ingest-subjects", cfg.Ingest.Subjects, "with --storage s3: the NATS subjects the S3 server sends its event notifications to (versitygw --event-nats-topic); kept in a stream the worker provisions")
	fs.StringVar(&cfg.Ingest.Stream, "ingest-stream", cfg.Ingest.Stream, "with --storage s3: an existing stream holding the S3 event notifications, instead of --ingest-subjects")
	fs.StringVar(&cfg.Ingest.URLTemplate, "ingest-url-template", cfg.Ingest.URLTemplate, "mediaUrl of ingest's requests, with {bucket}, {key} and {mediaId} replaced (empty: the object's URL in the store)")
}

// bindLog registers the logging flags.
func bindLog(c *command) (level, format *string) {
	level, format = new(string), new(string)
	c.fs.StringVar(level, "log-level", "info", "trace, debug, info, warn or error")
	c.fs.StringVar(format, "log-format", "auto", "json, console, or auto (console on a terminal)")
	return level, format
}

func newLogger(w io.Writer, level, format string) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(level)
	if err != nil || level == "" {
		return zerolog.Nop(), fmt.Errorf("log level %q: use trace, debug, info, warn or error", level)
	}
	switch format {
	case "json":
	case "console":
		w = zerolog.ConsoleWriter{Out: w}
	case "auto":
		if f, ok := w.(*os.File); ok && isatty.IsTerminal(f.Fd()) {
			w = zerolog.ConsoleWriter{Out: w}
		}
	default:
		return zerolog.Nop(), fmt.Errorf("log format %q: use json, console or auto", format)
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger(), nil
}

// checkLibvips makes sure libvips can be loaded before the worker takes jobs. The worker loads it
// only at its first image (an idle worker, or one that only sees videos, never maps its ~130
// libraries), so a missing or broken libvips would otherwise show as every image job failing. The
// check runs `mediaworker version` (which loads it) in a child process, so this one stays lean.
func checkLibvips(ctx context.Context) error {
	exe, err := os.Executable()
	if err != nil {
		return nil // cannot find ourselves: the first image will tell
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, exe, "version").CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ctx.Err() == nil {
		msg := strings.TrimSpace(string(out))
		if i := strings.LastIndex(msg, "mediaworker version: "); i >= 0 {
			msg = msg[i+len("mediaworker version: "):]
		}
		return fmt.Errorf("checking libvips: %s", msg)
	}
	return nil // started and succeeded, or could not be started at all: nothing to say about libvips
}
