package transcoder

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// A recipe's video renditions: MP4 files at several heights (each H.264/AAC, fast start, like the
// default's MP4) and the HLS ladder (video_ladder.go), all made in one ffmpeg run that decodes the
// input once. The filter graph scales (and deinterlaces, tone-maps) the source once to the tallest
// rendition encoded, splits, and scales each lower one from it; the MP4s are further outputs of the
// same run beside the HLS muxer, so a recipe asking for mp4 [1080, 720] and an HLS ladder pays one
// decode.
//
// A rendition the input already is (the remux fast path's check, remuxable, and the input's own
// frame size) is not encoded: its video (and audio) are copied from the input in the same run. For
// the MP4s that is the tallest rendition when the input fits it; for the ladder it is a rung as tall
// as the input (a rung taller than the input is dropped, so that rung is the input's own height)
// whose bitrate cap the input's bitrate is within, and only when the input's keyframes cut segments
// of about the target length (see hlsCopyCuts).

// MaxMP4Renditions bounds a recipe's mp4 list: each is an encode in the same run.
const MaxMP4Renditions = 4

// ValidateMP4Heights checks a recipe's mp4 list: 1 to MaxMP4Renditions heights, each even and
// 2-4320 (as ladder rungs), none twice. Messages name fields as a config file does.
func ValidateMP4Heights(hs []int) error {
	if len(hs) == 0 {
		return errors.New("mp4: at least one height is needed")
	}
	if len(hs) > MaxMP4Renditions {
		return fmt.Errorf("mp4: at most %d renditions, got %d", MaxMP4Renditions, len(hs))
	}
	for i, h := range hs {
		if h < 2 || h > maxRungHeight || h%2 != 0 {
			return fmt.Errorf("mp4[%d] must be an even height 2-%d, got %d", i, maxRungHeight, h)
		}
		if j := slices.Index(hs[:i], h); j >= 0 {
			return fmt.Errorf("mp4[%d] %d repeats mp4[%d]", i, h, j)
		}
	}
	return nil
}

// RenditionsSpec is what one run makes: MP4 renditions (max heights of the short edge, as
// VideoConfig.MaxHeight counts it) and/or an HLS ladder.
type RenditionsSpec struct {
	MP4 []int
	HLS *LadderSpec
	// ReuseMP4 lets the job's MP4 (outDir/video.mp4, which TransformProbed wrote with the same
	// encoder settings) stand for an MP4 rendition of its frame size: linked, not encoded again.
	ReuseMP4 bool
}

// MP4Rendition is one MP4 written.
type MP4Rendition struct {
	Name          string // "720p": the short edge written, also in the file's name
	Path          string // outDir/video_720p.mp4
	Width, Height int    // frame size as written
	Info          VideoInfo
	Remuxed       bool // copied from the input, not encoded
	Reused        bool // the job's MP4 (RenditionsSpec.ReuseMP4), linked
}

// RenditionsResult is what Renditions wrote.
type RenditionsResult struct {
	MP4 []MP4Rendition // tallest first; an asked height the input is shorter than collapses into its own
	HLS *LadderResult  // nil without a ladder
	// HLSCopied names the ladder rendition copied from the input ("" when every rung was encoded);
	// HLSCopyRefused says why a rung as tall as the input was encoded all the same.
	HLSCopied, HLSCopyRefused string
}

// mp4Plan is one MP4 rendition planned.
type mp4Plan struct {
	name          string
	width, height int
	copy          bool
	reuse         string // the job's MP4 to link, "" to make it in the run
	path          string
}

// renditionPlan is everything one run writes.
type renditionPlan struct {
	hls     []ladderRendition
	hlsCopy int       // index in hls of the rendition copied from the input, -1 for none
	hlsKeys []float64 // with hlsCopy: the times (output timeline) the copy's segments are cut at
	seg     float64
	mp4     []mp4Plan
	dir     string // the HLS directory, the run's working directory
}

