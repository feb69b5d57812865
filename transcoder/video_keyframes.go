package transcoder

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Copying an upload's video into HLS segments: where the muxer would cut it, read from its keyframes
// without decoding, and whether those cuts make segments close enough to the target to copy rather
// than re-encode (Renditions, video_renditions.go, decides with it).

// hlsCopyMaxFactor is how much longer than the target a segment cut at the input's own keyframes may
// be: 4 s segments may run to 6 s. Past that (a phone's keyframe every 10 s, a screen recording's
// every 30) players start and switch slowly, and the rung is encoded with keyframes of our own.
const hlsCopyMaxFactor = 1.5

// maxKeyframeList bounds ffprobe's packet listing (about 20 bytes a packet: an hour at 60 fps is
// 4 MB).
const maxKeyframeList = 16 << 20

// hlsCopyCuts reads the input's video packets (no decoding) and returns the times, on the output's
// timeline, at which the HLS muxer would cut a copy of them into segments of seg seconds: it cuts at
// the first keyframe at least seg, 2·seg, … after the first packet. why says why a copy is refused
// (a segment longer than hlsCopyMaxFactor·seg, or one under half the target); "" when it is not.
func (pb *prober) hlsCopyCuts(ctx context.Context, src string, p probed, seg float64) (cuts []float64, why string, err error) {
	args := []string{
		"-hide_banner", "-loglevel", "error",
		"-max_alloc", strconv.Itoa(maxAllocBytes),
		"-protocol_whitelist", "file",
		"-format_whitelist", inputFormats,
		"-select_streams", strconv.Itoa(p.videoStream),
		"-show_entries", "packet=pts_time,flags:format=start_time",
		"-of", "csv=p=0",
		"file:" + src,
	}
	out := &limitedBuffer{max: maxKeyframeList}
	if err := pb.tools.run(ctx, filepath.Dir(src), pb.tools.ffprobe, args, out, min(probeCPUTime, pb.cfg.MaxCPUTime)); err != nil {
		if ctx.Err() != nil {
			return nil, "", fmt.Errorf("reading keyframes: %w", ctx.Err())
		}
		return nil, "the input's keyframes could not be read", nil
	}
	if out.overflow {
		return nil, "the input has too many packets to list its keyframes", nil
	}
	var keys []float64
	first, start := math.Inf(1), 0.0
	sc := bufio.NewScanner(strings.NewReader(out.String()))
	for sc.Scan() {
		pts, flags, isPacket := strings.Cut(strings.TrimSpace(sc.Text()), ",")
		t, err := strconv.ParseFloat(pts, 64)
		if err != nil {
			continue // N/A
		}
		if !isPacket {
			start = t // the format's start time: what ffmpeg subtracts from every timestamp
			continue
		}
		first = min(first, t)
		if strings.HasPrefix(flags, "K") {
			keys = append(keys, t)
		}
	}
	if len(keys) == 0 || math.IsInf(first, 1) {
		return nil, "the input lists no keyframes", nil
	}
	slices.Sort(keys)
	end := first + p.info.Duration
	prev, number := first, 1
	longest, shortest := 0.0, math.Inf(1)
	for _, k := range keys {
		if k <= first || k-first < float64(number)*seg {
			continue
		}
		longest, shortest = max(longest, k-prev), min(shortest, k-prev)
		cuts = append(cuts, k-start)
		prev, number = k, number+1
	}
	longest = max(longest, end-prev) // the last segment, to the end
	switch {
	case longest > hlsCopyMaxFactor*seg:
		return nil, fmt.Sprintf("the input's keyframes are too sparse to cut %g s segments by copying (one would last %.1f s)", seg, longest), nil
	case shortest < seg/2:
		return nil, fmt.Sprintf("the input's keyframes would cut a %.1f s segment by copying, under half the %g s target", shortest, seg), nil
	}
	return cuts, "", nil
}
