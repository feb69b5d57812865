package job

import (
	"strings"

	"github.com/mediaworker/mediaworker/contracts"
)

// Image is the kind of pictures.
const Image Kind = "image"

// The image kind: still and animated pictures, transformed by libvips in the worker's own process.
func init() {
	Register(Spec{
		Kind:  Image,
		Order: 10,
		Work:  "transforms",
		// One job per core: libvips runs one thread per job.
		Lane:       LaneDefaults{Slots: func(cores int) int { return cores }, SlotsRule: "number of CPUs"},
		InProcess:  true,
		Recognises: func(mime string) bool { return strings.HasPrefix(mime, "image/") && !isDocument(mime) }, // an SVG is a document
		Preview: func(v contracts.Variant) bool {
			return v.Format == contracts.FormatWebP && v.Quality == contracts.QualityLow
		},
	})
}
