package pipeline

// The job's outputs: what the transform made of the input (an image's variants, a video's MP4, poster
// and recipe outputs), each a file to upload with the variant it becomes, and their upload into the
// store, which fills the response.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/facts"
	"github.com/mediaworker/mediaworker/objstore"
	"go.opentelemetry.io/otel/trace"
)

// output is one file to upload and the variant it becomes.
type output struct {
	path, key, contentType string
	variant                contracts.Variant
	role, name             string // what the output is (reuse.go's roles), to make its key for another request
	size                   int64  // once uploaded
	tag                    string // once uploaded: the store's name of the stored version (objstore.Info.Tag)
}

func (p *Pipeline) transformImage(ctx context.Context, j *job, outDir string) ([]output, error) {
	res, err := p.images.TransformRecipe(ctx, j.input, outDir, j.recipe.Images)
	if err != nil {
		return nil, err
	}
	j.out.Response.Metadata = &contracts.Metadata{MIME: j.mime, Width: res.Width, Height: res.Height, HasAlpha: res.HasAlpha, HDR: res.HDR}
	j.addFacts(res.Facts)
	j.out.Response.Warnings = append(j.out.Response.Warnings, res.Warnings...)
	if res.Facts == nil {
		j.out.Response.Warnings = append(j.out.Response.Warnings, noFactsWarning)
	}
	outs := make([]output, 0, len(res.Variants))
	for _, v := range res.Variants {
		format, contentType := variantFormat(v.Format)
		outs = append(outs, output{
			role: roleImage, name: v.Quality,
			path: v.Path, key: j.keys.ImageAs(v.Quality, format), contentType: contentType,
			variant: contracts.Variant{Quality: v.Quality, Format: format, Width: v.Width, Height: v.Height},
		})
	}
	return outs, nil
}

func (p *Pipeline) transformVideo(ctx context.Context, j *job, outDir string) ([]output, error) {
	res, err := p.videos.TransformProbed(ctx, j.probe, outDir)
	if err != nil {
		return nil, err
	}
	src := res.Source
	j.out.Response.Metadata = &contracts.Metadata{
		MIME: j.mime, Width: src.Width, Height: src.Height, DurationSeconds: src.Duration,
		VideoCodec: src.VideoCodec, AudioCodec: src.AudioCodec, HDR: src.HDR,
	}
	var poster *facts.Facts
	if res.PosterPath != "" {
		poster = posterFacts(res.PosterPath)
		at := res.PosterTimeSeconds
		j.out.Response.Metadata.PosterTimeSeconds = &at
		if poster == nil {
			j.out.Response.Warnings = append(j.out.Response.Warnings, noFactsWarning)
		}
	}
	j.addFacts(poster)
	outs := []output{{
		role: roleVideo,
		path: res.MP4Path, key: j.keys.Video(), contentType: "video/mp4",
		variant: contracts.Variant{Quality: contracts.QualityOriginal, Format: contracts.FormatMP4, Width: res.MP4.Width, Height: res.MP4.Height},
	}}
	if res.PosterPath != "" {
		outs = append(outs, output{
			role: rolePoster,
			path: res.PosterPath, key: j.keys.Poster(), contentType: "image/jpeg",
			variant: contracts.Variant{Quality: contracts.QualityThumbnail, Format: contracts.FormatJPG,
				Width: res.PosterWidth, Height: res.PosterHeight},
		})
	} else if res.PosterErr != nil {
		// The warning is read by people; what ffmpeg said, or the scratch path it could not read, is
		// for the operator's trace.
		trace.SpanFromContext(ctx).RecordError(res.PosterErr)
		j.out.Response.Warnings = append(j.out.Response.Warnings, "no poster: "+posterSentence(res.PosterErr))
	}
	// HLS segments are uploaded first and the playlist last, so a reader never sees a playlist that
	// names a missing segment.
	var playlist *output
	for _, f := range res.HLSFiles {
		name := filepath.Base(f)
		o := output{role: roleHLS, name: name, path: f, key: j.keys.HLS(name), contentType: "video/mp2t"}
		if strings.HasSuffix(name, ".m3u8") {
			o.contentType = "application/vnd.apple.mpegurl"
			o.variant = contracts.Variant{Quality: contracts.QualityOriginal, Format: contracts.FormatM3U8}
			playlist = &o
			continue
		}
		outs = append(outs, o)
	}
	if playlist != nil {
		outs = append(outs, *playlist)
	}
	more, err := p.videoRecipeOutputs(ctx, j, outDir)
	if err != nil {
		return nil, err
	}
	return append(outs, more...), nil
}

// upload stores every output and fills the response. Only outputs with a variant format are listed.
func (p *Pipeline) upload(ctx context.Context, j *job) error {
	for i, o := range j.outs {
		if err := ctx.Err(); err != nil {
			return transientSaid("uploading", jobStopped, fmt.Errorf("job stopped: %w", context.Cause(ctx)))
		}
		n, tag, err := p.uploadFile(ctx, j.req.S3Bucket, o)
		j.outs[i].size, j.outs[i].tag = n, tag
		if err != nil {
			err = fmt.Errorf("uploading %s: %w", o.key, err)
			if objstore.IsPermanent(err) { // the store refuses the output (its bucket gone, a name it will not take)
				return permanent("uploading", err)
			}
			return transient("uploading", err)
		}
		if p.observer != nil {
			p.observer.Transferred("out", n)
		}
		if o.variant.Format == "" {
			continue
		}
		v := o.variant
		v.Size = n
		v.URL = p.url(j.req.S3Bucket, o.key)
		j.out.Response.Processed = append(j.out.Response.Processed, v)
	}
	j.out.Response.Success = true
	return nil
}

// uploadFile stores one output and returns its size and the Tag of the version stored (what the
// reuse memory checks before it hands the output out again; "" when the store cannot tell).
func (p *Pipeline) uploadFile(ctx context.Context, bucket string, o output) (int64, string, error) {
	f, err := os.Open(o.path)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, "", err
	}
	// Marked as ours: the HTTP server serves only objects that carry the marker.
	var tag string
	if err := p.store.Put(objstore.RecordingTag(objstore.AsVariant(ctx), &tag), bucket, o.key, f, st.Size(), o.contentType); err != nil {
		return 0, "", err
	}
	return st.Size(), tag, nil
}

func (p *Pipeline) url(bucket, key string) string {
	u := p.store.URL(bucket, key)
	if p.cfg.PublicBaseURL != "" {
		u = objstore.ObjectURL(p.cfg.PublicBaseURL, key)
	}
	if p.signURL != nil {
		u = p.signURL(u, key)
	}
	return u
}