// mp4Name is the file of an MP4 rendition: video_<name>.mp4, beside video.mp4 without colliding.
func mp4RenditionName(name string) string { return "video_" + name + ".mp4" }

// planMP4 picks the MP4 renditions for a w×h source (as displayed): each height's short edge is the
// asked one or the source's (made even, at least 2), whichever is smaller, so nothing is enlarged;
// heights that collapse to the same size are made once. Tallest first.
func planMP4(w, h int, heights []int) ([]mp4Plan, error) {
	short, long := min(w, h), max(w, h)
	hs := slices.Clone(heights)
	slices.SortFunc(hs, func(a, b int) int { return b - a })
	var out []mp4Plan
	for _, want := range hs {
		s := min(want, max(2, short/2*2))
		if slices.ContainsFunc(out, func(m mp4Plan) bool { return min(m.width, m.height) == s }) {
			continue
		}
		num, den := int64(s)*int64(long), int64(short)*2
		l := int((num+den/2)/den) * 2
		if l > maxH264Side {
			continue
		}
		rw, rh := l, s
		if w < h {
			rw, rh = s, l
		}
		out = append(out, mp4Plan{name: strconv.Itoa(s) + "p", width: rw, height: rh})
	}
	if len(out) == 0 {
		return nil, badInput(fmt.Sprintf("video is %d×%d, too long for any mp4 rendition (limit %d pixels on a side)",
			w, h, maxH264Side), nil)
	}
	return out, nil
}

// encodedSizes are the frame sizes the run encodes (copies excluded), in the order of the graph's
// outputs [v0], [v1], ...: the ladder's encoded rungs, then the MP4s'.
func (pl renditionPlan) encodedSizes() [][2]int {
	var out [][2]int
	for i, r := range pl.hls {
		if i != pl.hlsCopy {
			out = append(out, [2]int{r.width, r.height})
		}
	}
	for _, m := range pl.mp4 {
		if !m.copy && m.reuse == "" {
			out = append(out, [2]int{m.width, m.height})
		}
	}
	return out
}

// runs reports whether the plan needs an ffmpeg run: not when every rendition is a link.
func (pl renditionPlan) runs() bool {
	return len(pl.hls) > 0 || slices.ContainsFunc(pl.mp4, func(m mp4Plan) bool { return m.reuse == "" })
}

// renditionGraph is the filter graph for frames of the given sizes, tallest first: deinterlacing,
// scaling to the first size and tone mapping once, then a split whose first branch is [v0] and whose
// others are scaled down from it ([v1], ...).
func renditionGraph(p probed, sizes [][2]int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "[0:%d]", p.videoStream)
	if p.interlaced {
		b.WriteString("bwdif=mode=send_frame:deint=interlaced,")
	}
	// Explicit sizes (the plan's) rather than -2, so what the result says is what is written even
	// if ffmpeg's rounding were to differ; a source whose frame size changes midway is scaled to them
	// all the same.
	fmt.Fprintf(&b, "scale=w=%d:h=%d", sizes[0][0], sizes[0][1])
	b.WriteString(colourFilters(p))
	if len(sizes) == 1 {
		b.WriteString("[v0]")
		return b.String()
	}
	fmt.Fprintf(&b, ",split=%d[v0]", len(sizes))
	for i := 1; i < len(sizes); i++ {
		fmt.Fprintf(&b, "[s%d]", i)
	}
	for i := 1; i < len(sizes); i++ {
		fmt.Fprintf(&b, ";[s%d]scale=w=%d:h=%d[v%d]", i, sizes[i][0], sizes[i][1], i)
	}
	return b.String()
}

// sortedBySize orders sizes tallest (most pixels) first and returns where each one went, so that
// the graph scales down from the largest.
func sortedBySize(sizes [][2]int) (sorted [][2]int, at []int) {
	idx := make([]int, len(sizes))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		return sizes[b][0]*sizes[b][1] - sizes[a][0]*sizes[a][1]
	})
	at = make([]int, len(sizes))
	for pos, i := range idx {
		sorted = append(sorted, sizes[i])
		at[i] = pos
	}
	return sorted, at
}

