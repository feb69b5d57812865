package main

import (
	"fmt"
	"slices"

	"go.yaml.in/yaml/v3"

	"github.com/mediaworker/mediaworker/pipeline"
	"github.com/mediaworker/mediaworker/transcoder"
)

// A recipe's video side: the video kind's part of the recipes section (configrecipes.go reads the
// rest). A kind whose outputs a recipe can shape declares its keys in a file of its own like this one.

// decodeVideo reads a recipe's video side: "default" (the MP4 and poster alone), or a mapping that
// adds MP4 renditions, an HLS ladder and a storyboard:
//
//	video:
//	  mp4: [1080, 720]
//	  hls: {segment_seconds: 4, rungs: [{height: 1080, max_kbps: 6000}, {height: 720, max_kbps: 3000}]}
//	  storyboard: {every_seconds: 2, tile_width: 160, columns: 10}
func (f *configFile) decodeVideo(dotted string, n *yaml.Node) (pipeline.VideoRecipe, []error) {
	var v pipeline.VideoRecipe
	if n.Kind == yaml.ScalarNode && n.Tag == "!!str" && n.Value == pipeline.DefaultVideo {
		return v, nil
	}
	if n.Kind != yaml.MappingNode {
		return v, []error{f.errAt(n, dotted, "must be %q or a mapping with mp4, hls and/or storyboard, got %s", pipeline.DefaultVideo, kindName(n))}
	}
	var errs []error
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, vn := n.Content[i], n.Content[i+1]
		key := dotted + "." + kn.Value
		switch kn.Value {
		case "mp4":
			hs, merrs := f.decodeMP4(key, vn)
			errs = append(errs, merrs...)
			v.MP4 = hs
		case "hls":
			spec := transcoder.LadderSpec{}
			errs = append(errs, f.fields(key, vn, map[string]func(*yaml.Node, string) error{
				"segment_seconds": f.number(&spec.SegmentSeconds),
				"rungs": func(rn *yaml.Node, rkey string) error {
					if rn.Kind != yaml.SequenceNode || len(rn.Content) == 0 {
						return f.errAt(rn, rkey, "must be a list of {height, max_kbps}, got %s", kindName(rn))
					}
					var rerrs []error
					for j, item := range rn.Content {
						var r transcoder.LadderRung
						rerrs = append(rerrs, f.fields(fmt.Sprintf("%s[%d]", rkey, j), item, map[string]func(*yaml.Node, string) error{
							"height": f.whole(&r.Height), "max_kbps": f.whole(&r.MaxKbps),
						})...)
						if r.MaxKbps == 0 { // left out: a default by height, shown by `config` as in effect
							r.MaxKbps = transcoder.DefaultRungKbps(r.Height)
						}
						spec.Rungs = append(spec.Rungs, r)
					}
					return joinErrs(rerrs)
				},
			})...)
			if err := spec.Validate(); err != nil && len(errs) == 0 {
				errs = append(errs, f.errAt(vn, key, "%v", err))
			}
			v.HLS = &spec
		case "storyboard":
			spec := transcoder.StoryboardSpec{}
			errs = append(errs, f.fields(key, vn, map[string]func(*yaml.Node, string) error{
				"every_seconds": f.number(&spec.EverySeconds), "tile_width": f.whole(&spec.TileWidth),
				"columns": f.whole(&spec.Columns), "max_tiles": f.whole(&spec.MaxTiles),
			})...)
			if err := spec.Validate(); err != nil && len(errs) == 0 {
				errs = append(errs, f.errAt(vn, key, "%v", err))
			}
			v.Storyboard = &spec
		default:
			errs = append(errs, f.errAt(kn, key, "%s", unknownKey("key", kn.Value, []string{"mp4", "hls", "storyboard"})))
		}
	}
	return v, errs
}

// decodeMP4 reads a recipe's mp4 renditions: a list of max heights, each checked at its own position.
func (f *configFile) decodeMP4(dotted string, n *yaml.Node) ([]int, []error) {
	if n.Kind != yaml.SequenceNode || len(n.Content) == 0 {
		return nil, []error{f.errAt(n, dotted, "must be a list of heights such as [1080, 720], got %s", kindName(n))}
	}
	if len(n.Content) > transcoder.MaxMP4Renditions {
		return nil, []error{f.errAt(n, dotted, "at most %d renditions, got %d", transcoder.MaxMP4Renditions, len(n.Content))}
	}
	var errs []error
	hs := make([]int, 0, len(n.Content))
	for i, item := range n.Content {
		key := fmt.Sprintf("%s[%d]", dotted, i)
		var h int
		if err := f.whole(&h)(item, key); err != nil {
			errs = append(errs, err)
			continue
		}
		switch j := slices.Index(hs, h); {
		case h < 2 || h > maxMP4Height || h%2 != 0:
			errs = append(errs, f.errAt(item, key, "must be an even height from 2 to %d (the short edge: 1080 for 1080p), got %d", maxMP4Height, h))
		case j >= 0:
			errs = append(errs, f.errAt(item, key, "%d appears twice (also %s[%d])", h, dotted, j))
		}
		hs = append(hs, h)
	}
	if len(errs) == 0 {
		if err := transcoder.ValidateMP4Heights(hs); err != nil {
			errs = append(errs, f.errAt(n, dotted, "%v", err))
		}
	}
	return hs, errs
}

// maxMP4Height is the tallest mp4 rendition (8K's short edge), as transcoder.ValidateMP4Heights says.
const maxMP4Height = 4320

// videoDocs describes a recipe's video keys, for docs/operations.md.
var videoDocs = map[string]string{
	"mp4":                 "`[1080, 720]`: MP4 renditions (H.264/AAC, fast start), each at most that tall on its short edge and never enlarged (asked heights the video is shorter than collapse into one at its own height); answered as `{quality: 1080p, format: mp4}` (the height made); made in the HLS ladder's run when both are asked; the tallest is a copy of the upload's streams when they already are H.264/AAC at that size",
	"hls":                 "an adaptive HLS ladder made in one ffmpeg run that decodes the video once: CMAF (fMP4) segments, one master playlist, the audio once; its master playlist is answered as `{quality: hls, format: m3u8}`",
	"hls.rungs":           "`[{height, max_kbps}, …]`: each rendition's short edge (never above the source's: taller rungs are dropped) and its video bitrate cap (left out: 3000 for 720, 6000 for 1080, … by height)",
	"hls.segment_seconds": "target segment length, 2–10 (default 4)",
	"storyboard":          "`{every_seconds (2), tile_width (160), columns (10), max_tiles (200)}`: a sprite sheet of frames and a WebVTT file of `#xywh=` cues for a player's scrub bar, answered as `{quality: storyboard, format: jpg}` and `{quality: storyboard, format: vtt}`",
}
