package main

import (
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/mediaworker/mediaworker/app"
)

// The settings of `run` come in sections, and each is declared once, here: its flag (and so its
// variable, MW_<FLAG>, and any standard variable read after it), its key in the config file
// (<section>.<key>), its help, where it lives (a pointer into app.Config, whose DefaultConfig is its
// default), its deprecated names and whether it is a secret. Flags, --help, `config`, the config file,
// docs/operations.md (settingsdoc.go) and the naming of library errors (fields.go, which finds the
// field a flag sets at the address it was bound to) are all derived from this table. The library
// packages name their config fields; this table is where those meet the names a person types.

// section is one group of settings: a mapping of the config file, a heading of --help.
type section struct {
	name     string // the file's top-level key
	title    string // what --help and the docs call it
	settings []setting
}

// setting is one setting, declared once.
type setting struct {
	flag string // --flag; MW_<FLAG> is its variable
	key  string // its key in its section of the config file
	help string
	// at is where the setting lives in s: a *string, *bool, *int, *int64 or *time.Duration, or a
	// flag.Value for the types of its own (sizes, lists); its value there when bound is its default.
	at func(s *settingsOf) any
	// env are standard variables read when MW_<FLAG> is unset (NATS_URL, AWS_ACCESS_KEY_ID).
	env []string
	// renamed are its former flags, still accepted as deprecated names that warn once.
	renamed []string
	secret  bool // `config` prints it masked
	// docDefault is the docs' default where the machine decides it; "" for the value itself.
	docDefault string
	scope      scope
}

// scope says which commands besides run (and config) read a setting.
type scope uint8

const (
	runOnly scope = iota
	// shared: every command that reaches NATS and the object store (submit, dlq, streams, webhooks).
	shared
	// streamsToo: also `streams`, which writes the same stream and consumer definitions as run.
	streamsToo
	// runsOwn: run's own, outside app.Config (logging, the wait for clamd at start).
	runsOwn
)

// settingsOf is what the settings set: the worker's Config, and what run itself reads at start.
type settingsOf struct {
	*app.Config
	ClamdWait           time.Duration
	LogLevel, LogFormat string
}

// defaultSettings are run's settings before any file, variable or flag.
func defaultSettings(cfg *app.Config) *settingsOf {
	return &settingsOf{Config: cfg, ClamdWait: 2 * time.Minute, LogLevel: "info", LogFormat: "auto"}
}

// settingKey is one setting's key in its section and the flag that holds it.
type settingKey struct {
	key, flag string
}

// keys are the section's keys, in its order.
func (s section) keys() []settingKey {
	out := make([]settingKey, len(s.settings))
	for i, st := range s.settings {
		out[i] = settingKey{st.key, st.flag}
	}
	return out
}

// configFlag names the config file; the file itself is not a setting of any section.
const configFlag = "config"