// x264Args are the video encoder's settings for output stream spec ("v:0"), or for every video stream
// of an output when spec is "v".
func x264Args(c *VideoConfig, spec string) []string {
	return []string{
		"-c:" + spec, "libx264", "-preset:" + spec, c.Preset, "-crf:" + spec, strconv.Itoa(c.CRF),
		"-pix_fmt:" + spec, "yuv420p", "-profile:" + spec, "high",
	}
}

// audioArgs encode the audio as the MP4 encode does.
func audioArgs(c *VideoConfig, p probed) []string {
	if p.audioStream < 0 {
		return nil
	}
	args := []string{"-c:a", "aac", "-b:a", c.AudioBitrate}
	if p.channels > 2 {
		args = append(args, "-ac", "2") // browsers and phones play stereo everywhere
	}
	return args
}

// renditionArgs is the ffmpeg command line (after the program) of the run: the HLS output (written
// into the working directory, pl.dir, with relative names) and the MP4s.
func renditionArgs(c *VideoConfig, src string, p probed, pl renditionPlan) []string {
	threads := strconv.Itoa(c.Threads)
	args := inputArgs(c, src)
	sizes, at := sortedBySize(pl.encodedSizes())
	if len(sizes) > 0 {
		args = append(args, "-filter_threads", threads, "-filter_complex", renditionGraph(p, sizes))
	}
	next := 0 // the next encoded output, in encodedSizes' order
	label := func() string {
		l := fmt.Sprintf("[v%d]", at[next])
		next++
		return l
	}
	inVideo, inAudio := fmt.Sprintf("0:%d", p.videoStream), fmt.Sprintf("0:%d", p.audioStream)

	if len(pl.hls) > 0 {
		segs := strconv.FormatFloat(pl.seg, 'f', -1, 64)
		keys := "expr:gte(t,n_forced*" + segs + ")" // a keyframe at every segment boundary, the same in every rendition
		if pl.hlsCopy >= 0 {
			// The copied rendition is cut at the input's keyframes: the others are keyed at the
			// same times, so every rendition's segments start together and a player can switch at
			// any of them (a millisecond early, so the frame at that time is the one forced).
			ts := make([]string, len(pl.hlsKeys))
			for i, t := range pl.hlsKeys {
				ts[i] = strconv.FormatFloat(max(0, t-0.001), 'f', 3, 64)
			}
			keys = strings.Join(ts, ",")
			if keys == "" {
				keys = "0"
			}
		}
		for i, r := range pl.hls {
			spec := fmt.Sprintf("v:%d", i)
			if i == pl.hlsCopy {
				args = append(args, "-map", inVideo, "-c:"+spec, "copy")
				continue
			}
			args = append(args, "-map", label())
			args = append(args, x264Args(c, spec)...)
			args = append(args,
				"-force_key_frames:"+spec, keys,
				"-maxrate:"+spec, fmt.Sprintf("%dk", r.maxKbps),
				"-bufsize:"+spec, fmt.Sprintf("%dk", r.maxKbps*ladderBufferFactor))
			if pl.hlsCopy >= 0 {
				// No keyframes of x264's own choosing at scene cuts: one between a segment's start
				// and the copy's next keyframe would cut this rendition's segment there, not at the
				// copy's boundary.
				args = append(args, "-sc_threshold:"+spec, "0")
			}
		}
		if p.audioStream >= 0 {
			args = append(args, "-map", inAudio)
		}
		args = append(args, "-threads", threads)
		args = append(args, colourTags(p)...)
		// The variants: the audio once, in a group every video rendition refers to. default:yes on it
		// keeps ffmpeg from also listing the audio as a variant of its own (an audio-only stream a
		// player could pick over the video when bandwidth is low).
		var vsm []string
		agroup := ""
		if p.audioStream >= 0 {
			args = append(args, audioArgs(c, p)...)
			agroup = ",agroup:" + ladderAudioGroup
			vsm = append(vsm, "a:0"+agroup+",default:yes,name:"+ladderAudioName)
		}
		for i, r := range pl.hls {
			vsm = append(vsm, fmt.Sprintf("v:%d%s,name:%s", i, agroup, r.name))
		}
		args = append(args,
			// Metadata (GPS position, device, names) stays behind, as it does for the MP4.
			"-map_metadata", "-1", "-map_chapters", "-1",
			// Every rendition's and the audio's first sample at 0 in the segments' own timeline
			// (tfdt + composition offset), which is what MSE players such as hls.js go by, and no
			// edit list. x264's B-frames start the video's decode timeline a frame or two before 0,
			// and the default (make_non_negative) shifted the video to start at 0.08 s and the audio
			// at 0.06 s behind empty edits, which hls.js, ignoring them, played as a 0.18 s hole at
			// the start of the first segment it loaded. Kept negative, the decode times are written
			// as negative composition offsets (trun version 1), the video's first frame shown at 0.
			// Without an edit list the audio's AAC priming (1024 samples, 21 ms) plays as silence at
			// its start instead of being cut by one: cut, it left the audio playlist's durations
			// 21 ms longer than what hls.js buffered, and a last segment holding that much alone
			// (an 8 s clip in 2 s segments) never counted as buffered, so hls.js never ended the
			// stream and Chromium stopped 0.2 s before the end.
			"-avoid_negative_ts", "disabled",
			"-hls_segment_options", "movflags=+negative_cts_offsets:use_editlist=0",
			"-f", "hls",
			"-hls_time", segs,
			"-hls_playlist_type", "vod",
			"-hls_segment_type", "fmp4",
			"-hls_flags", "independent_segments",
			"-hls_fmp4_init_filename", ladderInit,
			"-hls_segment_filename", ladderSegment,
			"-master_pl_name", ladderMaster,
			"-var_stream_map", strings.Join(vsm, " "),
			"-y", ladderPlaylist,
		)
	}

	for _, m := range pl.mp4 {
		if m.reuse != "" {
			continue
		}
		if m.copy {
			// The remux fast path's output: the input's streams, copied.
			args = append(args, "-map", inVideo)
			if p.audioStream >= 0 {
				args = append(args, "-map", inAudio)
			}
			args = append(args, "-c", "copy")
		} else {
			args = append(args, "-map", label())
			if p.audioStream >= 0 {
				args = append(args, "-map", inAudio)
			}
			args = append(args, x264Args(c, "v")...)
			args = append(args, "-threads", threads)
			args = append(args, colourTags(p)...)
			args = append(args, audioArgs(c, p)...)
		}
		args = append(args,
			"-map_metadata", "-1", "-map_chapters", "-1",
			"-movflags", "+faststart",
			"-fs", strconv.FormatInt(c.MaxOutputBytes, 10),
			"-f", "mp4", "-y", "file:"+m.path,
		)
	}
	// Machine-readable progress on stdout, for the job's progress events.
	return append(args, "-progress", "pipe:1", "-nostats")
}

