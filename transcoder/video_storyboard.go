package transcoder

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The storyboard: the frames a player shows above its seek bar while someone scrubs. One JPEG sprite
// sheet holds a small frame every IntervalSeconds, row by row, and a WebVTT file maps each stretch of
// the video to its tile with a media fragment (storyboard.jpg#xywh=x,y,w,h), the form video.js's
// thumbnail plugins, Vidstack and Plyr read. The VTT names the sprite by a relative URL, so the two
// work side by side under any prefix (a signed one included) without rewriting.
//
// One ffmpeg run decodes the video once: the fps filter keeps one frame per interval, only those are
// scaled (and tone-mapped, for HDR) and the tile filter lays them out into a single picture. Seeking
// to each tile's time instead would decode from the key frame before it, on average half a GOP (x264's
// default is 10 s at 25 fps) per tile: more than the whole video at a 2 s interval, and a gain only
// once the interval is several GOPs long, with one decoder per seek (a run per tile costs about 100 ms
// of start-up each, an input per tile a decoder's memory each). What does help is decoding reference
// frames only (-skip_frame noref, as the poster does): in a stream with B-frames they are most of the
// frames, and a tile is then at most a B-frame run (hundredths of a second) earlier than its time.
//
// Cost: decoding the reference frames; scaling ten frames and one small JPEG are a few milliseconds.
// On a 20 s 1080p25 H.264 clip (testsrc2; 2-core VM, busy; ffmpeg 5.1): about 2.0 CPU-s with x264
// veryfast's B-frames (3.0 without -skip_frame noref), about 1.8 for an ultrafast one without
// B-frames (BenchmarkStoryboardCPU), so roughly 0.1 CPU-s per second of 1080p video, a sixth of what
// its encode costs, and the decoder's threads (1 or 2) change little. The sprite is about 20 KB.

// StoryboardSpec says how dense and how large a storyboard is. Zero fields take their defaults.
type StoryboardSpec struct {
	EverySeconds float64 // a frame every N seconds (default 2)
	TileWidth    int     // width of one tile in px (default 160); height follows the aspect ratio
	Columns      int     // tiles per row (default 10)
	// MaxTiles caps the tiles (default 200): a longer video gets its frames spaced wider, so that
	// at most MaxTiles cover it, and the VTT's cues (and a NOTE in it) say the wider interval.
	MaxTiles int
}

// StoryboardResult describes the files Storyboard wrote.
type StoryboardResult struct {
	SpritePath, VTTPath                                     string // outDir/storyboard.jpg, outDir/storyboard.vtt
	SpriteWidth, SpriteHeight, TileWidth, TileHeight, Tiles int
	// IntervalSeconds is the time between two tiles' frames, and each cue's length (the last one's
	// at most): EverySeconds, or wider when MaxTiles required it. Whole milliseconds, like the VTT's.
	IntervalSeconds float64
}

// Fixed names inside the job's output directory.
const (
	storyboardSprite = "storyboard.jpg"
	storyboardVTT    = "storyboard.vtt"
)

const (
	defaultStoryboardEvery    = 2.0
	defaultStoryboardTile     = 160
	defaultStoryboardColumns  = 10
	defaultStoryboardMaxTiles = 200
	// Bounds of the spec. maxSpriteSide keeps the sprite a picture every browser decodes (JPEG itself
	// stops at 65535) and its frame far under -max_alloc; it also caps the tiles' height, so that a
	// storyboard of an absurdly tall video cannot grow beyond it (see Storyboard).
	minStoryboardEvery   = 0.1
	maxStoryboardEvery   = 3600.0
	minStoryboardTile    = 16
	maxStoryboardTile    = 1280
	maxStoryboardColumns = 100
	maxStoryboardTiles   = 1000
	maxSpriteSide        = 16384
	// storyboardQuality is the sprite's mjpeg -q:v (2 best, 31 worst): tiles are seen small and
	// briefly, and the sprite is fetched whole before the first one shows.
	storyboardQuality = 5
)

func (s StoryboardSpec) withDefaults() StoryboardSpec {
	if s.EverySeconds == 0 {
		s.EverySeconds = defaultStoryboardEvery
	}
	if s.TileWidth == 0 {
		s.TileWidth = defaultStoryboardTile
	}
	if s.Columns == 0 {
		s.Columns = defaultStoryboardColumns
	}
	if s.MaxTiles == 0 {
		s.MaxTiles = defaultStoryboardMaxTiles
	}
	return s
}

