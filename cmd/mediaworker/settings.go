package main

import (
	"fmt"
	"strings"
)

// The settings of `run` come in sections. One table says, for each, its flag (and so its variable,
// MW_<FLAG>) and its key in the config file (<section>.<key>), so the file, --help, `config` and
// docs/operations.md all speak of the same settings in the same order. The library packages name
// their config fields; this table is where those meet the names a person types.

// section is one group of settings: a mapping of the config file, a heading of --help.
type section struct {
	name  string // the file's top-level key
	title string // what --help and the docs call it
	keys  []settingKey
}

// settingKey is one setting: its key in the section and the flag that holds it.
type settingKey struct {
	key, flag string
}

// configFlag names the config file; the file itself is not a setting of any section.
const configFlag = "config"

var sections = []section{
	{"nats", "NATS connection (empty url: run the embedded server)", []settingKey{
		{"url", "nats-url"}, {"creds", "nats-creds"}, {"nkey", "nats-nkey"}, {"user", "nats-user"},
		{"password", "nats-password"}, {"token", "nats-token"}, {"tls_ca", "nats-tls-ca"},
		{"tls_cert", "nats-tls-cert"}, {"tls_key", "nats-tls-key"},
	}},
	{"embedded", "the embedded NATS server", []settingKey{
		{"listen", "nats-listen"}, {"data_dir", "data-dir"}, {"sync_always", "nats-sync-always"},
		{"sync_interval", "nats-sync-interval"}, {"server_config", "nats-server-config"},
		{"tls_cert", "nats-listen-tls-cert"}, {"tls_key", "nats-listen-tls-key"},
	}},
	{"streams", "streams and consumers", []settingKey{
		{"app", "app"}, {"provision", "provision"}, {"replicas", "replicas"}, {"ack_wait", "ack-wait"},
		{"max_deliver", "max-deliver"}, {"max_ack_pending", "max-ack-pending"}, {"max_queued", "max-queued"},
	}},
	{"lanes", "lanes and their slots", laneKeys()},
	{"jobs", "jobs: retries, time, scratch space, outputs", []settingKey{
		{"job_timeout", "job-timeout"}, {"max_transform_time", "max-transform-time"},
		{"drain_timeout", "drain-timeout"}, {"backoff_base", "backoff-base"}, {"backoff_max", "backoff-max"},
		{"tmp_dir", "tmp-dir"}, {"scratch_min_free", "scratch-min-free"},
		{"public_base_url", "public-base-url"}, {"quarantine_bucket", "quarantine-bucket"},
	}},
	{"storage", "object store", []settingKey{
		{"backend", "storage"}, {"s3_endpoint", "s3-endpoint"}, {"s3_access_key", "s3-access-key"},
		{"s3_secret_key", "s3-secret-key"}, {"s3_region", "s3-region"}, {"s3_tls", "s3-tls"},
		{"s3_insecure_skip_verify", "s3-insecure-skip-verify"},
	}},
	{"clamd", "clamd", []settingKey{
		{"addr", "clamd-addr"}, {"scan_timeout", "clamd-scan-timeout"}, {"wait", "clamd-wait"},
		{"max_signature_age", "max-signature-age"},
	}},
	{"limits", "limits on what an upload may be or cost", []settingKey{
		{"max_input_bytes", "max-input-bytes"}, {"max_memory", "max-memory"},
		{"image_max_pixels", "image-max-pixels"}, {"image_max_frames", "image-max-frames"},
		{"image_max_metadata_bytes", "image-max-metadata-bytes"},
		{"image_animation_max_frames", "image-animation-max-frames"},
		{"image_animation_max_pixels", "image-animation-max-pixels"},
		{"image_heif_decode_pixels", "image-heif-decode-pixels"},
		{"video_max_pixels", "video-max-pixels"}, {"video_max_duration", "video-max-duration"},
		{"video_max_memory", "video-max-memory"}, {"video_max_cpu_time", "video-max-cpu-time"},
		{"video_cpu_per_second", "video-cpu-per-second"}, {"video_max_output_bytes", "video-max-output-bytes"},
	}},
	{"images", "images: the default recipe's WebP variants", []settingKey{
		{"high_size", "image-high-size"}, {"medium_size", "image-medium-size"}, {"low_size", "image-low-size"},
		{"high_quality", "image-high-quality"}, {"medium_quality", "image-medium-quality"},
		{"low_quality", "image-low-quality"}, {"webp_effort", "image-webp-effort"},
	}},
	{"videos", "videos", []settingKey{
		{"max_height", "video-max-height"}, {"crf", "video-crf"}, {"preset", "video-preset"},
		{"threads", "video-threads"}, {"hls", "video-hls"}, {"remux", "video-remux"},
		{"ffmpeg", "ffmpeg"}, {"ffprobe", "ffprobe"}, {"prlimit", "prlimit"},
	}},
	{"reuse", "reuse: repeated uploads answered without rework", []settingKey{
		{"disabled", "no-reuse"}, {"ttl", "reuse-ttl"}, {"max_bytes", "reuse-max-bytes"},
		{"share_across_buckets", "reuse-across-buckets"},
	}},
	{"ingest", "ingest: upload events become requests", []settingKey{
		{"enabled", "ingest"}, {"routes", "ingest-routes"}, {"subjects", "ingest-subjects"},
		{"stream", "ingest-stream"}, {"url_template", "ingest-url-template"},
	}},
	{"http", "HTTP: console, health, metrics, /objects, /v1/scan", []settingKey{
		{"addr", "http-addr"}, {"serve_objects", "serve-objects"},
		{"url_signing_key", "url-signing-key"}, {"url_signing_ttl", "url-signing-ttl"},
		{"scan_api", "scan-api"}, {"scan_api_token", "scan-api-token"},
		{"scan_api_concurrency", "scan-api-concurrency"}, {"scan_api_max_bytes", "scan-api-max-bytes"},
		{"scan_api_stall_timeout", "scan-api-stall-timeout"},
	}},
	{"log", "logging", []settingKey{{"level", "log-level"}, {"format", "log-format"}}},
	{webhooksSection, "webhooks: answers and virus events to HTTP endpoints (the file's webhooks.endpoints lists several)", []settingKey{
		{"url", "webhook-url"}, {"secret", "webhook-secret"}, {"ed25519_key", "webhook-ed25519-key"},
		{"events", "webhook-events"}, {"timeout", "webhook-timeout"}, {"allow_private", "webhook-allow-private"},
		{"retry_schedule", "webhook-retry-schedule"},
	}},
}

