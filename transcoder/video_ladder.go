package transcoder

import (
	"bufio"
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

// The adaptive HLS ladder: several H.264 renditions of one video and its AAC audio, as CMAF (fMP4)
// segments under one master playlist, so a player picks the rendition its connection carries.
//
// One ffmpeg run makes all of it and decodes the input once: the filter graph deinterlaces, scales
// to the tallest rendition and tone-maps (the MP4 encode's filters, video.go and video_hdr.go) once,
// then splits, and each lower rendition is scaled down from the tallest one, not from the source (a
// 4K source is read at 4K once, and an HDR one tone-mapped on the tallest rendition's pixels only).
// The audio is encoded once, into an audio-only rendition that every video rendition names as its
// audio group: players fetch it beside whichever video rendition they play.
//
// Segments are cut at keyframes the encoders are forced to place every SegmentSeconds (the same
// times in every rendition, so a player can switch at any segment boundary); x264 may add keyframes
// at scene cuts between them, which costs nothing here: the muxer cuts only at the first keyframe
// at or after each boundary, which is the forced one.

// LadderRung is one HLS rendition to make: Height is the short edge (the height of a landscape
// video, the width of a portrait one, as VideoConfig.MaxHeight counts it), MaxKbps caps its video
// bitrate (x264's VBV: -maxrate, with a buffer of two seconds' worth), the quality being the MP4's
// CRF below the cap.
type LadderRung struct {
	Height  int
	MaxKbps int
}

// LadderSpec is the ladder to make.
type LadderSpec struct {
	Rungs []LadderRung
	// SegmentSeconds is the target segment duration; 0 means DefaultSegmentSeconds.
	SegmentSeconds float64
}

// Ladder limits. Rung heights are even because yuv420p needs even dimensions; 4320 is 8K, the
// tallest input MaxPixels lets in by default. Segments of 2 to 10 s: shorter ones make players
// fetch (and the worker upload) too many files, longer ones make them switch and start slowly.
const (
	DefaultSegmentSeconds = 4
	maxLadderRungs        = 8
	maxRungHeight         = 4320
	maxRungKbps           = 100_000
	minSegmentSeconds     = 2
	maxSegmentSeconds     = 10
)

// Validate reports the first field out of range, named as a config file names it.
func (s LadderSpec) Validate() error {
	if len(s.Rungs) == 0 {
		return errors.New("rungs: at least one rung is needed")
	}
	if len(s.Rungs) > maxLadderRungs {
		return fmt.Errorf("rungs: at most %d rungs, got %d", maxLadderRungs, len(s.Rungs))
	}
	for i, r := range s.Rungs {
		if r.Height < 2 || r.Height > maxRungHeight || r.Height%2 != 0 {
			return fmt.Errorf("rungs[%d].height must be even and 2-%d, got %d", i, maxRungHeight, r.Height)
		}
		if r.MaxKbps < 1 || r.MaxKbps > maxRungKbps {
			return fmt.Errorf("rungs[%d].max_kbps must be 1-%d, got %d", i, maxRungKbps, r.MaxKbps)
		}
		if j := slices.IndexFunc(s.Rungs[:i], func(o LadderRung) bool { return o.Height == r.Height }); j >= 0 {
			return fmt.Errorf("rungs[%d].height %d repeats rungs[%d]'s", i, r.Height, j)
		}
	}
	if s.SegmentSeconds != 0 && !(s.SegmentSeconds >= minSegmentSeconds && s.SegmentSeconds <= maxSegmentSeconds) {
		return fmt.Errorf("segment_seconds must be %d-%d (0: %d), got %g",
			minSegmentSeconds, maxSegmentSeconds, DefaultSegmentSeconds, s.SegmentSeconds)
	}
	return nil
}

func (s LadderSpec) segmentSeconds() float64 {
	if s.SegmentSeconds == 0 {
		return DefaultSegmentSeconds
	}
	return s.SegmentSeconds
}

// LadderResult describes the ladder written.
type LadderResult struct {
	Dir    string // outDir/hls: holds everything below; every name is relative to it
	Master string // "master.m3u8"
	// Files is every file written, relative to Dir, in an order safe to publish in: each rendition's
	// init segment and media segments, then the rendition playlists, the master playlist last (a
	// player that finds a playlist finds everything it names).
	Files []string
	// Renditions are the video renditions made, tallest first.
	Renditions []LadderRendition
	// AudioPlaylist is the audio rendition's playlist, "" when the input has no audio.
	AudioPlaylist string
	// Duration is how long the renditions play, in seconds (the tallest's playlist).
	Duration float64
}

// LadderRendition is one video rendition made.
type LadderRendition struct {
	Width, Height int    // frame size (Height is the frame's, not the rung's short edge)
	Playlist      string // relative to Dir, e.g. "720p.m3u8"
	// BandwidthBps is the master playlist's BANDWIDTH for it: the peak of its video (the rung's cap)
	// and the audio, plus the 10% ffmpeg adds for the container.
	BandwidthBps int
}

// Fixed names inside outDir/hls (beside VideoConfig.HLS's index.m3u8 and seg_NNN.ts, which they do not
// collide with). %v is ffmpeg's variant name: "audio" or the rendition's short edge, "720p".
const (
	ladderMaster       = "master.m3u8"
	ladderPlaylist     = "%v.m3u8"
	ladderInit         = "%v_init.mp4"
	ladderSegment      = "%v_%03d.m4s"
	ladderAudioName    = "audio"
	ladderAudioGroup   = "aud"
	ladderBufferFactor = 2 // -bufsize as seconds of -maxrate
)

// ladderRendition is one rendition planned: its frame size and bitrate cap.
type ladderRendition struct {
	name          string
	width, height int
	maxKbps       int
}

// planLadder picks the renditions for a w×h source (as displayed): the rungs no taller than its short
// edge, tallest first, at its aspect ratio (even sizes, the long edge rounded as ffmpeg's -2 does).
// No rendition is enlarged: when every rung is taller than the source, it gets a single rendition at
// its own short edge (made even, at least 2) with the lowest rung's cap. A rendition whose long edge
// libx264 cannot encode (a thin strip) is left out; none left is the input's fault.
func planLadder(w, h int, rungs []LadderRung) ([]ladderRendition, error) {
	short, long := min(w, h), max(w, h)
	rs := slices.Clone(rungs)
	slices.SortFunc(rs, func(a, b LadderRung) int { return b.Height - a.Height })
	var fit []LadderRung
	for _, r := range rs {
		if r.Height <= short {
			fit = append(fit, r)
		}
	}
	if len(fit) == 0 {
		fit = []LadderRung{{Height: max(2, short/2*2), MaxKbps: rs[len(rs)-1].MaxKbps}}
	}
	var out []ladderRendition
	for _, r := range fit {
		// ffmpeg's -2: the long edge scaled, rounded to the nearest even size.
		num, den := int64(r.Height)*int64(long), int64(short)*2
		l := int((num+den/2)/den) * 2
		if l > maxH264Side {
			continue
		}
		rw, rh := l, r.Height
		if w < h {
			rw, rh = r.Height, l
		}
		out = append(out, ladderRendition{name: strconv.Itoa(r.Height) + "p", width: rw, height: rh, maxKbps: r.MaxKbps})
	}
	if len(out) == 0 {
		return nil, badInput(fmt.Sprintf("video is %d×%d, too long for any rendition of the ladder (limit %d pixels on a side)",
			w, h, maxH264Side), nil)
	}
	return out, nil
}

// ladderGraph is the filter graph: the MP4 encode's deinterlacing, scaling (to the tallest rendition)
// and tone mapping, once, then a split whose first branch is the tallest rendition ([v0]) and whose
// others are scaled down from it ([v1], ...).
func ladderGraph(p probed, rs []ladderRendition) string {
	var b strings.Builder
	fmt.Fprintf(&b, "[0:%d]", p.videoStream)
	if p.interlaced {
		b.WriteString("bwdif=mode=send_frame:deint=interlaced,")
	}
	// Explicit sizes (planLadder's) rather than -2, so what the result says is what is written even
	// if ffmpeg's rounding were to differ; a source whose frame size changes midway is scaled to them
	// all the same.
	fmt.Fprintf(&b, "scale=w=%d:h=%d", rs[0].width, rs[0].height)
	b.WriteString(colourFilters(p))
	if len(rs) == 1 {
		b.WriteString("[v0]")
		return b.String()
	}
	fmt.Fprintf(&b, ",split=%d[v0]", len(rs))
	for i := 1; i < len(rs); i++ {
		fmt.Fprintf(&b, "[s%d]", i)
	}
	for i := 1; i < len(rs); i++ {
		fmt.Fprintf(&b, ";[s%d]scale=w=%d:h=%d[v%d]", i, rs[i].width, rs[i].height, i)
	}
	return b.String()
}

// ladderArgs is the ffmpeg command line (after the program) that writes the ladder into the working
// directory: relative names only, so the playlists hold relative URIs.
func (v *Videos) ladderArgs(src string, p probed, rs []ladderRendition, seg float64) []string {
	threads := strconv.Itoa(v.cfg.Threads)
	args := append(v.inputArgs(src),
		"-filter_threads", threads,
		"-filter_complex", ladderGraph(p, rs),
	)
	for i := range rs {
		args = append(args, "-map", fmt.Sprintf("[v%d]", i))
	}
	if p.audioStream >= 0 {
		args = append(args, "-map", fmt.Sprintf("0:%d", p.audioStream))
	}
	segs := strconv.FormatFloat(seg, 'f', -1, 64)
	args = append(args,
		"-c:v", "libx264", "-preset", v.cfg.Preset, "-crf", strconv.Itoa(v.cfg.CRF),
		"-pix_fmt", "yuv420p", "-profile:v", "high",
		"-threads", threads,
		// A keyframe at every segment boundary, at the same times in every rendition.
		"-force_key_frames", "expr:gte(t,n_forced*"+segs+")",
	)
	for i, r := range rs {
		args = append(args,
			fmt.Sprintf("-maxrate:v:%d", i), fmt.Sprintf("%dk", r.maxKbps),
			fmt.Sprintf("-bufsize:v:%d", i), fmt.Sprintf("%dk", r.maxKbps*ladderBufferFactor))
	}
	args = append(args, colourTags(p)...)
	// The variants: the audio once, in a group every video rendition refers to. default:yes on it
	// keeps ffmpeg from also listing the audio as a variant of its own (an audio-only stream a
	// player could pick over the video when bandwidth is low).
	var vsm []string
	agroup := ""
	if p.audioStream >= 0 {
		args = append(args, "-c:a", "aac", "-b:a", v.cfg.AudioBitrate)
		if p.channels > 2 {
			args = append(args, "-ac", "2") // browsers and phones play stereo everywhere
		}
		agroup = ",agroup:" + ladderAudioGroup
		vsm = append(vsm, "a:0"+agroup+",default:yes,name:"+ladderAudioName)
	}
	for i, r := range rs {
		vsm = append(vsm, fmt.Sprintf("v:%d%s,name:%s", i, agroup, r.name))
	}
	args = append(args,
		// Metadata (GPS position, device, names) stays behind, as it does for the MP4.
		"-map_metadata", "-1", "-map_chapters", "-1",
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
		// Machine-readable progress on stdout, for the job's progress events.
		"-progress", "pipe:1", "-nostats",
	)
	return args
}

// ladderCPUScale is how many MP4 encodes' worth of CPU the ladder's renditions count for: their pixels
// over the MP4's (the source scaled to MaxHeight), at least 1. The encoders' work follows the pixels
// they encode, a little more per pixel for small frames: on a 12 s 1080p H.264 clip (2-core VM,
// ffmpeg 5.1, veryfast) the ladder 1080/720/480 took 1.65 to 1.9 times the MP4 encode's CPU time
// (8.7 to 9.3 CPU-s against 4.6 to 5.6) where its pixels count for 1.64. The decode, what makes the
// hardest inputs costly (grainy 740 Mbit/s 1080p60: 7.3 CPU-s per second, nearly all of it
// decoding), and the deinterlacing and tone mapping are done once for all renditions, so for the
// inputs the budget is there to stop the scale overstates the cost. Either way the budget stays far
// above what a real video needs (CPUPerInputSecond's default is about 50 times a plain clip's
// rate): it is a ceiling for hostile inputs, not an estimate.
func (v *Videos) ladderCPUScale(w, h int, rs []ladderRendition) float64 {
	mw, mh := v.encodedSize(w, h)
	var px float64
	for _, r := range rs {
		px += float64(r.width) * float64(r.height)
	}
	return max(1, px/(float64(mw)*float64(mh)))
}

// Ladder writes the HLS ladder of spec for a probed video into outDir/hls, in one ffmpeg run under
// the encode's limits (tool.go), reporting progress across the whole run. Its CPU budget is the
// encode's (video_cpu.go) scaled by ladderCPUScale, within MaxCPUTime, which stays the ceiling of any
// one run. Rungs are taken as given (VideoConfig.MaxHeight caps the MP4, not the ladder), but never
// taller than the source.
//
// Should the file have changed since it was probed (size or modification time), it is probed again.
func (v *Videos) Ladder(ctx context.Context, pr *VideoProbe, outDir string, spec LadderSpec) (LadderResult, error) {
	if err := spec.Validate(); err != nil {
		return LadderResult{}, internal("making hls ladder", fmt.Errorf("validating ladder: %w", err))
	}
	if err := ctx.Err(); err != nil {
		return LadderResult{}, fmt.Errorf("making hls ladder: %w", err)
	}
	src, st, err := regularFile(pr.path)
	if err != nil {
		return LadderResult{}, err
	}
	if st.Size() != pr.size || !st.ModTime().Equal(pr.mtime) {
		if pr, err = v.Probe(ctx, src); err != nil {
			return LadderResult{}, err
		}
	}
	if outDir, err = filepath.Abs(outDir); err != nil {
		return LadderResult{}, internal("opening output directory", err)
	}
	p := pr.p
	rs, err := planLadder(p.info.Width, p.info.Height, spec.Rungs)
	if err != nil {
		return LadderResult{}, err
	}
	dir := filepath.Join(outDir, hlsDirName)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return LadderResult{}, internal("making hls directory", err)
	}

	// The encode's budget, its per-second rate scaled for the renditions' pixels.
	scale := v.ladderCPUScale(p.info.Width, p.info.Height, rs)
	scaled := *v
	scaled.cfg.CPUPerInputSecond = time.Duration(float64(v.cfg.CPUPerInputSecond) * scale).Round(time.Millisecond)
	cpu, rule := scaled.cpuBudget(p.info.Duration)
	if rule != "" {
		rule += fmt.Sprintf(" (%.2f times the MP4's rate, for %d renditions)", scale, len(rs))
	}

	args := v.ladderArgs(src, p, rs, spec.segmentSeconds())
	pw := &progressWriter{ctx: ctx, duration: p.info.Duration}
	// The working directory is the ladder's: ffmpeg writes relative names, which the playlists keep.
	if err := v.run(ctx, dir, v.ffmpeg, args, pw, cpu); err != nil {
		var te *toolError
		if errors.As(err, &te) {
			te.cpuRule = rule
		}
		return LadderResult{}, v.classifyFFmpeg(ctx, "making hls ladder", err)
	}
	res, err := readLadder(dir, rs, p.audioStream >= 0)
	if err != nil {
		return LadderResult{}, internal("reading the hls ladder", err)
	}
	if d := p.info.Duration; d > 0 && res.Duration < d-math.Max(1, 0.1*d) {
		return LadderResult{}, badInput(fmt.Sprintf("video is truncated or corrupt: only %.1f s of %.1f s could be decoded",
			res.Duration, d), nil)
	}
	return res, nil
}

