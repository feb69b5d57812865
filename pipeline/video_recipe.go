package pipeline

import (
	"context"
	"errors"
	"path/filepath"
	"strings"

	"go.opentelemetry.io/otel/trace"

	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/transcoder"
)

// Qualities of the outputs a recipe's video side adds (answers to requests that name a recipe only).
const (
	QualityHLS        = "hls"
	QualityStoryboard = "storyboard"
	formatVTT         = "vtt"
)

// RenditionMaker makes a recipe's MP4 renditions and HLS ladder in one run (transcoder.Videos does).
type RenditionMaker interface {
	Renditions(ctx context.Context, probe *transcoder.VideoProbe, outDir string, spec transcoder.RenditionsSpec) (transcoder.RenditionsResult, error)
}

// mp4RenditionKey is the key of a recipe's MP4 rendition named name ("720p"): beside the MP4's,
// <dir>/videos/<mediaId>/mp4/<stem>_<name>.mp4.
func mp4RenditionKey(k contracts.OutputKeys, name string) string {
	return strings.TrimSuffix(k.Video(), ".mp4") + "_" + name + ".mp4"
}

// recipeOutputs makes what the job's recipe asks of a video beyond the MP4 and poster: MP4
// renditions (each listed in the answer as {quality: <name>, format: mp4}, e.g. 720p) and an HLS
// ladder (its master playlist listed in the answer, every file uploaded, playlists last), in one run
// that decodes the video once, and a storyboard (the sprite, then its VTT).
func (h videoHandler) recipeOutputs(ctx context.Context, j *job, outDir string) ([]output, error) {
	vr := j.recipe.Video
	var outs []output
	var ladder *transcoder.LadderResult
	switch {
	case vr.MP4 != nil || vr.HLS != nil:
		rm, ok := h.videos.(RenditionMaker)
		if !ok && vr.MP4 != nil {
			return nil, errors.New("this video transformer makes no mp4 renditions")
		}
		if !ok {
			lm, ok := h.videos.(LadderMaker)
			if !ok {
				return nil, errors.New("this video transformer makes no HLS ladder")
			}
			res, err := lm.Ladder(ctx, j.probe, outDir, *vr.HLS)
			if err != nil {
				return nil, err
			}
			ladder = &res
			break
		}
		// The job's MP4 is made (transform) before: a rendition of its size is that file, linked.
		res, err := rm.Renditions(ctx, j.probe, outDir, transcoder.RenditionsSpec{MP4: vr.MP4, HLS: vr.HLS, ReuseMP4: true})
		if err != nil {
			return nil, err
		}
		if res.HLSCopyRefused != "" {
			trace.SpanFromContext(ctx).AddEvent("hls rung encoded, not copied: " + res.HLSCopyRefused)
		}
		for _, m := range res.MP4 {
			outs = append(outs, output{role: roleMP4, name: m.Name, path: m.Path, key: mp4RenditionKey(j.keys, m.Name),
				contentType: contracts.TypeMP4,
				variant:     contracts.Variant{Quality: m.Name, Format: contracts.FormatMP4, Width: m.Width, Height: m.Height}})
		}
		ladder = res.HLS
	}
	if res := ladder; res != nil {
		for _, f := range res.Files {
			key := j.keys.HLS(f)
			ctype, _ := contracts.OutputContentType(key)
			o := output{role: roleHLS, name: f, path: filepath.Join(res.Dir, f), key: key, contentType: ctype}
			if f == res.Master {
				o.variant = contracts.Variant{Quality: QualityHLS, Format: contracts.FormatM3U8}
				if len(res.Renditions) > 0 {
					o.variant.Width, o.variant.Height = res.Renditions[0].Width, res.Renditions[0].Height
				}
			}
			outs = append(outs, o)
		}
	}
	if spec := vr.Storyboard; spec != nil {
		sm, ok := h.videos.(StoryboardMaker)
		if !ok {
			return nil, errors.New("this video transformer makes no storyboard")
		}
		res, err := sm.Storyboard(ctx, j.probe, outDir, *spec)
		if err != nil {
			return nil, err
		}
		outs = append(outs,
			output{role: roleStoryboard, name: "storyboard.jpg", path: res.SpritePath, key: j.keys.Storyboard("storyboard.jpg"),
				contentType: contracts.TypeJPEG,
				variant:     contracts.Variant{Quality: QualityStoryboard, Format: contracts.FormatJPG, Width: res.SpriteWidth, Height: res.SpriteHeight}},
			output{role: roleStoryboard, name: "storyboard.vtt", path: res.VTTPath, key: j.keys.Storyboard("storyboard.vtt"),
				contentType: contracts.TypeVTT,
				variant:     contracts.Variant{Quality: QualityStoryboard, Format: formatVTT}})
	}
	return outs, nil
}
