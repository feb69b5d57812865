package pipeline

import (
	"github.com/mediaworker/mediaworker/transcoder"
)

// MetadataChecker is an ImageTransformer that can refuse an image for its metadata from the file's
// structure alone (transcoder.Images). The pipeline asks it right after detection, before the memory
// budget's estimate reads the header: a header read already holds the metadata (libjpeg keeps every
// APPn segment it passes), so a 640×480 JPEG carrying 250 MB of EXIF cost the worker that much
// memory before the transform refused it.
type MetadataChecker interface {
	CheckMetadata(srcPath string) error
}

// checkMetadata refuses an image over the transformer's metadata limits before anything decodes it.
// The refusal is the transformer's, and reads as the transform's would ("transforming: image carries
// …"), where it came from before this check moved ahead of the header read.
func (p *Pipeline) checkMetadata(j *job) error {
	c, ok := p.images.(MetadataChecker)
	if !ok || j.kind != Image {
		return nil
	}
	if err := c.CheckMetadata(j.input); err != nil {
		if transcoder.IsBadInput(err) {
			return permanent("transforming", err)
		}
		return transient("transforming", err)
	}
	return nil
}