var sections = []section{
	{"nats", "NATS connection (empty url: run the embedded server)", []setting{
		{flag: "nats-url", key: "url", env: []string{"NATS_URL"}, scope: shared, help: "NATS server URL; empty runs an embedded JetStream server",
			at: func(s *settingsOf) any { return &s.NATS.URL }},
		// The credentials are read like the nats CLI reads them: each flag from MW_<FLAG> and then the
		// nats CLI's variable. Secrets come from the environment or files, never from the image.
		{flag: "nats-creds", key: "creds", env: []string{"NATS_CREDS"}, scope: shared, help: "NATS credentials file (user JWT and nkey seed, decentralised auth)",
			at: func(s *settingsOf) any { return &s.NATS.Auth.Creds }},
		{flag: "nats-nkey", key: "nkey", env: []string{"NATS_NKEY"}, scope: shared, help: "file holding a NATS user nkey seed",
			at: func(s *settingsOf) any { return &s.NATS.Auth.NKey }},
		{flag: "nats-user", key: "user", env: []string{"NATS_USER"}, scope: shared, help: "NATS user name (with --nats-password)",
			at: func(s *settingsOf) any { return &s.NATS.Auth.User }},
		{flag: "nats-password", key: "password", env: []string{"NATS_PASSWORD"}, scope: shared, secret: true, help: "NATS password",
			at: func(s *settingsOf) any { return &s.NATS.Auth.Password }},
		{flag: "nats-token", key: "token", env: []string{"NATS_TOKEN"}, scope: shared, secret: true, help: "NATS authentication token",
			at: func(s *settingsOf) any { return &s.NATS.Auth.Token }},
		{flag: "nats-tls-ca", key: "tls_ca", env: []string{"NATS_CA"}, scope: shared, help: "CA certificates (PEM) that sign the NATS server's certificate",
			at: func(s *settingsOf) any { return &s.NATS.Auth.CA }},
		{flag: "nats-tls-cert", key: "tls_cert", env: []string{"NATS_CERT"}, scope: shared, help: "client certificate (PEM) for NATS servers that require mutual TLS",
			at: func(s *settingsOf) any { return &s.NATS.Auth.Cert }},
		{flag: "nats-tls-key", key: "tls_key", env: []string{"NATS_KEY"}, scope: shared, help: "key of --nats-tls-cert",
			at: func(s *settingsOf) any { return &s.NATS.Auth.Key }},
	}},
	{"embedded", "the embedded NATS server", []setting{
		{flag: "nats-listen", key: "listen", help: "client address of the embedded NATS server; beyond loopback it requires a credential (--nats-token, --nats-user, --nats-nkey or --nats-server-config)",
			at: func(s *settingsOf) any { return &s.NATS.Embedded.Listen }},
		{flag: "data-dir", key: "data_dir", help: "embedded NATS server's store directory",
			at: func(s *settingsOf) any { return &s.NATS.Embedded.DataDir }},
		{flag: "nats-sync-always", key: "sync_always", help: "fsync every JetStream write of the embedded server, so a power cut loses nothing acknowledged (~1 ms per write); false: every --nats-sync-interval",
			at: func(s *settingsOf) any { return &s.NATS.Embedded.SyncAlways }},
		{flag: "nats-sync-interval", key: "sync_interval", help: "without --nats-sync-always, how often the embedded server fsyncs (0: nats-server's 2m); a power loss loses what was acknowledged since",
			at: func(s *settingsOf) any { return &s.NATS.Embedded.SyncInterval }},
		{flag: "nats-server-config", key: "server_config", help: "nats-server configuration file for the embedded server: accounts, users, permissions, operator (see deploy/nats)",
			at: func(s *settingsOf) any { return &s.NATS.Embedded.ServerConfig }},
		{flag: "nats-listen-tls-cert", key: "tls_cert", help: "certificate (PEM) the embedded server presents: clients must then use TLS",
			at: func(s *settingsOf) any { return &s.NATS.Embedded.TLSCert }},
		{flag: "nats-listen-tls-key", key: "tls_key", help: "key of --nats-listen-tls-cert",
			at: func(s *settingsOf) any { return &s.NATS.Embedded.TLSKey }},
	}},
	{"streams", "streams and consumers", []setting{
		{flag: "app", key: "app", scope: shared, help: "subject prefix: <app>.media.optimize.request etc.",
			at: func(s *settingsOf) any { return &s.Streams.App }},
		{flag: "provision", key: "provision", help: "create or update the streams and the consumer at start",
			at: func(s *settingsOf) any { return &s.Provision }},
		{flag: "replicas", key: "replicas", scope: streamsToo, help: "stream replicas (3 on a NATS cluster)",
			at: func(s *settingsOf) any { return &s.Streams.Replicas }},
		{flag: "ack-wait", key: "ack_wait", scope: streamsToo, help: "how long a delivery may go without ack or progress before redelivery",
			at: func(s *settingsOf) any { return &s.Streams.AckWait }},
		{flag: "max-deliver", key: "max_deliver", scope: streamsToo, help: "deliveries before a request is dead-lettered",
			at: func(s *settingsOf) any { return &s.Streams.MaxDeliver }},
		{flag: "max-ack-pending", key: "max_ack_pending", scope: streamsToo, help: "messages in flight per consumer (triage and each lane) across all instances: at least 2 × the lane's slots of all instances (retries waiting count)",
			at: func(s *settingsOf) any { return &s.Streams.MaxAckPending }},
		{flag: "max-queued", key: "max_queued", scope: streamsToo, help: "cap the request stream (0 = unlimited); a full queue refuses publishes",
			at: func(s *settingsOf) any { return &s.Streams.MaxQueued }},
	}},
	{"lanes", "lanes and their slots", laneSettings()},
	{"jobs", "jobs: retries, time, scratch space, outputs", []setting{
		{flag: "job-timeout", key: "job_timeout", help: "stall interval: how long a job may go without progress — a fetch (download, scan) or an upload as a whole; a video's transform since ffmpeg last moved (a new position, or CPU time used), however long it takes in all (an image's is not cut: libvips cannot be interrupted). A stall is retried, never the input's fault: that is CPU time (--video-cpu-per-second, --video-max-cpu-time) or a limit",
			at: func(s *settingsOf) any { return &s.Pipeline.JobTimeout }},
		{flag: "max-transform-time", key: "max_transform_time", help: "longest a transform may run however it progresses (at least --job-timeout and --video-max-cpu-time); past it the job is retried like a stall",
			at: func(s *settingsOf) any { return &s.Pipeline.MaxTransformTime }},
		{flag: "drain-timeout", key: "drain_timeout", help: "on SIGTERM, how long in-flight jobs may finish before they are stopped and handed back",
			at: func(s *settingsOf) any { return &s.Worker.DrainTimeout }},
		{flag: "backoff-base", key: "backoff_base", help: "first retry delay after a transient failure (doubles per delivery)",
			at: func(s *settingsOf) any { return &s.Worker.BackoffBase }},
		{flag: "backoff-max", key: "backoff_max", help: "longest retry delay",
			at: func(s *settingsOf) any { return &s.Worker.BackoffMax }},
		{flag: "tmp-dir", key: "tmp_dir", docDefault: "`$TMPDIR/mediaworker`", help: "scratch space for jobs (one per instance)",
			at: func(s *settingsOf) any { return &s.Pipeline.TmpDir }},
		{flag: "scratch-min-free", key: "scratch_min_free", help: "scratch space kept free; a job that would eat into it waits, and readiness fails below it",
			at: func(s *settingsOf) any { return bytesFlag{&s.Pipeline.MinFreeBytes} }},
		{flag: "public-base-url", key: "public_base_url", help: "base of variant URLs (url = base + / + key); empty: the store's own URL",
			at: func(s *settingsOf) any { return &s.Pipeline.PublicBaseURL }},
		{flag: "quarantine-bucket", key: "quarantine_bucket", help: "move infected uploads here instead of deleting them",
			at: func(s *settingsOf) any { return &s.Pipeline.QuarantineBucket }},
	}},
	{"storage", "object store", []setting{
		{flag: "storage", key: "backend", scope: shared, help: "object store: nats (JetStream object store of the NATS in use) or s3",
			at: func(s *settingsOf) any { return &s.Storage }},
		{flag: "s3-endpoint", key: "s3_endpoint", scope: shared, help: "S3 endpoint host:port (with --storage s3)",
			at: func(s *settingsOf) any { return &s.S3.Endpoint }},
		{flag: "s3-access-key", key: "s3_access_key", env: []string{"AWS_ACCESS_KEY_ID"}, scope: shared, help: "S3 access key",
			at: func(s *settingsOf) any { return &s.S3.AccessKey }},
		{flag: "s3-secret-key", key: "s3_secret_key", env: []string{"AWS_SECRET_ACCESS_KEY"}, scope: shared, secret: true, help: "S3 secret key",
			at: func(s *settingsOf) any { return &s.S3.SecretKey }},
		{flag: "s3-region", key: "s3_region", scope: shared, help: "S3 region",
			at: func(s *settingsOf) any { return &s.S3.Region }},
		{flag: "s3-tls", key: "s3_tls", scope: shared, help: "use HTTPS to reach S3",
			at: func(s *settingsOf) any { return &s.S3.UseTLS }},
		{flag: "s3-insecure-skip-verify", key: "s3_insecure_skip_verify", scope: shared, help: "skip TLS certificate checks (self-signed test set-ups only)",
			at: func(s *settingsOf) any { return &s.S3.InsecureSkipVerify }},
	}},
	{"clamd", "clamd", []setting{
		{flag: "clamd-addr", key: "addr", help: "clamd address: tcp://host:port or unix:///path",
			at: func(s *settingsOf) any { return &s.Scanner.Addr }},
		{flag: "clamd-scan-timeout", key: "scan_timeout", help: "longest wait for clamd's verdict",
			at: func(s *settingsOf) any { return &s.Scanner.ScanTimeout }},
		// A run-only setting: the worker itself waits for clamd whenever it is down, but at start a clamd
		// that never answers is most often a wrong address, which should stop the start with a clear
		// error rather than look like a slow queue.
		{flag: "clamd-wait", scope: runsOwn, key: "wait", help: "at start, how long to wait for clamd to answer (it loads its database first) before exiting with an error",
			at: func(s *settingsOf) any { return &s.ClamdWait }},
		{flag: "max-signature-age", key: "max_signature_age", help: "readiness fails when clamd's official signatures are older (0: never); a dev database is not judged",
			at: func(s *settingsOf) any { return &s.MaxSignatureAge }},
	}},
	{"limits", "limits on what an upload may be or cost", []setting{
		{flag: "max-input-bytes", key: "max_input_bytes", help: "largest upload accepted (also the most clamd is asked to scan)",
			at: func(s *settingsOf) any { return bytesFlag{&s.Pipeline.MaxInputBytes} }},
		{flag: "max-memory", key: "max_memory", help: "memory budget of each lane's transforms running at once, each estimated from its header before it starts: the image lane's decodes in the worker and the video lane's ffmpeg processes beside it each get a budget of this size, so lanes never wait on each other; a job larger than its lane's budget runs alone in its lane (0: no budget, slots alone)",
			at: func(s *settingsOf) any { return bytesFlag{&s.MaxMemory} }},
		{flag: "image-max-pixels", key: "image_max_pixels", renamed: []string{"max-pixels"}, help: "refuse images whose header declares more pixels (width × height × frames)",
			at: func(s *settingsOf) any { return &s.Images.MaxPixels }},
		{flag: "image-max-frames", key: "image_max_frames", renamed: []string{"max-image-frames"}, help: "refuse images (animations) declaring more frames",
			at: func(s *settingsOf) any { return &s.Images.MaxFrames }},
		{flag: "image-max-metadata-bytes", key: "image_max_metadata_bytes", renamed: []string{"max-image-metadata-bytes"}, help: "refuse images carrying more metadata (EXIF, XMP, colour profiles, comments), in bytes, before any decoder reads it",
			at: func(s *settingsOf) any { return &s.Images.MaxMetadataBytes }},
		{flag: "image-animation-max-frames", key: "image_animation_max_frames", renamed: []string{"animation-max-frames"}, help: "animations (GIF, WebP, APNG, AVIF) with more frames become still images of their first frame (with a warning)",
			at: func(s *settingsOf) any { return &s.Images.AnimationMaxFrames }},
		{flag: "image-animation-max-pixels", key: "image_animation_max_pixels", renamed: []string{"animation-max-pixels"}, help: "animations whose high variant would hold more pixels over all frames become still images of their first frame (with a warning)",
			at: func(s *settingsOf) any { return &s.Images.AnimationMaxPixels }},
		{flag: "image-heif-decode-pixels", key: "image_heif_decode_pixels", renamed: []string{"heif-decode-pixels"}, help: "total pixels of HEIC/AVIF images decoded at once (libheif needs ~7 bytes per pixel); a larger image decodes alone",
			at: func(s *settingsOf) any { return &s.Images.HEIFDecodePixels }},
		{flag: "video-max-pixels", key: "video_max_pixels", renamed: []string{"max-video-pixels"}, help: "refuse videos whose frames are larger (width × height)",
			at: func(s *settingsOf) any { return &s.Videos.MaxPixels }},
		{flag: "video-max-duration", key: "video_max_duration", renamed: []string{"max-video-duration"}, help: "refuse longer videos",
			at: func(s *settingsOf) any { return &s.Videos.MaxDuration }},
		{flag: "video-max-memory", key: "video_max_memory", help: "address-space limit (RLIMIT_AS) of each ffmpeg/ffprobe process",
			at: func(s *settingsOf) any { return bytesFlag{&s.Videos.MaxMemoryBytes} }},
		{flag: "video-max-cpu-time", key: "video_max_cpu_time", help: "CPU time one ffmpeg run may use (RLIMIT_CPU); inputs needing more are refused",
			at: func(s *settingsOf) any { return &s.Videos.MaxCPUTime }},
		{flag: "video-cpu-per-second", key: "video_cpu_per_second", help: "CPU time a video's encode may use per second of input, counting 10 s more, if less than --video-max-cpu-time; inputs needing more are refused (0: --video-max-cpu-time only)",
			at: func(s *settingsOf) any { return &s.Videos.CPUPerInputSecond }},
		{flag: "video-max-output-bytes", key: "video_max_output_bytes", help: "largest encoded MP4; videos that would be larger are refused",
			at: func(s *settingsOf) any { return bytesFlag{&s.Videos.MaxOutputBytes} }},
	}},
	{"images", "images: the default recipe's WebP variants", []setting{
		{flag: "image-high-size", key: "high_size", renamed: []string{"image-high"}, help: "long edge of the high WebP",
			at: func(s *settingsOf) any { return &s.Images.High }},
		{flag: "image-medium-size", key: "medium_size", renamed: []string{"image-medium"}, help: "long edge of the medium WebP",
			at: func(s *settingsOf) any { return &s.Images.Medium }},
		{flag: "image-low-size", key: "low_size", renamed: []string{"image-low"}, help: "long edge of the low WebP",
			at: func(s *settingsOf) any { return &s.Images.Low }},
		{flag: "image-high-quality", key: "high_quality", renamed: []string{"webp-quality-high"}, help: "WebP quality of the high variant",
			at: func(s *settingsOf) any { return &s.Images.QualityHigh }},
		{flag: "image-medium-quality", key: "medium_quality", renamed: []string{"webp-quality-medium"}, help: "WebP quality of the medium variant",
			at: func(s *settingsOf) any { return &s.Images.QualityMedium }},
		{flag: "image-low-quality", key: "low_quality", renamed: []string{"webp-quality-low"}, help: "WebP quality of the low variant",
			at: func(s *settingsOf) any { return &s.Images.QualityLow }},
		{flag: "image-webp-effort", key: "webp_effort", renamed: []string{"webp-effort"}, help: "WebP encoder effort 0 (fast) – 6 (small)",
			at: func(s *settingsOf) any { return &s.Images.Effort }},
	}},
	{"videos", "videos", []setting{
		{flag: "video-max-height", key: "max_height", help: "cap of the output's short edge (1080 = 1080p)",
			at: func(s *settingsOf) any { return &s.Videos.MaxHeight }},
		{flag: "video-crf", key: "crf", help: "x264 constant rate factor",
			at: func(s *settingsOf) any { return &s.Videos.CRF }},
		{flag: "video-preset", key: "preset", help: "x264 preset",
			at: func(s *settingsOf) any { return &s.Videos.Preset }},
		{flag: "video-threads", key: "threads", help: "ffmpeg threads per job",
			at: func(s *settingsOf) any { return &s.Videos.Threads }},
		{flag: "video-hls", key: "hls", help: "also write an HLS VOD playlist and segments",
			at: func(s *settingsOf) any { return &s.Videos.HLS }},
		{flag: "video-remux", key: "remux", help: "copy the streams of uploads that already are H.264/AAC MP4/MOV within the caps instead of re-encoding them",
			at: func(s *settingsOf) any { return &s.Videos.Remux }},
		{flag: "ffmpeg", key: "ffmpeg", help: "ffmpeg binary",
			at: func(s *settingsOf) any { return &s.Videos.FFmpeg }},
		{flag: "ffprobe", key: "ffprobe", help: "ffprobe binary",
			at: func(s *settingsOf) any { return &s.Videos.FFprobe }},
		{flag: "prlimit", key: "prlimit", help: "prlimit(1) program that starts ffmpeg/ffprobe under their resource limits",
			at: func(s *settingsOf) any { return &s.Videos.Prlimit }},
	}},
	{"documents", "documents: PDF and SVG, rendered only for recipes with documents: true", []setting{
		{flag: "document-size", key: "size", help: "long side, in pixels, a document's first page is rendered at before the recipe's variants are made from it (at least the largest variant's)",
			at: func(s *settingsOf) any { return &s.Documents.Size }},
		{flag: "document-max-pixels", key: "max_pixels", help: "refuse documents whose first page is larger, before anything is rendered: a PDF page at 72 dpi (a pixel per point), an SVG at its declared size",
			at: func(s *settingsOf) any { return &s.Documents.MaxPixels }},
		{flag: "document-max-cpu-time", key: "max_cpu_time", help: "CPU time one render may use (RLIMIT_CPU); documents needing more are refused",
			at: func(s *settingsOf) any { return &s.Documents.MaxCPUTime }},
		{flag: "document-max-memory", key: "max_memory", help: "address-space limit (RLIMIT_AS) of the render child, at least 2GiB (0: --video-max-memory)",
			at: func(s *settingsOf) any { return bytesFlag{&s.Documents.MaxMemoryBytes} }},
	}},
	{"reuse", "reuse: repeated uploads answered without rework", []setting{
		{flag: "no-reuse", key: "disabled", help: "transform every upload, even bytes seen before (by default a clean upload whose SHA-256 and recipe match a recent one in its bucket is answered from it: its variants are copied, not made again; every upload is scanned either way)",
			at: func(s *settingsOf) any { return &s.NoReuse }},
		// `run` and `streams apply` write the same bucket.
		{flag: "reuse-ttl", key: "ttl", scope: streamsToo, help: "how long what an upload became is remembered for reuse",
			at: func(s *settingsOf) any { return &s.Reuse.TTL }},
		{flag: "reuse-max-bytes", key: "max_bytes", scope: streamsToo, help: "bound of the reuse memory (a JetStream key-value bucket, about 1-2 KB an upload); when full, new outcomes are not remembered until old ones expire",
			at: func(s *settingsOf) any { return bytesFlag{&s.Reuse.MaxBytes} }},
		{flag: "reuse-across-buckets", key: "share_across_buckets", help: "answer an upload from the same bytes remembered in another bucket; then a fast reused answer tells one bucket's tenant that another uploaded exactly these bytes (turn on only where all buckets are one tenant's)",
			at: func(s *settingsOf) any { return &s.Pipeline.ReuseAcrossBuckets }},
	}},
	{"ingest", "ingest: upload events become requests", []setting{
		{flag: "ingest", key: "enabled", help: "turn the object store's own upload events into requests: an upload into a watched bucket and prefix is answered with no API publishing anything (docs/ingest.md)",
			at: func(s *settingsOf) any { return &s.Ingest.Enabled }},
		{flag: "ingest-routes", key: "routes", help: "the uploads that start a job: comma-separated bucket[/prefix][*suffix][=recipe], the first match winning (e.g. media/uploads/)",
			at: func(s *settingsOf) any { return &s.Ingest.Routes }},
		{flag: "ingest-subjects", key: "subjects", help: "with --storage s3: the NATS subjects the S3 server sends its event notifications to (versitygw --event-nats-topic); kept in a stream the worker provisions",
			at: func(s *settingsOf) any { return &s.Ingest.Subjects }},
		{flag: "ingest-stream", key: "stream", help: "with --storage s3: an existing stream holding the S3 event notifications, instead of --ingest-subjects",
			at: func(s *settingsOf) any { return &s.Ingest.Stream }},
		{flag: "ingest-url-template", key: "url_template", help: "mediaUrl of ingest's requests, with {bucket}, {key} and {mediaId} replaced (empty: the object's URL in the store)",
			at: func(s *settingsOf) any { return &s.Ingest.URLTemplate }},
	}},
	{"http", "HTTP: console, health, metrics, /objects, /v1/scan", []setting{
		{flag: "http-addr", key: "addr", help: "console, health, metrics (and, with --storage nats, /objects) listen address; empty disables",
			at: func(s *settingsOf) any { return &s.HTTPAddr }},
		{flag: "serve-objects", key: "serve_objects", help: "serve variants at /objects/<bucket>/<key> so response URLs work: with --storage nats, and with s3 when --url-signing-key is set (then point --public-base-url at <this worker>/objects/<bucket>)",
			at: func(s *settingsOf) any { return &s.ServeObjects }},
		{flag: "url-signing-key", key: "url_signing_key", secret: true, help: "HMAC secret (≥ 32 bytes): /objects serves only signed, expiring URLs, and response URLs are signed",
			at: func(s *settingsOf) any { return &s.URLSigning.Key }},
		{flag: "url-signing-ttl", key: "url_signing_ttl", help: "lifetime of the signed URLs in responses",
			at: func(s *settingsOf) any { return &s.URLSigning.TTL }},
		{flag: "scan-api", key: "scan_api", help: "serve POST /v1/scan: an API streams an upload's bytes and gets clamd's verdict as JSON",
			at: func(s *settingsOf) any { return &s.ScanAPI.Enabled }},
		{flag: "scan-api-token", key: "scan_api_token", secret: true, help: "operator token: /v1/scan and the console require it (empty: none; then keep --http-addr on loopback)",
			at: func(s *settingsOf) any { return &s.ScanAPI.Token }},
		{flag: "scan-api-concurrency", key: "scan_api_concurrency", help: "scans /v1/scan runs at once (its own slots, never the jobs')",
			at: func(s *settingsOf) any { return &s.ScanAPI.Concurrency }},
		{flag: "scan-api-max-bytes", key: "scan_api_max_bytes", help: "largest /v1/scan body (0: --max-input-bytes)",
			at: func(s *settingsOf) any { return bytesFlag{&s.ScanAPI.MaxBytes} }},
		{flag: "scan-api-stall-timeout", key: "scan_api_stall_timeout", help: "a /v1/scan body that sends nothing this long is refused (408); bodies are received before a scan slot is taken",
			at: func(s *settingsOf) any { return &s.ScanAPI.StallTimeout }},
	}},
	{"log", "logging", []setting{
		{flag: "log-level", scope: runsOwn, key: "level", help: "trace, debug, info, warn or error",
			at: func(s *settingsOf) any { return &s.LogLevel }},
		{flag: "log-format", scope: runsOwn, key: "format", help: "json, console, or auto (console on a terminal)",
			at: func(s *settingsOf) any { return &s.LogFormat }},
	}},
	{webhooksSection, "webhooks: answers and virus events to HTTP endpoints (the file's webhooks.endpoints lists several)", []setting{
		{flag: "webhook-url", key: "url", help: "deliver answers and virus events to this `URL`, signed as Standard Webhooks (endpoint \"default\"; the file's webhooks.endpoints lists more)",
			at: func(s *settingsOf) any { return (*urlFlag)(&s.Webhooks.Single.URL) }},
		{flag: "webhook-secret", key: "secret", secret: true, help: "the signing `secrets` of --webhook-url: whsec_ and base64 of 24–64 random bytes (mediaworker webhooks secret makes one); several, comma-separated, while rotating",
			at: func(s *settingsOf) any { return (*listFlag)(&s.Webhooks.Single.Secrets) }},
		{flag: "webhook-ed25519-key", key: "ed25519_key", secret: true, help: "sign --webhook-url's deliveries with this Ed25519 key too (whsk_…; receivers verify with its whpk_ public key)",
			at: func(s *settingsOf) any { return &s.Webhooks.Single.Ed25519Key }},
		{flag: "webhook-events", key: "events", help: "the `events` --webhook-url receives, comma-separated: response, virus, progress (empty: response,virus; progress is sent at most once)",
			at: func(s *settingsOf) any { return (*listFlag)(&s.Webhooks.Single.Events) }},
		{flag: "webhook-timeout", key: "timeout", help: "per request to --webhook-url (0: 15s)",
			at: func(s *settingsOf) any { return &s.Webhooks.Single.Timeout }},
		{flag: "webhook-allow-private", key: "allow_private", help: "let --webhook-url be on loopback or a private network (refused by default, checked at every connect)",
			at: func(s *settingsOf) any { return &s.Webhooks.Single.AllowPrivate }},
		{flag: "webhook-retry-schedule", key: "retry_schedule", help: "the waits before each retry of a failed delivery, comma-separated `durations` (empty: the spec's 5s,5m,30m,2h,5h,10h,10h); after the last, the answer goes to the DLQ",
			at: func(s *settingsOf) any { return (*durationsFlag)(&s.Webhooks.Schedule) }},
	}},
}

