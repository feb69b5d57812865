package pipeline

import (
	"context"
	"errors"
	"fmt"

	"github.com/mediaworker/mediaworker/contracts"
	vocab "github.com/mediaworker/mediaworker/job" // the job's vocabulary; "job" here is one running job
	"github.com/mediaworker/mediaworker/objstore"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Repeated bytes, no rework. A site receives the same bytes again and again (forwarded memes,
// re-uploads, retried uploads under a new key). What an upload became is remembered under its SHA-256,
// the recipe (with a fingerprint of the settings that shape its outputs) and its bucket; a later upload
// of the same bytes for the same recipe in the same bucket is scanned like every upload, and when clamd
// finds it clean its variants are copied to the new request's keys instead of being made again, and the
// answer says "reused". What reuse promises (SECURITY.md, "Requests and neighbours"; docs/contract.md):
//
//   - The scan is never skipped: clamd sees every upload's bytes, during the download as without reuse,
//     so a signature added since (a daily update, a site's own .hdb/.ndb, a reload) decides the repeat
//     as it would decide a first upload. Only the transform is skipped.
//   - A remembered output is handed out only while the stored object is provably the one the worker
//     wrote: its store's Tag (natsobj: its SHA-256 digest; s3: its ETag and version ID) is the one the
//     worker's Put recorded, and the copy is of that version (objstore.CopyStatted). Bytes of the same
//     size written over it since (another request under the same keys) are never handed out.
//   - Reuse stays in the request's bucket: another bucket's uploads are never answered from, or read
//     for, this one (a fast "reused" answer would tell one tenant that another uploaded these exact
//     bytes). Sharing across buckets is an explicit setting (Config.ReuseAcrossBuckets).
//   - A remembered output that cannot be looked up, read or copied (gone, replaced, a store that refuses
//     this worker: 403) costs the rework, never the answer: the job is done as if never seen.

// Reuse is the memory of recent outcomes, by reuseKey (job.Reuse).
type Reuse = vocab.Reuse

// Reused is what one upload became (job.Reused).
type Reused = vocab.Reused

// ReusedOutput is one stored output (job.ReusedOutput).
type ReusedOutput = vocab.ReusedOutput

// Output roles, which say how a reused output's key is made for the new request.
const (
	roleImage  = "image"
	roleVideo  = "video"
	rolePoster = "poster"
	roleHLS    = "hls"
	// roleMP4 is one of a recipe's MP4 renditions (Name: its name, "720p").
	roleMP4 = "mp4"
	// roleStoryboard is a storyboard's sprite or VTT (Name: the file's name).
	roleStoryboard = "storyboard"
)

// reusedKey is the output's key under the request's keys.
func reusedKey(o ReusedOutput, k contracts.OutputKeys) (string, error) {
	switch o.Role {
	case roleImage:
		return k.ImageAs(o.Name, o.Variant.Format), nil
	case roleVideo:
		return k.Video(), nil
	case rolePoster:
		return k.Poster(), nil
	case roleHLS:
		return k.HLS(o.Name), nil
	case roleMP4:
		return mp4RenditionKey(k, o.Name), nil
	case roleStoryboard:
		return k.Storyboard(o.Name), nil
	}
	return "", fmt.Errorf("a remembered output has role %q", o.Role)
}

// sharedScope stands for the bucket in the key of an upload remembered for every bucket: no bucket
// name has a '_' (contracts.ValidateBucket), so it never meets a bucket's own scope.
const sharedScope = "_shared"

// reuseKey is the memory's key of the job's upload, "" when reuse is off. The bucket is part of it
// unless reuse is shared across buckets; the signature version is not: every upload is scanned.
func (m *reuser) reuseKey(j *job) string {
	if m.reuse == nil || j.sha256 == "" {
		return ""
	}
	scope := j.req.S3Bucket
	if m.cfg.ReuseAcrossBuckets {
		scope = sharedScope
	}
	return j.sha256 + "." + j.recipe.Name + "-" + m.cfg.ReuseFingerprint + "." + scope
}

// recall answers a clean job from the memory when its upload was seen before: copies the
// remembered outputs to the request's keys and gathers the answer (j.made, j.done; respond builds it). Anything short of
// that (a miss, an entry that cannot be read, an output gone, replaced or unreadable) leaves the job
// to be transformed; it never fails the job.
func (m *reuser) recall(ctx context.Context, j *job) {
	j.reuseKey = m.reuseKey(j)
	if j.reuseKey == "" {
		return
	}
	r, err := m.reuse.Lookup(ctx, j.reuseKey)
	if err != nil || r == nil {
		reuseMissed(ctx, "the memory cannot be read", err)
		return // a memory that cannot be read is no reason to fail: the job is done the long way
	}
	if len(r.Outputs) == 0 || (!m.cfg.ReuseAcrossBuckets && r.Bucket != j.req.S3Bucket) {
		reuseMissed(ctx, "the entry is not this bucket's", nil)
		return
	}
	processed, err := m.copyReused(ctx, j, r)
	if err != nil {
		reuseMissed(ctx, "a remembered output cannot be handed out", err)
		return // made again by the next steps, over whatever the copies left at the request's keys
	}
	j.reused = true
	j.done = true
	// The outcome's kind, as detect (a step the answer skips) would have found it: the log,
	// mediaworker_jobs_total and the console count a reused photo as an image, not as "unknown". (j.kind
	// stays unset: the stage metrics label the stages before detecting "unknown" for every job.)
	mime, kind, err := j.sniff()
	if err == nil {
		j.out.MediaKind, j.out.MIME = kind, mime
	}
	md := contracts.Metadata{}
	if r.Metadata != nil {
		md = *r.Metadata
	}
	md.MIME = orString(md.MIME, mime)
	md.SHA256, md.Reused = j.sha256, true
	j.made = made{metadata: &md, processed: processed, warnings: r.Warnings}
}

// errReplaced says a remembered output's key no longer holds the bytes the worker stored there.
var errReplaced = errors.New("the remembered output was replaced since")

// copyReused copies every remembered output to the request's keys, each only as the version the
// worker stored (its Tag) and only that version (CopyStatted); it returns the listed variants.
func (m *reuser) copyReused(ctx context.Context, j *job, r *Reused) ([]contracts.Variant, error) {
	var processed []contracts.Variant
	for _, o := range r.Outputs {
		key, err := reusedKey(o, j.keys)
		if err != nil {
			return nil, err
		}
		info, err := m.store.Stat(ctx, r.Bucket, o.Key)
		if err != nil {
			return nil, fmt.Errorf("looking up %s/%s: %w", r.Bucket, o.Key, err)
		}
		// Only what this worker wrote, as it wrote it: not an object without the marker, not other
		// bytes at the key (the worker itself answering another request under those keys), and not
		// its bytes written back under another Content-Type (the Tag names the bytes alone: an S3 ETag
		// is their MD5), which the copy would keep and S3 or a CDN serve (text/html).
		if !info.Variant || o.Tag == "" || info.Tag != o.Tag || info.ContentType != o.ContentType {
			return nil, fmt.Errorf("%s/%s: %w (tag %q, remembered %q; content type %q, remembered %q)",
				r.Bucket, o.Key, errReplaced, info.Tag, o.Tag, info.ContentType, o.ContentType)
		}
		if err := objstore.CopyStatted(ctx, m.store, info, j.req.S3Bucket, key); err != nil {
			return nil, fmt.Errorf("copying %s/%s: %w", r.Bucket, o.Key, err)
		}
		if o.Variant.Format == "" {
			continue
		}
		v := o.Variant
		v.URL = m.out.url(j.req.S3Bucket, key)
		processed = append(processed, v)
	}
	return processed, nil
}

// reuseMissed notes on the job's trace why a remembered upload was done again (err nil: a plain miss).
func reuseMissed(ctx context.Context, why string, err error) {
	if err == nil {
		return
	}
	span := trace.SpanFromContext(ctx)
	span.AddEvent("reuse missed", trace.WithAttributes(attribute.String("mediaworker.reuse.why", why)))
	span.RecordError(err)
}

// remember stores what a successful job became, for the next upload of the same bytes. A job
// whose outputs' Tags are not all known is not remembered (they could never be proven). A write
// that fails costs only the next upload's rework.
func (m *reuser) remember(ctx context.Context, j *job) {
	if j.reuseKey == "" || j.reused || j.out.Kind != Success || !j.out.Response.Success {
		return
	}
	r := Reused{Bucket: j.req.S3Bucket}
	for _, o := range j.outs {
		if o.tag == "" {
			return
		}
		r.Outputs = append(r.Outputs, ReusedOutput{Key: o.key, Tag: o.tag, Role: o.role, Name: o.name, ContentType: o.contentType,
			Variant: contracts.Variant{Quality: o.variant.Quality, Format: o.variant.Format, Width: o.variant.Width, Height: o.variant.Height, Size: o.size}})
	}
	if md := j.out.Response.Metadata; md != nil {
		c := *md
		c.SHA256, c.Reused, c.Source = "", false, nil // this upload's, not the next one's
		r.Metadata = &c
	}
	r.Warnings = j.out.Response.Warnings
	_ = m.reuse.Remember(context.WithoutCancel(ctx), j.reuseKey, r)
}

func orString(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
