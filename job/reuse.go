package job

import (
	"context"

	"github.com/mediaworker/mediaworker/contracts"
)

// Reuse is the memory of recent outcomes, by the pipeline's reuse key (the upload's SHA-256, the
// recipe and its settings' fingerprint, the bucket): what an upload became, so a later upload of the
// same bytes is scanned and its outputs copied instead of made again (pipeline/reuse.go says what
// reuse promises). jetstream keeps it in a KV bucket.
type Reuse interface {
	// Lookup returns the entry stored under key, nil when there is none.
	Lookup(ctx context.Context, key string) (*Reused, error)
	Remember(ctx context.Context, key string, r Reused) error
}

// Reused is what one upload became.
type Reused struct {
	// Bucket holds the outputs (the request's own bucket unless reuse is shared across buckets).
	Bucket   string              `json:"bucket,omitempty"`
	Outputs  []ReusedOutput      `json:"outputs,omitempty"`
	Metadata *contracts.Metadata `json:"metadata,omitempty"`
	Warnings []string            `json:"warnings,omitempty"`
}

// ReusedOutput is one stored output: where it is, which bytes it holds, and what it becomes under
// another request's keys.
type ReusedOutput struct {
	Key string `json:"key"`
	// Tag is the store's name of the version the worker stored (objstore.Info.Tag, as its Put
	// recorded it): the output is handed out only while a Stat finds that same Tag.
	Tag         string            `json:"tag"`
	Role        string            `json:"role"` // image, video, poster or hls
	Name        string            `json:"name"` // image: variant name; hls: the file's name
	ContentType string            `json:"contentType"`
	Variant     contracts.Variant `json:"variant"` // without URL; Format "" for unlisted files
}