// recipesSection is the file's section of output sets (configfile.go reads it); it has no flags.
const recipesSection = "recipes"

// bind registers the settings of sections that in selects, each with its variables and deprecated
// names, writing to s.
func (c *command) bind(s *settingsOf, in func(setting) bool) {
	for _, sec := range sections {
		for _, st := range sec.settings {
			if in(st) {
				c.bindSetting(s, st)
			}
		}
	}
}

// bindSetting registers one setting's flag at its place in s.
func (c *command) bindSetting(s *settingsOf, st setting) {
	fs := c.fs
	switch p := st.at(s).(type) {
	case *string:
		fs.StringVar(p, st.flag, *p, st.help)
	case *bool:
		fs.BoolVar(p, st.flag, *p, st.help)
	case *int:
		fs.IntVar(p, st.flag, *p, st.help)
	case *int64:
		fs.Int64Var(p, st.flag, *p, st.help)
	case *time.Duration:
		fs.DurationVar(p, st.flag, *p, st.help)
	case flag.Value:
		fs.Var(p, st.flag, st.help)
	default:
		panic(fmt.Sprintf("setting --%s lives in a %T: bind it as a flag.Value", st.flag, p))
	}
	if len(st.env) > 0 {
		c.fallbacks[st.flag] = st.env
	}
	for _, old := range st.renamed {
		fs.Var(fs.Lookup(st.flag).Value, old, "deprecated: use --"+st.flag)
		c.aliases[old] = st.flag
	}
}

