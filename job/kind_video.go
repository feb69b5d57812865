package job

import (
	"strings"

	"github.com/mediaworker/mediaworker/contracts"
)

// Video is the kind of moving pictures.
const Video Kind = "video"

// The video kind: transcoded by ffmpeg in child processes, which report their progress.
func init() {
	Register(Spec{
		Kind:  Video,
		Order: 20,
		Work:  "transcodes",
		// Half the cores (an encode uses more than one), at least one.
		Lane: LaneDefaults{Slots: func(cores int) int {
			if cores > 2 {
				return cores / 2
			}
			return 1
		}, SlotsRule: "1 on ≤ 2 CPUs, else CPUs ÷ 2"},
		Progress:   true,
		Recognises: func(mime string) bool { return strings.HasPrefix(mime, "video/") },
		Preview: func(v contracts.Variant) bool {
			return v.Format == contracts.FormatJPG && v.Quality == contracts.QualityThumbnail
		},
	})
}