// readLadder reads back the playlists ffmpeg wrote into dir: each must exist and name only plain
// relative files that exist, and the master must list every video rendition (with its BANDWIDTH) and
// the audio once. Anything else is our command's fault, not the input's.
func readLadder(dir string, rs []ladderRendition, audio bool) (LadderResult, error) {
	res := LadderResult{Dir: dir, Master: ladderMaster}
	var media, playlists []string
	names := make([]string, 0, len(rs)+1)
	for _, r := range rs {
		names = append(names, r.name)
	}
	if audio {
		names = append(names, ladderAudioName)
		res.AudioPlaylist = ladderAudioName + ".m3u8"
	}
	for i, name := range names {
		pl := name + ".m3u8"
		files, dur, err := readLadderPlaylist(dir, pl)
		if err != nil {
			return LadderResult{}, err
		}
		if i == 0 {
			res.Duration = dur
		}
		media = append(media, files...)
		playlists = append(playlists, pl)
	}
	bandwidth, err := readLadderMaster(dir, ladderMaster, res.AudioPlaylist)
	if err != nil {
		return LadderResult{}, err
	}
	for _, r := range rs {
		pl := r.name + ".m3u8"
		bw, ok := bandwidth[pl]
		if !ok {
			return LadderResult{}, fmt.Errorf("%s does not list %s", ladderMaster, pl)
		}
		res.Renditions = append(res.Renditions, LadderRendition{Width: r.width, Height: r.height, Playlist: pl, BandwidthBps: bw})
	}
	if len(bandwidth) != len(rs) {
		return LadderResult{}, fmt.Errorf("%s lists %d variants, want %d", ladderMaster, len(bandwidth), len(rs))
	}
	res.Files = append(append(media, playlists...), ladderMaster)
	return res, nil
}

