// Package contracts is the shared language between the API and the worker: the event types, their JSON
// Schemas (embedded from schemas/), the subject names, request validation and the deterministic output
// keys. It imports nothing of ours, so every other package (and an API written in Go) can depend on it.
package contracts

import (
	"fmt"
	"regexp"
)

// Variant qualities and formats, as the response schema enumerates them.
const (
	QualityHigh      = "high"
	QualityMedium    = "medium"
	QualityLow       = "low"
	QualityOriginal  = "original"
	QualityThumbnail = "thumbnail"

	FormatWebP = "webp"
	FormatMP4  = "mp4"
	FormatJPG  = "jpg"
	FormatM3U8 = "m3u8"

	// FormatAVIF and FormatPNG appear only in answers to requests that name a recipe (the response
	// then carries "recipe"): the seed contract's enum does not have them.
	FormatAVIF = "avif"
	FormatPNG  = "png"
)

// DefaultRecipe is the recipe of a request that names none: the seed contract's output set.
const DefaultRecipe = "default"

// Virus actions, as the virus-event schema enumerates them.
const (
	ActionDeleted     = "deleted_from_object_store"
	ActionQuarantined = "quarantined"
)

// Request asks the worker to optimize one upload. The seed contract's four fields are required and
// non-empty; Recipe is the project's optional extension.
type Request struct {
	S3Key    string `json:"s3Key"`
	S3Bucket string `json:"s3Bucket"`
	MediaID  string `json:"mediaId"`
	MediaURL string `json:"mediaUrl"`
	// Recipe names the output set the worker's configuration defines; empty is DefaultRecipe.
	Recipe string `json:"recipe,omitempty"`
	// Source is set on requests the worker made from the store's upload events (package ingest);
	// the answer echoes it as metadata.source. Nil for a request an API published.
	Source *Source `json:"source,omitempty"`
}

// RecipeName is the recipe the request asks for: DefaultRecipe when it names none.
func (r Request) RecipeName() string {
	if r.Recipe == "" {
		return DefaultRecipe
	}
	return r.Recipe
}

// Response reports the one outcome of a request. Error is set exactly when Success is false.
type Response struct {
	MediaID     string `json:"mediaId"`
	OriginalURL string `json:"originalUrl"`
	Success     bool   `json:"success"`
	// Recipe echoes the request's recipe when it named one. Its presence is what lets processed[]
	// carry variant names and formats beyond the seed contract's enums (see response.schema.json).
	Recipe    string    `json:"recipe,omitempty"`
	Error     string    `json:"error,omitempty"`
	Processed []Variant `json:"processed,omitempty"`
	Metadata  *Metadata `json:"metadata,omitempty"`
	Warnings  []string  `json:"warnings,omitempty"`
}

// Variant is one uploaded output.
type Variant struct {
	Quality string `json:"quality"`
	Format  string `json:"format"`
	URL     string `json:"url"`
	Size    int64  `json:"size"`
	Width   int    `json:"width,omitempty"`
	Height  int    `json:"height,omitempty"`
}

// Metadata describes the source media. All fields are optional.
type Metadata struct {
	MIME            string  `json:"mime,omitempty"`
	Width           int     `json:"width,omitempty"`
	Height          int     `json:"height,omitempty"`
	DurationSeconds float64 `json:"durationSeconds,omitempty"`
	VideoCodec      string  `json:"videoCodec,omitempty"`
	AudioCodec      string  `json:"audioCodec,omitempty"`
	HasAlpha        bool    `json:"hasAlpha,omitempty"`
	// HDR is "hlg" or "pq" when the source (a video, or a HEIC/AVIF still) was HDR (its outputs were tone-mapped to SDR).
	HDR string `json:"hdr,omitempty"`

	// The asset's facts (a video's from its poster frame): what a UI shows before the media loads,
	// and what finds duplicates. FactsAlgorithm names how they were computed: hashes are comparable
	// only between answers with the same value.
	ThumbHash      string   `json:"thumbhash,omitempty"`
	DominantColor  string   `json:"dominantColor,omitempty"`
	Palette        []string `json:"palette,omitempty"`
	PHash          string   `json:"phash,omitempty"`
	SHA256         string   `json:"sha256,omitempty"`
	FactsAlgorithm string   `json:"factsAlgorithm,omitempty"`
	// PosterTimeSeconds is where in a video its poster was taken.
	PosterTimeSeconds *float64 `json:"posterTimeSeconds,omitempty"`
	// Pages is a document's page count (a PDF's; 1 for an SVG), whose first page made the variants:
	// only in answers to recipes that ask for documents.
	Pages int `json:"pages,omitempty"`
	// Reused says the answer was made from an earlier upload of the same bytes (same recipe, same
	// bucket): the upload was scanned as every upload is, and its variants were copied, not made again.
	Reused bool `json:"reused,omitempty"`
	// Source echoes the request's source (an ingest-made request): which upload this answer is for.
	Source *Source `json:"source,omitempty"`
}

// VirusEvent tells the API that an upload was infected and what was done with it.
type VirusEvent struct {
	MediaID     string `json:"mediaId"`
	S3Key       string `json:"s3Key"`
	S3Bucket    string `json:"s3Bucket"`
	MediaURL    string `json:"mediaUrl"`
	VirusName   string `json:"virusName"`
	DetectedAt  string `json:"detectedAt"`
	ActionTaken string `json:"actionTaken"`
}

// HeaderBucket on a published response names the bucket of the request it answers (the seed response
// body does not), so a reader that serves one tenant, such as a webhook endpoint limited to certain
// buckets, can tell whose answer it is without reading the request.
const HeaderBucket = "Mw-Bucket"

// Subjects are the NATS subjects of one application prefix.
type Subjects struct {
	Request  string // API → worker
	Response string // worker → API
	Virus    string // worker → API
	DLQ      string // worker → operators
	Progress string // worker → anyone; prefix, one subject per mediaId (see ProgressSubject)
}

var appPattern = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// ValidateApp checks an application prefix: it becomes a subject token and part of stream names.
func ValidateApp(app string) error {
	if !appPattern.MatchString(app) {
		return fmt.Errorf("app prefix %q must be letters, digits, '_' or '-' (it is a subject token and part of stream names)", app)
	}
	return nil
}

// SubjectsFor returns the subjects of application prefix app (see ValidateApp).
func SubjectsFor(app string) Subjects {
	base := app + ".media.optimize."
	return Subjects{
		Request:  base + "request",
		Response: base + "response",
		Virus:    base + "response.virus",
		DLQ:      base + "dlq",
		Progress: base + "progress",
	}
}

// HeaderWebhookEndpoint on a dead letter names the webhook endpoint an undelivered answer was for
// (package webhooks writes it); such an entry is an answer, never a request to replay.
const HeaderWebhookEndpoint = "Mw-Webhook-Endpoint"