// recipesSection is the file's section of output sets (configfile.go reads it); it has no flags.
const recipesSection = "recipes"

// renamed maps the flags that were renamed, so their names follow <lane>-<what> like their
// neighbours, to today's names. The old names still work, as deprecated aliases that warn once.
var renamed = map[string]string{
	"max-pixels":               "image-max-pixels",
	"max-image-frames":         "image-max-frames",
	"max-image-metadata-bytes": "image-max-metadata-bytes",
	"animation-max-frames":     "image-animation-max-frames",
	"animation-max-pixels":     "image-animation-max-pixels",
	"heif-decode-pixels":       "image-heif-decode-pixels",
	"image-high":               "image-high-size",
	"image-medium":             "image-medium-size",
	"image-low":                "image-low-size",
	"webp-quality-high":        "image-high-quality",
	"webp-quality-medium":      "image-medium-quality",
	"webp-quality-low":         "image-low-quality",
	"webp-effort":              "image-webp-effort",
	"max-video-pixels":         "video-max-pixels",
	"max-video-duration":       "video-max-duration",
}

// fileKeyOf returns the file key (<section>.<key>) of a flag, "" when the file does not hold it.
func fileKeyOf(flagName string) string {
	for _, s := range sections {
		for _, k := range s.keys {
			if k.flag == flagName {
				return s.name + "." + k.key
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
	names := make([]string, 0, len(s.keys))
	for _, k := range s.keys {
		names = append(names, k.key)
	}
	return strings.Join(names, ", ")
}

// lookup finds a key of the section.
func (s section) lookup(key string) (settingKey, bool) {
	for _, k := range s.keys {
		if k.key == key {
			return k, true
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
