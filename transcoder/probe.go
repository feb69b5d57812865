package transcoder

import (
	"context"
	"encoding/json"
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

// ffprobe's view of an upload, and the limits checked on it.

// probed is ffprobe's view of a file: the public description plus what the encode needs.
type probed struct {
	info        VideoInfo
	videoStream int // absolute stream index, -1 if none
	audioStream int // absolute stream index, -1 if none
	channels    int
	pixFmt      string
	colour      colour // the video stream's colour tags
	interlaced  bool   // the video stream's field order says interlaced (camcorders' 1080i)
	rotated     bool   // display rotation other than 0
	streams     int    // all streams, including ones we drop
}

// prober describes uploads with ffprobe (Videos.Probe) and checks them against the limits.
type prober struct {
	cfg   VideoConfig
	tools *toolRunner
}

// describe is Probe: ffprobe's description of the file at path, checked against the limits.
func (pb *prober) describe(ctx context.Context, path string) (*VideoProbe, error) {
	src, st, err := regularFile(path)
	if err != nil {
		return nil, err
	}
	p, err := pb.probe(ctx, src)
	if err != nil {
		return nil, err
	}
	if err := pb.checkLimits(p); err != nil {
		return nil, err
	}
	return &VideoProbe{Info: p.info, p: p, path: src, size: st.Size(), mtime: st.ModTime()}, nil
}

// probe runs ffprobe on path. A file ffprobe cannot read (including containers outside the
// whitelist) is bad input; so is one without a video stream.
func (pb *prober) probe(ctx context.Context, path string) (probed, error) {
	mc, isMP4 := readMP4Content(path)
	// An encrypted MP4 whose index holds no video track (a DRM audio track or init segment) is
	// refused for having no video, as it would be decrypted; should ffprobe find a video stream in
	// it after all, it is refused as encrypted below.
	if (mc.protected && !mc.noVideoTrack) || (!isMP4 && (matroskaProtected(path) || tsScrambled(path))) {
		return probed{}, badInput(protectedMsg, nil)
	}
	args := []string{
		"-hide_banner", "-loglevel", "error",
		"-max_alloc", strconv.Itoa(maxAllocBytes),
		"-protocol_whitelist", "file",
		"-format_whitelist", inputFormats,
		"-print_format", "json", "-show_format", "-show_streams",
		"file:" + path,
	}
	stdout := &limitedBuffer{max: maxProbeOutput}
	if err := pb.tools.run(ctx, filepath.Dir(path), pb.tools.ffprobe, args, stdout, min(probeCPUTime, pb.cfg.MaxCPUTime)); err != nil {
		if ctx.Err() != nil {
			return probed{}, fmt.Errorf("probing video: %w", ctx.Err())
		}
		var te *toolError
		if !errors.As(err, &te) {
			return probed{}, internal("probing video", err)
		}
		if lerr := pb.tools.limitError("probing video", te); lerr != nil {
			return probed{}, lerr
		}
		if te.exitCode > 0 && te.systemFailure() == "" {
			if cutBeforeIndex(path) {
				// ffprobe only says "moov atom not found", and "not a supported video" would send
				// the person looking for a format problem when the upload simply stopped short.
				return probed{}, badInputSaid(cutBeforeIndexMsg, err)
			}
			return probed{}, badInputSaid("not a supported video ("+supportedVideos+")", err)
		}
		e := internal("probing video", err)
		e.Words = te.systemFailure()
		return probed{}, e
	}
	if stdout.overflow {
		return probed{}, badInput("probing video", errors.New("ffprobe described more than 1 MiB of streams"))
	}

	var raw struct {
		Format struct {
			FormatName string            `json:"format_name"`
			Duration   string            `json:"duration"`
			StartTime  string            `json:"start_time"`
			Tags       map[string]string `json:"tags"`
		} `json:"format"`
		Streams []struct {
			Index       int               `json:"index"`
			CodecType   string            `json:"codec_type"`
			CodecName   string            `json:"codec_name"`
			Width       int               `json:"width"`
			Height      int               `json:"height"`
			Channels    int               `json:"channels"`
			SampleRate  string            `json:"sample_rate"`
			NbFrames    string            `json:"nb_frames"`
			PixFmt      string            `json:"pix_fmt"`
			Primaries   string            `json:"color_primaries"`
			Transfer    string            `json:"color_transfer"`
			Space       string            `json:"color_space"`
			Range       string            `json:"color_range"`
			FieldOrder  string            `json:"field_order"`
			Disposition map[string]int    `json:"disposition"`
			Tags        map[string]string `json:"tags"`
			SideData    []struct {
				Rotation float64 `json:"rotation"`
			} `json:"side_data_list"`
		} `json:"streams"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &raw); err != nil {
		return probed{}, internal("parsing ffprobe output", err)
	}

	p := probed{videoStream: -1, audioStream: -1}
	// A stream the container declares but that holds nothing (HLS and live captures often declare an
	// AAC track that never got a packet) is dropped and the rest converted: mapped into the encode,
	// its missing parameters made ffmpeg refuse the whole file as undecodable. A video stream that
	// holds nothing is passed over for the next one; when there is none, the first is kept, and the
	// limits refuse it for its missing frame size as before.
	firstVideo := -1
	for i, s := range raw.Streams {
		if s.CodecType == "video" && s.Disposition["attached_pic"] == 0 {
			// Cover art in mp4/mkv is a one-frame "video" stream marked attached_pic: skip it.
			if firstVideo < 0 {
				firstVideo = i
			}
			if s.NbFrames != "0" && s.Width > 0 && s.Height > 0 {
				firstVideo = i
				break
			}
		}
	}
	if mc.protected && firstVideo >= 0 {
		return probed{}, badInput(protectedMsg, nil)
	}
	var codecs []string
	for i, s := range raw.Streams {
		switch {
		case i == firstVideo:
			p.videoStream = s.Index
			p.info.VideoCodec = s.CodecName
			p.info.Width, p.info.Height = s.Width, s.Height
			rotation := 0.0
			if len(s.SideData) > 0 {
				rotation = s.SideData[0].Rotation
			} else if r, err := strconv.ParseFloat(s.Tags["rotate"], 64); err == nil {
				rotation = r
			}
			if int(math.Abs(rotation))%180 == 90 {
				p.info.Width, p.info.Height = s.Height, s.Width
			}
			p.rotated = math.Mod(math.Abs(rotation), 360) != 0
			p.pixFmt = s.PixFmt
			p.colour = colour{primaries: s.Primaries, transfer: s.Transfer, space: s.Space, rng: s.Range}
			p.info.HDR = p.colour.hdr()
			p.interlaced = slices.Contains([]string{"tt", "bb", "tb", "bt"}, s.FieldOrder)
			codecs = append(codecs, s.CodecName)
		case s.CodecType == "audio" && p.audioStream < 0 && !emptyAudio(s.SampleRate, s.Channels, s.NbFrames):
			p.audioStream = s.Index
			p.info.AudioCodec = s.CodecName
			p.info.HasAudio = true
			p.channels = s.Channels
			codecs = append(codecs, s.CodecName)
		}
	}
	p.streams = len(raw.Streams)
	p.info.Container = containerName(raw.Format.FormatName, raw.Format.Tags["major_brand"], codecs)
	p.info.Duration = contentDuration(p.info.Container, raw.Format.Duration, raw.Format.StartTime)
	if p.videoStream < 0 {
		if cutBeforeIndex(path) {
			// Cut inside its index: ffprobe read the tracks described before the cut, if any.
			return probed{}, badInput(cutBeforeIndexMsg, nil)
		}
		if p.audioStream >= 0 {
			return probed{}, badInput(fmt.Sprintf("the file has no video stream, only audio (%s): audio alone is not supported", p.info.AudioCodec), nil)
		}
		return probed{}, badInput("the file has no video stream", nil)
	}
	if isMP4 && mc.videoTracks > 0 && mc.videoFrames == 0 {
		// Video tracks without a sample: an init segment alone, or an index written before any frame.
		return probed{}, badInput(noVideoFramesMsg, nil)
	}
	if s := mc.fragmentSeconds; isMP4 && mc.fragmented && s > 0 && math.Abs(p.info.Duration-s) > 1 {
		// The fragments' timing, not the declared mehd, is what the content holds (mp4_content.go).
		p.info.Duration = s
	}
	return p, nil
}

// protectedMsg refuses protected (DRM) media: its samples are ciphertext, which decodes as grey.
const protectedMsg = "the video is encrypted (DRM); it cannot be converted"

// noVideoFramesMsg refuses an MP4 whose video tracks hold no sample: an init segment alone.
const noVideoFramesMsg = "the file has no video frames (an MP4 init segment without its media segments?)"

// emptyAudio reports an audio stream that holds nothing: its container counts no frames in it, or
// ffprobe found none of its packets where it looked (the first few seconds), so it knows no sample
// rate or channel count; an encode could not decode it (and, mapped, it failed the whole file).
func emptyAudio(sampleRate string, channels int, frames string) bool {
	rate, _ := strconv.Atoi(sampleRate)
	return frames == "0" || rate <= 0 || channels <= 0
}

// contentDuration is how long the content of a file lasts, in seconds (0 when unknown), from
// ffprobe's format duration and start time. The MP4/MOV and Matroska demuxers declare the duration
// on the presentation timeline from zero (the movie header, the segment's duration), so content that
// starts late (a DASH init segment joined to a later media segment, a recording cut from a live
// stream, `-output_ts_offset 30`) lasts the duration minus its start; the other demuxers measure from
// the first timestamp, so their duration is the content's already (an MPEG-TS from a live capture
// starts hours in). The encode starts its output at the content's start, so this is also what its
// MP4 lasts when the whole file decodes: checkOutput judges the encode against it. (An MP4 without
// an edit list whose first frame is shown a B-frame delay late, 0.08 s, counts that much short.)
func contentDuration(container, duration, start string) float64 {
	d, err := strconv.ParseFloat(duration, 64)
	if err != nil || math.IsNaN(d) || math.IsInf(d, 0) || d < 0 {
		return 0
	}
	s, err := strconv.ParseFloat(start, 64)
	if err != nil || math.IsNaN(s) || s <= 0 || s >= d {
		return d
	}
	switch container {
	case "mp4", "mov", "matroska", "webm":
		return d - s
	}
	return d
}

// containerName names the container the way people do: ffprobe reports one demuxer for the whole
// mp4/mov family and one for matroska/webm. The others keep their demuxer's name: avi, mpegts, mpeg
// (a program stream).
func containerName(formatName, brand string, codecs []string) string {
	switch {
	case strings.HasPrefix(formatName, "mov,"):
		if strings.TrimSpace(brand) == "qt" {
			return "mov"
		}
		return "mp4"
	case strings.HasPrefix(formatName, "matroska"):
		for _, c := range codecs {
			if !slices.Contains([]string{"vp8", "vp9", "av1", "opus", "vorbis"}, c) {
				return "matroska"
			}
		}
		return "webm"
	}
	return formatName
}

// checkLimits refuses inputs over the duration or frame size limit.
func (pb *prober) checkLimits(p probed) error {
	i := p.info
	if i.Width <= 0 || i.Height <= 0 {
		return badInput("the video stream has no frame size", nil)
	}
	if px := int64(i.Width) * int64(i.Height); px > pb.cfg.MaxPixels {
		return badInput(fmt.Sprintf("video is %d×%d (%s MP per frame), limit is %s MP",
			i.Width, i.Height, megapixels(px), megapixels(pb.cfg.MaxPixels)), nil)
	}
	if d := time.Duration(i.Duration * float64(time.Second)); d > pb.cfg.MaxDuration {
		return badInput(fmt.Sprintf("video is %s long, limit is %s", d.Round(time.Second), pb.cfg.MaxDuration), nil)
	}
	if w, h := encodedSize(&pb.cfg, i.Width, i.Height); !canRemux(&pb.cfg, p) && max(w, h) > maxH264Side {
		// A thin strip within the pixel limit, too long for libx264, which would fail on it with
		// words that read as a damaged file.
		if w == i.Width && h == i.Height {
			return badInput(fmt.Sprintf("video is %d×%d, limit is %d pixels on a side", i.Width, i.Height, maxH264Side), nil)
		}
		return badInput(fmt.Sprintf("video is %d×%d and would be encoded as %d×%d, limit is %d pixels on a side",
			i.Width, i.Height, w, h, maxH264Side), nil)
	}
	return nil
}

// maxH264Side is the longest side libx264 encodes.
const maxH264Side = 16384

// encodedSize is the frame size encode's scale filter makes of a w×h source (as displayed): the
// short edge even, at least 2 and at most MaxHeight, the long edge following at an even size
// (ffmpeg's -2, rounded to nearest as av_rescale does).
func encodedSize(c *VideoConfig, w, h int) (int, int) {
	short := func(n int) int { return min(c.MaxHeight, max(2, n/2*2)) }
	follow := func(long, fromShort, toShort int) int {
		num, den := int64(toShort)*int64(long), int64(fromShort)*2
		return int((num+den/2)/den) * 2
	}
	if w >= h {
		oh := short(h)
		return follow(w, h, oh), oh
	}
	ow := short(w)
	return ow, follow(h, w, ow)
}

// regularFile returns path made absolute and its file info; anything but a regular file is an
// internal error (the worker downloaded it; an upload cannot choose its type).
func regularFile(path string) (string, os.FileInfo, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", nil, internal("opening video", err)
	}
	st, err := os.Stat(abs)
	if err != nil {
		return "", nil, internal("opening video", err)
	}
	if !st.Mode().IsRegular() {
		return "", nil, internal("opening video", fmt.Errorf("%s is not a regular file", abs))
	}
	return abs, st, nil
}

// reprobed opens the file pr describes again for a run on it, and probes it anew should it have
// changed since (size or modification time); outDir comes back absolute, as ffmpeg's outputs need.
func (pb *prober) reprobed(ctx context.Context, pr *VideoProbe, outDir string) (src string, _ *VideoProbe, absOut string, err error) {
	src, st, err := regularFile(pr.path)
	if err != nil {
		return "", nil, "", err
	}
	if st.Size() != pr.size || !st.ModTime().Equal(pr.mtime) {
		if pr, err = pb.describe(ctx, src); err != nil {
			return "", nil, "", err
		}
	}
	if absOut, err = filepath.Abs(outDir); err != nil {
		return "", nil, "", internal("opening output directory", err)
	}
	return src, pr, absOut, nil
}