// ladderPlainName reports whether a playlist's URI is a file beside it: no scheme, no directory.
func ladderPlainName(uri string) bool {
	return uri != "" && uri != "." && uri != ".." && !strings.ContainsAny(uri, `/\:?#`)
}

// readLadderPlaylist returns the init segment and media segments a VOD playlist names, in order, after
// checking that they exist, and the sum of their durations.
func readLadderPlaylist(dir, name string) ([]string, float64, error) {
	f, err := os.Open(filepath.Join(dir, name))
	if err != nil {
		return nil, 0, fmt.Errorf("reading playlist: %w", err)
	}
	defer f.Close()
	var files []string
	var dur float64
	ended := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(l, "#EXT-X-MAP:"):
			uri, ok := playlistAttr(l, "URI")
			if !ok {
				return nil, 0, fmt.Errorf("reading %s: EXT-X-MAP without a URI", name)
			}
			files = append(files, uri)
		case strings.HasPrefix(l, "#EXTINF:"):
			d, _, _ := strings.Cut(strings.TrimPrefix(l, "#EXTINF:"), ",")
			s, err := strconv.ParseFloat(d, 64)
			if err != nil {
				return nil, 0, fmt.Errorf("reading %s: %q: %w", name, l, err)
			}
			dur += s
		case l == "#EXT-X-ENDLIST":
			ended = true
		case l == "" || strings.HasPrefix(l, "#"):
		default:
			files = append(files, l)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, 0, fmt.Errorf("reading %s: %w", name, err)
	}
	if !ended || len(files) < 2 || !strings.HasSuffix(files[0], ".mp4") {
		return nil, 0, fmt.Errorf("reading %s: not a complete fMP4 VOD playlist (%d files named)", name, len(files))
	}
	for _, uri := range files {
		if !ladderPlainName(uri) {
			return nil, 0, fmt.Errorf("reading %s: %q is not a file beside it", name, uri)
		}
		if _, err := os.Stat(filepath.Join(dir, uri)); err != nil {
			return nil, 0, fmt.Errorf("reading %s: %w", name, err)
		}
	}
	return files, dur, nil
}

