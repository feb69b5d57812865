package pipeline

import (
	"context"
	"path/filepath"
	"strings"

	"go.opentelemetry.io/otel/trace"

	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/facts"
)

func init() {
	registerKind(Video, func(d Deps) kindHandler { return videoHandler{videos: d.Videos} })
}

// videoHandler is the video kind: ffprobe and ffmpeg in child processes, an MP4, a poster, HLS and
// the recipe's renditions and storyboard (video_recipe.go).
type videoHandler struct {
	videos VideoTransformer
}

// watched is true: ffmpeg reports its position, and its CPU time shows it works (stall.go).
func (videoHandler) watched() bool { return true }

// downloaded starts the probe beside the scan (probe.go).
func (h videoHandler) downloaded(ctx context.Context, j *job) { h.startProbe(ctx, j) }

// check takes the probe's answer: the video's description, or its refusal. The probe's duration is
// what the encode's CPU budget follows (transcoder's cpuBudget).
func (h videoHandler) check(ctx context.Context, j *job) error {
	probe, err := h.probeVideo(ctx, j)
	if err != nil {
		return classed("probing", err)
	}
	j.probe = probe
	return nil
}

func (h videoHandler) estimateMemory(j *job) int64 {
	if e, ok := h.videos.(VideoMemoryEstimator); ok {
		return e.EstimateMemory(j.probe)
	}
	return defaultJobMemory
}

func (h videoHandler) transform(ctx context.Context, j *job, outDir string) (made, error) {
	res, err := h.videos.TransformProbed(ctx, j.probe, outDir)
	if err != nil {
		return made{}, err
	}
	src := res.Source
	m := made{metadata: &contracts.Metadata{
		MIME: j.mime, Width: src.Width, Height: src.Height, DurationSeconds: src.Duration,
		VideoCodec: src.VideoCodec, AudioCodec: src.AudioCodec, HDR: src.HDR,
	}}
	var poster *facts.Facts
	if res.PosterPath != "" {
		poster = posterFacts(res.PosterPath)
		at := res.PosterTimeSeconds
		m.metadata.PosterTimeSeconds = &at
		if poster == nil {
			m.warnings = append(m.warnings, noFactsWarning)
		}
	}
	m.facts = poster
	m.outs = []output{{
		role: roleVideo,
		path: res.MP4Path, key: j.keys.Video(), contentType: "video/mp4",
		variant: contracts.Variant{Quality: contracts.QualityOriginal, Format: contracts.FormatMP4, Width: res.MP4.Width, Height: res.MP4.Height},
	}}
	if res.PosterPath != "" {
		m.outs = append(m.outs, output{
			role: rolePoster,
			path: res.PosterPath, key: j.keys.Poster(), contentType: "image/jpeg",
			variant: contracts.Variant{Quality: contracts.QualityThumbnail, Format: contracts.FormatJPG,
				Width: res.PosterWidth, Height: res.PosterHeight},
		})
	} else if res.PosterErr != nil {
		// The warning is read by people; what ffmpeg said, or the scratch path it could not read, is
		// for the operator's trace.
		trace.SpanFromContext(ctx).RecordError(res.PosterErr)
		m.warnings = append(m.warnings, "no poster: "+posterSentence(res.PosterErr))
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
		m.outs = append(m.outs, o)
	}
	if playlist != nil {
		m.outs = append(m.outs, *playlist)
	}
	more, err := h.recipeOutputs(ctx, j, outDir)
	if err != nil {
		return made{}, err
	}
	m.outs = append(m.outs, more...)
	return m, nil
}