// Validate reports the first field out of range, named as a config file spells it; 0 means the
// default and is valid.
func (s StoryboardSpec) Validate() error {
	d := s.withDefaults()
	switch {
	case math.IsNaN(d.EverySeconds) || d.EverySeconds < minStoryboardEvery || d.EverySeconds > maxStoryboardEvery:
		return fmt.Errorf("every_seconds must be %g to %g (0: %g), got %g",
			minStoryboardEvery, maxStoryboardEvery, defaultStoryboardEvery, s.EverySeconds)
	case d.TileWidth < minStoryboardTile || d.TileWidth > maxStoryboardTile:
		return fmt.Errorf("tile_width must be %d to %d px (0: %d), got %d",
			minStoryboardTile, maxStoryboardTile, defaultStoryboardTile, s.TileWidth)
	case d.Columns < 1 || d.Columns > maxStoryboardColumns:
		return fmt.Errorf("columns must be 1 to %d (0: %d), got %d", maxStoryboardColumns, defaultStoryboardColumns, s.Columns)
	case d.Columns*d.TileWidth > maxSpriteSide:
		return fmt.Errorf("columns × tile_width must be at most %d px (the sprite's width), got %d × %d",
			maxSpriteSide, d.Columns, d.TileWidth)
	case d.MaxTiles < 1 || d.MaxTiles > maxStoryboardTiles:
		return fmt.Errorf("max_tiles must be 1 to %d (0: %d), got %d", maxStoryboardTiles, defaultStoryboardMaxTiles, s.MaxTiles)
	}
	return nil
}

// storyboardLayout is where a storyboard's tiles are, in whole milliseconds so that the fps filter,
// the VTT's cues and the result agree exactly.
type storyboardLayout struct {
	durationMs, intervalMs int64
	tiles, cols, rows      int
}

