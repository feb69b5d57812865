package pipeline

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/objstore"
)

// Repeated bytes, no rework. A site receives the same bytes again and again (forwarded memes,
// re-uploads, retried uploads under a new key). What an upload became is remembered under its SHA-256,
// the recipe (with a fingerprint of the settings that shape its outputs) and clamd's signature version;
// a later upload of the same bytes for the same recipe, while clamd runs the same signatures, is
// answered from that memory: its variants are copied to the new request's keys, nothing is scanned or
// transformed, and the answer says "reused". New signatures mean a new scan; an upload remembered as
// infected is answered as infected, and the new object is removed as the first was.

// Reuse is the memory of recent outcomes, by ReuseKey.
type Reuse interface {
	// Lookup returns the entry stored under key, nil when there is none.
	Lookup(ctx context.Context, key string) (*Reused, error)
	Remember(ctx context.Context, key string, r Reused) error
}

// SignatureVersion reports the version of the virus signatures clamd scans with now, as a key part
// (no '.'); it is asked for each reuse lookup, so a reload is seen by the next upload.
type SignatureVersion func(ctx context.Context) (string, error)

// Reused is what one upload became.
type Reused struct {
	// Virus is the signature an infected upload matched; then nothing else is set.
	Virus string `json:"virus,omitempty"`
	// Bucket holds the outputs (an API may keep uploads in several buckets).
	Bucket   string              `json:"bucket,omitempty"`
	Outputs  []ReusedOutput      `json:"outputs,omitempty"`
	Metadata *contracts.Metadata `json:"metadata,omitempty"`
	Warnings []string            `json:"warnings,omitempty"`
}

// ReusedOutput is one stored output: where it is, and what it becomes under another request's keys.
type ReusedOutput struct {
	Key         string            `json:"key"`
	Role        string            `json:"role"` // image, video, poster or hls
	Name        string            `json:"name"` // image: variant name; hls: the file's name
	ContentType string            `json:"contentType"`
	Variant     contracts.Variant `json:"variant"` // without URL; Format "" for unlisted files
}

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

// keyFor is the output's key under the request's keys.
func (o ReusedOutput) keyFor(k contracts.OutputKeys) (string, error) {
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

// reuseKey is the memory's key of the job's upload, "" when reuse is off or clamd cannot tell its
// signature version (then the upload is scanned as if never seen).
func (p *Pipeline) reuseKey(ctx context.Context, j *job) string {
	if p.reuse == nil || p.sigVersion == nil || j.sha256 == "" {
		return ""
	}
	v, err := p.sigVersion(ctx)
	if err != nil || v == "" {
		return ""
	}
	return j.sha256 + "." + j.recipe.Name + "-" + p.cfg.ReuseFingerprint + "." + v
}

// recallReuse answers the job from the memory when its upload was seen before: copies the outputs
// and fills the answer (j.out, j.done), or, for infected bytes, removes the new object and answers
// infected. A miss, or outputs that are gone since, leaves the job to be scanned and transformed.
func (p *Pipeline) recallReuse(ctx context.Context, j *job) error {
	j.reuseKey = p.reuseKey(ctx, j)
	if j.reuseKey == "" {
		return nil
	}
	r, err := p.reuse.Lookup(ctx, j.reuseKey)
	if err != nil || r == nil {
		return nil // a memory that cannot be read is no reason to fail: the job is done the long way
	}
	if r.Virus != "" {
		j.reused = true
		return p.infected(ctx, j, r.Virus)
	}
	var processed []contracts.Variant
	for _, o := range r.Outputs {
		key, err := o.keyFor(j.keys)
		if err != nil {
			return nil
		}
		// Only what this worker wrote, as it wrote it: an output overwritten since (another writer, a
		// replaced object without the variant marker, another size) is not handed out as this one's.
		info, err := p.store.Stat(ctx, r.Bucket, o.Key)
		if errors.Is(err, objstore.ErrNotFound) || (err == nil && (!info.Variant || info.Size != o.Variant.Size)) {
			return nil // made again below
		}
		if err != nil {
			return transient("looking up a reused output", err)
		}
		if err := objstore.CopyStatted(ctx, p.store, info, j.req.S3Bucket, key); err != nil {
			if errors.Is(err, objstore.ErrNotFound) || errors.Is(err, objstore.ErrChanged) {
				return nil // the first upload's outputs were deleted since: make them again
			}
			return transient("copying a reused output", err)
		}
		if o.Variant.Format == "" {
			continue
		}
		v := o.Variant
		v.URL = p.url(j.req.S3Bucket, key)
		processed = append(processed, v)
	}
	j.reused = true
	j.done = true
	md := contracts.Metadata{}
	if r.Metadata != nil {
		md = *r.Metadata
	}
	md.MIME = orString(md.MIME, j.mime)
	md.SHA256, md.Reused = j.sha256, true
	j.out.Response.Metadata = &md
	j.out.Response.Processed = processed
	j.out.Response.Warnings = append(j.out.Response.Warnings, r.Warnings...)
	j.out.Response.Success = true
	return nil
}

// rememberReuse stores what the job became, for the next upload of the same bytes. A write that
// fails costs only the next upload's rework.
func (p *Pipeline) rememberReuse(ctx context.Context, j *job) {
	if j.reuseKey == "" || j.reused {
		return
	}
	r := Reused{}
	switch {
	case j.out.Kind == Infected && j.out.Virus != nil:
		r.Virus = j.out.Virus.VirusName
	case j.out.Kind == Success && j.out.Response.Success:
		r.Bucket = j.req.S3Bucket
		for _, o := range j.outs {
			r.Outputs = append(r.Outputs, ReusedOutput{Key: o.key, Role: o.role, Name: o.name, ContentType: o.contentType,
				Variant: contracts.Variant{Quality: o.variant.Quality, Format: o.variant.Format, Width: o.variant.Width, Height: o.variant.Height, Size: o.size}})
		}
		if md := j.out.Response.Metadata; md != nil {
			c := *md
			c.SHA256, c.Reused, c.Source = "", false, nil // this upload's, not the next one's
			r.Metadata = &c
		}
		r.Warnings = j.out.Response.Warnings
	default:
		return
	}
	_ = p.reuse.Remember(context.WithoutCancel(ctx), j.reuseKey, r)
}

// startScan hands the downloaded file to clamd, for a job whose download did not stream it (reuse is
// on: the upload's hash decides first whether it is scanned at all).
func (p *Pipeline) startScan(ctx context.Context, j *job) {
	if !j.scanDeferred || j.done || j.out.Kind != Success {
		return
	}
	j.scanDeferred = false
	if ips, ok := p.scanner.(InPlaceScanner); ok && ips.ScansInPlace() {
		go func() {
			v, err := ips.ScanFile(ctx, j.input)
			j.scanned <- scanResult{v, err}
		}()
		return
	}
	f, err := os.Open(j.input)
	if err != nil {
		j.scanned <- scanResult{err: fmt.Errorf("opening the download to scan it: %w", err)}
		return
	}
	go func() {
		defer f.Close()
		v, err := p.scanner.Scan(ctx, f, j.info.Size)
		j.scanned <- scanResult{v, err}
	}()
}

func orString(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