// readLadderMaster returns the BANDWIDTH of each variant the master lists, by playlist name, after
// checking that audio (a playlist name, "" for none) is listed once, as the audio group's rendition.
func readLadderMaster(dir, name, audio string) (map[string]int, error) {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return nil, fmt.Errorf("reading master playlist: %w", err)
	}
	bw := map[string]int{}
	audios := 0
	pending := -1 // the BANDWIDTH of an EXT-X-STREAM-INF awaiting its URI line
	for l := range strings.Lines(string(b)) {
		l = strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(l, "#EXT-X-MEDIA:"):
			uri, _ := playlistAttr(l, "URI")
			if !strings.Contains(l, "TYPE=AUDIO") || uri != audio {
				return nil, fmt.Errorf("reading %s: unexpected %q", name, l)
			}
			audios++
		case strings.HasPrefix(l, "#EXT-X-STREAM-INF:"):
			s, _ := playlistAttr(l, "BANDWIDTH")
			if pending, err = strconv.Atoi(s); err != nil || pending <= 0 {
				return nil, fmt.Errorf("reading %s: %q has no BANDWIDTH", name, l)
			}
		case l == "" || strings.HasPrefix(l, "#"):
		default:
			if pending < 0 || !ladderPlainName(l) || l == audio {
				return nil, fmt.Errorf("reading %s: unexpected variant %q", name, l)
			}
			bw[l], pending = pending, -1
		}
	}
	if want := min(len(audio), 1); audios != want {
		return nil, fmt.Errorf("reading %s: %d audio renditions, want %d", name, audios, want)
	}
	return bw, nil
}

// playlistAttr returns the value of key in a playlist tag's attribute list (quotes removed). Values here are
// ffmpeg's own (names, numbers, codecs): a quoted value may hold commas, so the list is walked.
func playlistAttr(line, key string) (string, bool) {
	_, list, ok := strings.Cut(line, ":")
	if !ok {
		return "", false
	}
	for list != "" {
		k, rest, ok := strings.Cut(list, "=")
		if !ok {
			return "", false
		}
		var val string
		if strings.HasPrefix(rest, `"`) {
			end := strings.IndexByte(rest[1:], '"')
			if end < 0 {
				return "", false
			}
			val, rest = rest[1:1+end], rest[2+end:]
			rest = strings.TrimPrefix(rest, ",")
		} else {
			val, rest, _ = strings.Cut(rest, ",")
		}
		if k == key {
			return val, true
		}
		list = rest
	}
	return "", false
}