// lookupSetting finds the setting of a flag.
func lookupSetting(flagName string) (setting, bool) {
	for _, sec := range sections {
		for _, st := range sec.settings {
			if st.flag == flagName {
				return st, true
			}
		}
	}
	return setting{}, false
}

// isSecret says whether `config` masks the flag's value.
func isSecret(flagName string) bool {
	st, _ := lookupSetting(flagName)
	return st.secret
}

// fileKeyOf returns the file key (<section>.<key>) of a flag, "" when the file does not hold it.
func fileKeyOf(flagName string) string {
	for _, s := range sections {
		for _, st := range s.settings {
			if st.flag == flagName {
				return s.name + "." + st.key
			}
		}
	}
	return ""
}

// lookupSection returns the named section.
func lookupSection(name string) (section, bool) {
	for _, s := range sections {
		if s.name == name {
			return s, true
		}
	}
	return section{}, false
}

// sectionNames lists the file's top-level keys, for errors.
func sectionNames() string {
	names := make([]string, 0, len(sections)+1)
	for _, s := range sections {
		names = append(names, s.name)
	}
	return strings.Join(append(names, recipesSection), ", ")
}

// keyNames lists a section's keys, for errors.
func (s section) keyNames() string {
	names := make([]string, 0, len(s.settings))
	for _, k := range s.settings {
		names = append(names, k.key)
	}
	return strings.Join(names, ", ")
}

// lookup finds a key of the section.
func (s section) lookup(key string) (settingKey, bool) {
	for _, st := range s.settings {
		if st.key == key {
			return settingKey{st.key, st.flag}, true
		}
	}
	return settingKey{}, false
}

// closest suggests the name among candidates a typo most likely meant, "" when none is close.
func closest(name string, candidates []string) string {
	best, bestD := "", 3 // at most two edits away
	for _, c := range candidates {
		if d := editDistance(name, c); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance, transpositions counting one (widht → width).
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}

// unknownKey says that key is not one of known, suggesting the closest.
func unknownKey(what, key string, known []string) string {
	msg := fmt.Sprintf("unknown %s %q", what, key)
	if c := closest(key, known); c != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", c)
	}
	return msg + "; known: " + strings.Join(known, ", ")
}