// renditionsCPUScale is how many MP4 encodes' worth of CPU the run's encoded renditions count for
// (copies count for nothing): their pixels over the MP4's (the source scaled to MaxHeight), at least 1. The encoders' work follows the pixels
// they encode, a little more per pixel for small frames: on a 12 s 1080p H.264 clip (2-core VM,
// ffmpeg 5.1, veryfast) the ladder 1080/720/480 took 1.65 to 1.9 times the MP4 encode's CPU time
// (8.7 to 9.3 CPU-s against 4.6 to 5.6) where its pixels count for 1.64. The decode, what makes the
// hardest inputs costly (grainy 740 Mbit/s 1080p60: 7.3 CPU-s per second, nearly all of it
// decoding), and the deinterlacing and tone mapping are done once for all renditions, so for the
// inputs the budget is there to stop the scale overstates the cost. Either way the budget stays far
// above what a real video needs (CPUPerInputSecond's default is about 50 times a plain clip's
// rate): it is a ceiling for hostile inputs, not an estimate.
func renditionsCPUScale(c *VideoConfig, w, h int, pl renditionPlan) float64 {
	mw, mh := encodedSize(c, w, h)
	var px float64
	for _, s := range pl.encodedSizes() {
		px += float64(s[0]) * float64(s[1])
	}
	return max(1, px/(float64(mw)*float64(mh)))
}

