package pipeline

import (
	"context"

	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/transcoder"
)

func init() {
	registerKind(Image, func(d Deps) kindHandler { return imageHandler{images: d.Images} })
}

// imageHandler is the image kind: libvips, in this process, the recipe's image variants.
type imageHandler struct {
	images ImageTransformer
}

// MetadataChecker is an ImageTransformer that can refuse an image for its metadata from the file's
// structure alone (transcoder.Images). The pipeline asks it right after detection, before the memory
// budget's estimate reads the header: a header read already holds the metadata (libjpeg keeps every
// APPn segment it passes), so a 640×480 JPEG carrying 250 MB of EXIF cost the worker that much
// memory before the transform refused it.
type MetadataChecker interface {
	CheckMetadata(srcPath string) error
}

func (imageHandler) downloaded(context.Context, *job) {}

// watched is false: libvips' calls cannot be interrupted and report nothing while they run; their
// cost is bounded by the pixel, frame and metadata limits checked before any pixel is decoded (enter).
func (imageHandler) watched() bool { return false }

// check refuses an image over the transformer's metadata limits before anything decodes it
// (MetadataChecker). The refusal is the transformer's, and reads as the transform's would
// ("transforming: image carries …"), where it came from before this check moved ahead of the header
// read.
func (h imageHandler) check(_ context.Context, j *job) error {
	c, ok := h.images.(MetadataChecker)
	if !ok {
		return nil
	}
	if err := c.CheckMetadata(j.input); err != nil {
		return classed("transforming", err)
	}
	return nil
}

func (h imageHandler) estimateMemory(j *job) int64 {
	if e, ok := h.images.(ImageMemoryEstimator); ok {
		return e.EstimateMemory(j.input, j.recipe.Images)
	}
	return defaultJobMemory
}

func (h imageHandler) transform(ctx context.Context, j *job, outDir string) (made, error) {
	res, err := h.images.TransformRecipe(ctx, j.input, outDir, j.recipe.Images)
	if err != nil {
		return made{}, err
	}
	return imageMade(j, res, &contracts.Metadata{MIME: j.mime, Width: res.Width, Height: res.Height, HasAlpha: res.HasAlpha, HDR: res.HDR}), nil
}

// imageMade is what the recipe's image variants make of a job: their outputs, under the job's image
// keys, and the asset's facts and warnings, with the kind's own metadata. A document's rendered page
// becomes variants the same way (kind_document.go).
func imageMade(j *job, res transcoder.ImageResult, md *contracts.Metadata) made {
	m := made{metadata: md, facts: res.Facts, warnings: res.Warnings}
	if res.Facts == nil {
		m.warnings = append(m.warnings, noFactsWarning)
	}
	for _, v := range res.Variants {
		format, contentType := variantFormat(v.Format)
		m.outs = append(m.outs, output{
			role: roleImage, name: v.Quality,
			path: v.Path, key: j.keys.ImageAs(v.Quality, format), contentType: contentType,
			variant: contracts.Variant{Quality: v.Quality, Format: format, Width: v.Width, Height: v.Height},
		})
	}
	return m
}