// layoutStoryboard spaces the tiles of a video lasting durationMs (> 0): every EverySeconds (at
// least 1 ms), or wider when that would make more than MaxTiles; the last tile's stretch ends at the
// duration and may be shorter. A video with fewer tiles than Columns gets a sprite one row wide, not
// one padded with empty tiles.
func layoutStoryboard(s StoryboardSpec, durationMs int64) storyboardLayout {
	l := storyboardLayout{durationMs: durationMs, intervalMs: max(int64(math.Round(s.EverySeconds*1000)), 1)}
	if n := ceilDiv(durationMs, l.intervalMs); n > int64(s.MaxTiles) {
		l.intervalMs = ceilDiv(durationMs, int64(s.MaxTiles))
	}
	l.tiles = int(ceilDiv(durationMs, l.intervalMs))
	l.cols = min(s.Columns, l.tiles)
	l.rows = (l.tiles + l.cols - 1) / l.cols
	return l
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// cue is tile i's stretch of the video, in ms.
func (l storyboardLayout) cue(i int) (start, end int64) {
	return int64(i) * l.intervalMs, min(int64(i+1)*l.intervalMs, l.durationMs)
}

// vtt writes the WebVTT that maps each tile's stretch to its region of the sprite.
func (l storyboardLayout) vtt(tileW, tileH int) string {
	var b strings.Builder
	b.WriteString("WEBVTT\n\n")
	fmt.Fprintf(&b, "NOTE a frame every %s s, %d tiles of %d×%d in %d columns\n\n",
		strconv.FormatFloat(float64(l.intervalMs)/1000, 'f', -1, 64), l.tiles, tileW, tileH, l.cols)
	for i := range l.tiles {
		start, end := l.cue(i)
		fmt.Fprintf(&b, "%s --> %s\n%s#xywh=%d,%d,%d,%d\n\n", vttTime(start), vttTime(end), storyboardSprite,
			(i%l.cols)*tileW, (i/l.cols)*tileH, tileW, tileH)
	}
	return b.String()
}

// vttTime formats ms as WebVTT's HH:MM:SS.mmm (hours always, which every parser takes).
func vttTime(ms int64) string {
	return fmt.Sprintf("%02d:%02d:%02d.%03d", ms/3600000, ms/60000%60, ms/1000%60, ms%1000)
}

// Storyboard writes outDir/storyboard.jpg and outDir/storyboard.vtt for the probed video.
//
// It decodes the whole video once, so it is cheapest on the encoded MP4 (probe that file): at most
// MaxHeight, H.264, already upright, deinterlaced and tone-mapped. On an upload it works as well: an
// HDR source is tone-mapped like the encode does, so the tiles are not washed out (an interlaced one is
// not deinterlaced: at tile size the fields' combing blurs away). The video must say how long it is:
// the cues end at its duration.
func (v *Videos) Storyboard(ctx context.Context, probe *VideoProbe, outDir string, spec StoryboardSpec) (StoryboardResult, error) {
	if err := ctx.Err(); err != nil {
		return StoryboardResult{}, fmt.Errorf("making storyboard: %w", err)
	}
	if err := spec.Validate(); err != nil {
		return StoryboardResult{}, internal("making storyboard", err)
	}
	spec = spec.withDefaults()
	if probe == nil {
		return StoryboardResult{}, internal("making storyboard", errors.New("no probe of the video"))
	}
	src, probe, outDir, err := v.probes.reprobed(ctx, probe, outDir)
	if err != nil {
		return StoryboardResult{}, err
	}
	p := probe.p
	durationMs := int64(math.Round(min(p.info.Duration, v.cfg.MaxDuration.Seconds()) * 1000))
	if durationMs <= 0 {
		return StoryboardResult{}, badInput("making storyboard: the video does not say how long it is", nil)
	}
	l := layoutStoryboard(spec, durationMs)

	res := StoryboardResult{
		SpritePath: filepath.Join(outDir, storyboardSprite), VTTPath: filepath.Join(outDir, storyboardVTT),
		Tiles: l.tiles, IntervalSeconds: float64(l.intervalMs) / 1000,
	}
	removeStoryboard := func() { os.Remove(res.SpritePath); os.Remove(res.VTTPath) }
	removeStoryboard()

	// The tile's height follows the displayed aspect ratio (the sample aspect ratio applied, so an
	// anamorphic source's tiles are not squeezed: players show the sprite's pixels square), even,
	// at least 2, and at most what keeps the sprite within maxSpriteSide (and 4 tile widths): only a
	// video far taller than any camera records is squeezed by that.
	maxTileH := min(4*spec.TileWidth, maxSpriteSide/l.rows) &^ 1
	scale := fmt.Sprintf("scale=w=%d:h='max(2,min(%d,2*round(%d*ih/(iw*sar)/2)))',setsar=1",
		spec.TileWidth, maxTileH, spec.TileWidth)
	// fps's round=up gives slot k the last frame at or before k × interval: the frame a player shows
	// at the cue's start (round=near, the default, takes one up to half an interval later). Only the
	// frames it keeps are scaled and tone-mapped, after scaling (on fewer pixels, as the encode does).
	graph := fmt.Sprintf("[0:%d]fps=fps=1000/%d:round=up,", p.videoStream, l.intervalMs) + scale +
		colourFilters(p) + fmt.Sprintf(",tile=%dx%d[sb]", l.cols, l.rows)
	args := []string{"-nostdin", "-hide_banner", "-nostats", "-loglevel", "error",
		"-max_alloc", strconv.Itoa(maxAllocBytes),
		"-threads", strconv.Itoa(v.cfg.Threads),
		"-protocol_whitelist", "file", "-format_whitelist", inputFormats,
		"-skip_frame", "noref",
		"-t", strconv.FormatFloat(v.cfg.MaxDuration.Seconds(), 'f', -1, 64),
		"-i", "file:" + src,
		"-filter_threads", "1", "-filter_complex", graph,
		// One picture; one encoder thread (mjpeg's frame threads would each allocate a context for
		// it). Named relative to the run's directory, the job's, like the poster's candidates.
		"-map", "[sb]", "-frames:v", "1", "-c:v", "mjpeg", "-threads", "1", "-q:v", strconv.Itoa(storyboardQuality),
		"-f", "image2", "-update", "1", "-y", "file:" + storyboardSprite,
	}
	// Decoding the video is the encode's work without the encoding: its budget is ample, and a video
	// that runs out of it would not have been encoded either.
	cpu, rule := v.tools.cpuBudget(p.info.Duration)
	if err := v.tools.run(ctx, outDir, v.tools.ffmpeg, args, nil, cpu); err != nil {
		removeStoryboard()
		var te *toolError
		if errors.As(err, &te) {
			te.cpuRule = rule
		}
		return StoryboardResult{}, v.tools.classifyFFmpeg(ctx, "making storyboard", err)
	}

	if res.SpriteWidth, res.SpriteHeight, err = jpegSize(res.SpritePath); err != nil {
		removeStoryboard()
		if errors.Is(err, os.ErrNotExist) {
			// ffmpeg decoded no frame at all from a video that passed the probe.
			return StoryboardResult{}, badInput("making storyboard: "+undecodableVideo, errors.New("ffmpeg wrote no frame"))
		}
		return StoryboardResult{}, internal("reading the storyboard's sprite", err)
	}
	res.TileWidth, res.TileHeight = spec.TileWidth, res.SpriteHeight/l.rows
	if res.SpriteWidth != l.cols*spec.TileWidth || res.SpriteHeight != l.rows*res.TileHeight || res.TileHeight < 2 {
		removeStoryboard()
		return StoryboardResult{}, internal("reading the storyboard's sprite", fmt.Errorf(
			"sprite is %d×%d, want %d×%d tiles %d px wide", res.SpriteWidth, res.SpriteHeight, l.cols, l.rows, spec.TileWidth))
	}
	if err := os.WriteFile(res.VTTPath, []byte(l.vtt(res.TileWidth, res.TileHeight)), 0o644); err != nil {
		removeStoryboard()
		return StoryboardResult{}, internal("writing the storyboard's vtt", err)
	}
	return res, nil
}