// Renditions writes spec's MP4 renditions (outDir/video_<name>.mp4) and HLS ladder (outDir/hls) for a
// probed video in one ffmpeg run under the encode's limits, reporting progress across the whole run.
// Its CPU budget is the encode's scaled by the encoded renditions' pixels, within MaxCPUTime. No
// rendition is taller than the source. Should the run that copies a rendition fail while the job
// goes on, it is run again with every rendition encoded (as the remux fast path falls back).
//
// Should the file have changed since it was probed (size or modification time), it is probed again.
func (v *Videos) Renditions(ctx context.Context, pr *VideoProbe, outDir string, spec RenditionsSpec) (RenditionsResult, error) {
	const what = "making video renditions"
	if spec.MP4 != nil {
		if err := ValidateMP4Heights(spec.MP4); err != nil {
			return RenditionsResult{}, internal(what, fmt.Errorf("validating renditions: %w", err))
		}
	}
	if spec.HLS != nil {
		if err := spec.HLS.Validate(); err != nil {
			return RenditionsResult{}, internal(what, fmt.Errorf("validating ladder: %w", err))
		}
	}
	if spec.MP4 == nil && spec.HLS == nil {
		return RenditionsResult{}, nil
	}
	if err := ctx.Err(); err != nil {
		return RenditionsResult{}, fmt.Errorf("%s: %w", what, err)
	}
	src, pr, outDir, err := v.probes.reprobed(ctx, pr, outDir)
	if err != nil {
		return RenditionsResult{}, err
	}
	p := pr.p
	w, h := p.info.Width, p.info.Height
	pl := renditionPlan{hlsCopy: -1, dir: outDir}
	var res RenditionsResult
	copyable := remuxable(&v.cfg, p)
	if spec.MP4 != nil {
		if pl.mp4, err = planMP4(w, h, spec.MP4); err != nil {
			return RenditionsResult{}, err
		}
		for i := range pl.mp4 {
			pl.mp4[i].path = filepath.Join(outDir, mp4RenditionName(pl.mp4[i].name))
		}
		// The tallest is the input's own size when the input fits it: the remux fast path's.
		pl.mp4[0].copy = copyable && pl.mp4[0].width == w && pl.mp4[0].height == h
		if spec.ReuseMP4 {
			// The job's MP4 is what a rendition of its size would be (same encoder, same settings,
			// or the same copy): linked rather than encoded twice.
			job := filepath.Join(outDir, mp4Name)
			if info, err := readMP4Info(job); err == nil {
				for i := range pl.mp4 {
					if m := &pl.mp4[i]; m.width == info.Width && m.height == info.Height {
						m.reuse, m.copy = job, false
						break
					}
				}
			}
		}
	}
	if spec.HLS != nil {
		if pl.hls, err = planLadder(w, h, spec.HLS.Rungs); err != nil {
			return RenditionsResult{}, err
		}
		pl.seg = spec.HLS.segmentSeconds()
		pl.dir = filepath.Join(outDir, hlsDirName)
		if err := os.MkdirAll(pl.dir, 0o755); err != nil {
			return RenditionsResult{}, internal("making hls directory", err)
		}
		if top := pl.hls[0]; copyable && top.width == w && top.height == h {
			// The input's bitrate, all streams counted (so at least its video's), within the
			// rung's cap; then its keyframes must cut segments of about the target length.
			kbps := 0.0
			if d := p.info.Duration; d > 0 {
				kbps = float64(pr.size) * 8 / 1000 / d
			}
			switch {
			case kbps <= 0 || kbps > float64(top.maxKbps):
				res.HLSCopyRefused = fmt.Sprintf("the input's %.0f kbit/s is above the %s rung's %d kbit/s cap", kbps, top.name, top.maxKbps)
			default:
				cuts, why, err := v.probes.hlsCopyCuts(ctx, src, p, pl.seg)
				if err != nil {
					return RenditionsResult{}, err
				}
				if why != "" {
					res.HLSCopyRefused = why
				} else {
					pl.hlsCopy, pl.hlsKeys = 0, cuts
				}
			}
		}
	}

	for _, m := range pl.mp4 {
		if m.reuse == "" {
			continue
		}
		os.Remove(m.path)
		if err := os.Link(m.reuse, m.path); err != nil {
			return RenditionsResult{}, internal("linking the job's mp4", err)
		}
	}
	if !pl.runs() {
		err = nil
	} else {
		err = v.runRenditions(ctx, src, p, pl)
	}
	var te *toolError
	if err != nil && ctx.Err() == nil && (pl.hlsCopy >= 0 || (len(pl.mp4) > 0 && pl.mp4[0].copy)) &&
		!(errors.As(err, &te) && te.hitCPULimit()) {
		// Should the input surprise ffmpeg's copy, encode it after all.
		pl.hlsCopy, pl.hlsKeys = -1, nil
		if len(pl.mp4) > 0 {
			pl.mp4[0].copy = false
		}
		res.HLSCopyRefused = ""
		err = v.runRenditions(ctx, src, p, pl)
	}
	if err != nil {
		return RenditionsResult{}, err
	}

	for _, m := range pl.mp4 {
		info, err := readMP4Info(m.path)
		if err != nil {
			return RenditionsResult{}, internal("reading an mp4 rendition", err)
		}
		if err := v.checkOutput(m.path, p.info, info); err != nil {
			return RenditionsResult{}, err
		}
		res.MP4 = append(res.MP4, MP4Rendition{Name: m.name, Path: m.path, Width: info.Width, Height: info.Height, Info: info,
			Remuxed: m.copy, Reused: m.reuse != ""})
	}
	if pl.hls != nil {
		lr, err := readLadder(pl.dir, pl.hls, p.audioStream >= 0)
		if err != nil {
			return RenditionsResult{}, internal("reading the hls ladder", err)
		}
		if d := p.info.Duration; d > 0 && lr.Duration < d-math.Max(1, 0.1*d) {
			return RenditionsResult{}, badInput(fmt.Sprintf("video is truncated or corrupt: only %.1f s of %.1f s could be decoded",
				lr.Duration, d), nil)
		}
		res.HLS = &lr
		if pl.hlsCopy >= 0 {
			res.HLSCopied = pl.hls[pl.hlsCopy].name
		}
	}
	return res, nil
}

