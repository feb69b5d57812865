package transcoder

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
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
// CRF below the cap; 0 is DefaultRungKbps of the height.
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
		if r.MaxKbps < 0 || r.MaxKbps > maxRungKbps {
			return fmt.Errorf("rungs[%d].max_kbps must be 1-%d (or left out: a default by height), got %d", i, maxRungKbps, r.MaxKbps)
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
// rungKbps are the default caps of a rung left without max_kbps, by its height (the first row at or
// above it), near the common H.264 ladders (Apple's HLS authoring guidance): enough for the CRF to
// rule on ordinary footage, a cap on grain and noise.
var rungKbps = []struct{ height, kbps int }{
	{240, 400}, {360, 800}, {480, 1200}, {540, 2000}, {720, 3000}, {1080, 6000}, {1440, 10000}, {2160, 16000},
}

// DefaultRungKbps is the video bitrate cap of a rung of height whose max_kbps is not given.
func DefaultRungKbps(height int) int {
	for _, r := range rungKbps {
		if height <= r.height {
			return r.kbps
		}
	}
	return 30000 // above 4K, up to 8K
}

func planLadder(w, h int, rungs []LadderRung) ([]ladderRendition, error) {
	short, long := min(w, h), max(w, h)
	rs := slices.Clone(rungs)
	for i := range rs {
		if rs[i].MaxKbps == 0 {
			rs[i].MaxKbps = DefaultRungKbps(rs[i].Height)
		}
	}
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

// ladderGraph is the filter graph of a ladder alone (renditionGraph): the MP4 encode's deinterlacing,
// scaling (to the tallest rendition) and tone mapping, once, then a split whose first branch is the
// tallest rendition ([v0]) and whose others are scaled down from it ([v1], ...).
func ladderGraph(p probed, rs []ladderRendition) string {
	sizes := make([][2]int, len(rs))
	for i, r := range rs {
		sizes[i] = [2]int{r.width, r.height}
	}
	return renditionGraph(p, sizes)
}

// ladderArgs is the ffmpeg command line (after the program) that writes a ladder alone, every rung
// encoded, into the working directory: relative names only, so the playlists hold relative URIs.
func ladderArgs(c *VideoConfig, src string, p probed, rs []ladderRendition, seg float64) []string {
	return renditionArgs(c, src, p, renditionPlan{hls: rs, hlsCopy: -1, seg: seg})
}

// Ladder writes the HLS ladder of spec for a probed video into outDir/hls, in one ffmpeg run under
// the encode's limits (tool.go), reporting progress across the whole run. Its CPU budget is the
// encode's (video_cpu.go) scaled by renditionsCPUScale, within MaxCPUTime, which stays the ceiling of any
// one run. Rungs are taken as given (VideoConfig.MaxHeight caps the MP4, not the ladder), but never
// taller than the source.
//
// Should the file have changed since it was probed (size or modification time), it is probed again.
func (v *Videos) Ladder(ctx context.Context, pr *VideoProbe, outDir string, spec LadderSpec) (LadderResult, error) {
	if err := spec.Validate(); err != nil {
		return LadderResult{}, internal("making hls ladder", fmt.Errorf("validating ladder: %w", err))
	}
	res, err := v.Renditions(ctx, pr, outDir, RenditionsSpec{HLS: &spec})
	if err != nil {
		return LadderResult{}, err
	}
	return *res.HLS, nil
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
