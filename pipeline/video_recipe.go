package pipeline

import (
	"context"
	"errors"
	"path/filepath"

	"github.com/mediaworker/mediaworker/contracts"
)

// Qualities of the outputs a recipe's video side adds (answers to requests that name a recipe only).
const (
	QualityHLS        = "hls"
	QualityStoryboard = "storyboard"
	formatVTT         = "vtt"
)

// videoRecipeOutputs makes what the job's recipe asks of a video beyond the MP4 and poster: an HLS
// ladder (its master playlist listed in the answer, every file uploaded, playlists last) and a
// storyboard (the sprite, then its VTT).
func (p *Pipeline) videoRecipeOutputs(ctx context.Context, j *job, outDir string) ([]output, error) {
	vr := j.recipe.Video
	var outs []output
	if spec := vr.HLS; spec != nil {
		lm, ok := p.videos.(LadderMaker)
		if !ok {
			return nil, errors.New("this video transformer makes no HLS ladder")
		}
		res, err := lm.Ladder(ctx, j.probe, outDir, *spec)
		if err != nil {
			return nil, err
		}
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
		sm, ok := p.videos.(StoryboardMaker)
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