// runRenditions runs the plan's ffmpeg command under the scaled CPU budget.
func (v *Videos) runRenditions(ctx context.Context, src string, p probed, pl renditionPlan) error {
	scale := renditionsCPUScale(&v.cfg, p.info.Width, p.info.Height, pl)
	scaled := *v.tools
	scaled.cfg.CPUPerInputSecond = time.Duration(float64(v.cfg.CPUPerInputSecond) * scale).Round(time.Millisecond)
	cpu, rule := scaled.cpuBudget(p.info.Duration)
	n := len(pl.encodedSizes())
	if rule != "" {
		rule += fmt.Sprintf(" (%.2f times the MP4's rate, for %d renditions)", scale, n)
	}
	args := renditionArgs(&v.cfg, src, p, pl)
	pw := &progressWriter{ctx: ctx, duration: p.info.Duration}
	// The working directory is the ladder's: ffmpeg writes relative names, which the playlists keep.
	if err := v.tools.run(ctx, pl.dir, v.tools.ffmpeg, args, pw, cpu); err != nil {
		var te *toolError
		if errors.As(err, &te) {
			te.cpuRule = rule
		}
		what := "making video renditions"
		if len(pl.mp4) == 0 {
			what = "making hls ladder"
		}
		return v.tools.classifyFFmpeg(ctx, what, err)
	}
	return nil
}
