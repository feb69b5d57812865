package transcoder

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// VideoConfig sets the tools, limits and output of video transforms.
type VideoConfig struct {
	// FFmpeg and FFprobe are the programs to run: a path, or a name looked up in PATH.
	FFmpeg, FFprobe string
	// Prlimit is util-linux's prlimit(1) (a path or a name looked up in PATH). Every ffmpeg and
	// ffprobe run starts through it, so the resource limits below are in force before the tool reads
	// a byte of the upload. (Go cannot set rlimits between fork and exec, and setting them on the
	// child's pid after Start would leave a window in which the tool already parses the input.)
	Prlimit string
	// MaxMemoryBytes is the address-space limit (RLIMIT_AS) of each ffmpeg and ffprobe process: an
	// input that makes the decoder allocate more fails (as bad input) instead of taking the machine's
	// memory. ffmpeg maps about 300 MB of libraries before it reads anything, a 1080p encode with two
	// threads needs about 700 MB and an 8K source about 1 GB; more threads need more.
	MaxMemoryBytes int64
	// MaxCPUTime is the CPU time (user + system, all threads; RLIMIT_CPU, whole seconds) one ffmpeg run
	// may use; the kernel kills it at the limit and the input is refused, naming the limit. Probing
	// and the poster get at most probeCPUTime; the encode and the remux at most CPUPerInputSecond's
	// budget. CPU time, not wall-clock time, is what makes a transform the input's fault: it is the
	// same on an idle machine and a busy one. (The pipeline's watchdog ends a run that stops moving,
	// as a stall of the machine, never as the input's fault.)
	MaxCPUTime time.Duration
	// CPUPerInputSecond is the CPU time an encode (and a remux) may use per second of the input's
	// duration, counted for cpuLeadIn more (start-up, the poster, the fast-start pass): a short clip
	// that needs far more than its length justifies is refused long before MaxCPUTime. 0, or an input
	// whose container does not give its duration: MaxCPUTime alone. Measured with the defaults
	// (veryfast, 2 threads; 2-core VM, ffmpeg 5.1), in CPU-s per second of input: 0.62 for a 1080p30
	// MPEG-4 clip, 4.7 for 8K30 HEVC at 80 Mbit/s, 5.2 for 4K30 10-bit PQ HEVC (tone-mapped), 7.3 for
	// 1080p60 MPEG-4 full of grain at 740 Mbit/s, the costliest seen. The default, 30 s, is about 50
	// times a plain 1080p clip and 4 times the costliest; from about 4 minutes of input on,
	// MaxCPUTime is the lower limit.
	CPUPerInputSecond time.Duration
	// MaxHeight caps the output's short edge (the height of a landscape video, the width of a portrait
	// one), so "1080p" means the same for phone videos shot upright. Videos are never enlarged.
	MaxHeight int
	// CRF and Preset are libx264's quality (0-51, lower is better) and speed preset.
	CRF    int
	Preset string
	// AudioBitrate is the AAC bitrate, e.g. "128k".
	AudioBitrate string
	// Threads caps ffmpeg's decoder, filter and encoder threads per job.
	Threads int
	// MaxDuration refuses longer inputs (by their container's duration) and also stops reading any
	// input at that point, in case the container lies.
	MaxDuration time.Duration
	// MaxPixels refuses inputs whose frames are larger (width × height).
	MaxPixels int64
	// HLS adds an HLS VOD rendition (index.m3u8 and MPEG-TS segments of HLSSegment) remuxed from the MP4.
	HLS        bool
	HLSSegment time.Duration
	// MaxOutputBytes caps the MP4 (ffmpeg -fs); an input that would exceed it is refused.
	MaxOutputBytes int64
	// Remux copies the streams of inputs that are already what we would produce (H.264 yuv420p in
	// MP4/MOV, AAC stereo or no audio, upright, within MaxHeight) into a fast-start MP4 instead of
	// re-encoding them: the same result in a fraction of the time.
	Remux bool
}

// DefaultVideoConfig returns the defaults: ffmpeg/ffprobe/prlimit from PATH, ≤1080p H.264 CRF 23
// veryfast, AAC 128k, 2 threads, at most 1 hour and 8K (7680×4320) in, at most 4 GiB out, 2 GiB of
// address space and 2 hours of CPU time per ffmpeg run, 30 s of CPU time per second of input for an
// encode, HLS off (6 s segments when on).
func DefaultVideoConfig() VideoConfig {
	return VideoConfig{
		FFmpeg:            "ffmpeg",
		FFprobe:           "ffprobe",
		Prlimit:           "prlimit",
		MaxMemoryBytes:    2 << 30,
		MaxCPUTime:        2 * time.Hour,
		CPUPerInputSecond: 30 * time.Second,
		MaxHeight:         1080,
		CRF:               23,
		Preset:            "veryfast",
		AudioBitrate:      "128k",
		Threads:           2,
		MaxDuration:       time.Hour,
		MaxPixels:         7680 * 4320,
		HLSSegment:        6 * time.Second,
		Remux:             true,
		MaxOutputBytes:    4 << 30,
	}
}

var (
	x264Presets  = []string{"ultrafast", "superfast", "veryfast", "faster", "fast", "medium", "slow", "slower", "veryslow"}
	bitrateRegex = regexp.MustCompile(`^[1-9][0-9]*k$`)
)

// Validate reports the first setting that is out of range.
func (c VideoConfig) Validate() error {
	switch {
	case c.FFmpeg == "" || c.FFprobe == "" || c.Prlimit == "":
		return errors.New("ffmpeg, ffprobe and prlimit programs must be set")
	case c.MaxMemoryBytes < minMemoryBytes:
		return fmt.Errorf("video max memory must be at least %d MiB (ffmpeg's libraries alone take about 300 MB), got %d bytes",
			minMemoryBytes>>20, c.MaxMemoryBytes)
	case c.MaxCPUTime < time.Second:
		return fmt.Errorf("video max cpu time must be at least 1s, got %s", c.MaxCPUTime)
	case c.CPUPerInputSecond < 0:
		return fmt.Errorf("video cpu per second must not be negative (0: only the max cpu time), got %s", c.CPUPerInputSecond)
	case c.MaxHeight < 2:
		return fmt.Errorf("video max height must be at least 2, got %d", c.MaxHeight)
	case c.CRF < 0 || c.CRF > 51:
		return fmt.Errorf("video crf must be 0-51, got %d", c.CRF)
	case !slices.Contains(x264Presets, c.Preset):
		return fmt.Errorf("video preset must be one of %s, got %q", strings.Join(x264Presets, ", "), c.Preset)
	case !bitrateRegex.MatchString(c.AudioBitrate):
		return fmt.Errorf("audio bitrate must look like 128k, got %q", c.AudioBitrate)
	case c.Threads < 1:
		return fmt.Errorf("video threads must be at least 1, got %d", c.Threads)
	case c.MaxDuration <= 0:
		return fmt.Errorf("video max duration must be positive, got %s", c.MaxDuration)
	case c.MaxPixels <= 0:
		return fmt.Errorf("video max pixels must be positive, got %d", c.MaxPixels)
	case c.HLS && c.HLSSegment < time.Second:
		return fmt.Errorf("hls segment must be at least 1s, got %s", c.HLSSegment)
	case c.MaxOutputBytes <= 0:
		return fmt.Errorf("video max output bytes must be positive, got %d", c.MaxOutputBytes)
	}
	return nil
}

// VideoInfo describes a video file: an upload as ffprobe sees it, our own encode from its MP4 header
// (the same fields, read in Go).
type VideoInfo struct {
	Duration      float64 // seconds; 0 when the container does not say (e.g. some browser recordings)
	Width, Height int     // frame size, rotation applied (not scaled by a non-square pixel aspect ratio)
	VideoCodec    string  // e.g. "h264"
	AudioCodec    string  // "" without audio
	Container     string  // mp4, mov, matroska, webm, avi, mpegts or mpeg (MPEG-PS)
	HasAudio      bool
	// HDR names the source's high-dynamic-range transfer, "hlg" or "pq" ("" for SDR): such a video
	// is tone-mapped to SDR BT.709 (see video_hdr.go), never copied.
	HDR string
}

// VideoResult describes the source and the files written from it.
type VideoResult struct {
	Source VideoInfo

	MP4Path string // outDir/video.mp4
	MP4     VideoInfo

	PosterPath                string // outDir/poster.jpg, "" if the poster failed
	PosterWidth, PosterHeight int    // the poster's size, read from its JPEG header
	// PosterTimeSeconds is where in the video the poster was taken, in seconds from the start of its
	// content (as the MP4 plays it): its frame is the first at or after that time (a few hundredths
	// of a second later at most). 0 with no poster, and for a poster from the very first frame.
	PosterTimeSeconds float64
	PosterErr         error // why the poster failed: a warning, not a failure of the job

	HLSDir   string   // outDir/hls when HLS is on
	HLSFiles []string // HLSDir/index.m3u8 first, then the segments in order

	Remuxed bool // the input's streams were copied, not re-encoded (see VideoConfig.Remux)
}

// Fixed names inside the job's output directory: nothing in a path comes from the upload.
const (
	mp4Name        = "video.mp4"
	posterName     = "poster.jpg"
	hlsDirName     = "hls"
	hlsIndexName   = "index.m3u8"
	hlsSegmentName = "seg_%03d.ts"
)

const (
	// inputFormats are the only demuxers ffmpeg may use on an upload, one per container devices
	// write (ffmpeg 5.1's names, `ffmpeg -demuxers`): "mov,mp4,m4a,3gp,3g2,mj2" (phones, cameras,
	// browsers), "matroska,webm" (screen recorders, browsers), "avi" (older cameras, dashcams),
	// "mpegts" (camcorders' AVCHD .mts/.m2ts, 192-byte packets included; TV recordings) and "mpeg"
	// (MPEG-PS: DVD camcorders, .mpg, .vob). Each matches what pipeline.Detect accepts. The whitelist
	// also applies to nested demuxers (an AVI's embedded subtitle file, say), which is what stops an
	// .mp4- or .ts-named ffconcat, HLS or image2 file from making ffmpeg read other local files
	// (-protocol_whitelist file alone does not). Not taken: flv, asf/wmv, ogg, rm (no device we
	// serve writes them any more), mpegtsraw and mpegvideo (raw streams, no container), dv and mxf.
	inputFormats = "mov,mp4,m4a,3gp,3g2,mj2,matroska,webm,avi,mpegts,mpeg"
	// supportedVideos names the containers for people, in errors.
	supportedVideos = "mp4, mov, 3gp, mkv, webm, avi, mpeg-ts (mts, m2ts) or mpeg-ps (mpg, vob)"
	// maxAllocBytes caps any single allocation ffmpeg makes (-max_alloc), so a header asking for a huge
	// buffer fails instead of exhausting memory. An 8K frame is about 50 MB.
	maxAllocBytes = 512 << 20
	// maxProbeOutput bounds ffprobe's JSON; a real file's is a few kilobytes.
	maxProbeOutput = 1 << 20
	// stderrTail is how much of a tool's stderr is kept for the error message.
	stderrTail = 4096
	// minMemoryBytes is the smallest MaxMemoryBytes accepted; NewVideos also checks that the tools
	// start under the configured limit.
	minMemoryBytes = 256 << 20
	// probeCPUTime caps the CPU time of ffprobe runs and of a separate poster run (one frame).
	probeCPUTime = time.Minute
	// fileSizeMargin is what any file a tool writes may exceed MaxOutputBytes by (RLIMIT_FSIZE): -fs
	// stops ffmpeg after the chunk that crosses the cap, and the fast-start pass adds the index.
	fileSizeMargin = 64 << 20
)

// Videos transforms videos with ffmpeg. It is safe for concurrent use. It holds the transforms (an
// MP4 and poster, renditions and ladders, storyboards); running a tool under its limits is
// toolRunner's (tool.go), describing an upload prober's (probe.go), and the tools' arguments are
// free functions of the config (video_renditions.go).
type Videos struct {
	cfg    VideoConfig
	tools  *toolRunner
	probes *prober
}

// NewVideos checks cfg, finds the ffmpeg, ffprobe and prlimit programs, and checks that both tools
// start under the resource limits (a limit too small for ffmpeg to even load its libraries would
// otherwise turn every video into a bad-input failure). It runs each tool once, for a few ms.
func NewVideos(cfg VideoConfig) (*Videos, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("validating video config: %w", err)
	}
	tools := &toolRunner{cfg: cfg}
	v := &Videos{cfg: cfg, tools: tools, probes: &prober{cfg: cfg, tools: tools}}
	for _, p := range []struct {
		name, prog string
		dst        *string
	}{{"ffmpeg", cfg.FFmpeg, &v.tools.ffmpeg}, {"ffprobe", cfg.FFprobe, &v.tools.ffprobe}, {"prlimit", cfg.Prlimit, &v.tools.prlimit}} {
		path, err := exec.LookPath(p.prog)
		if err != nil {
			return nil, fmt.Errorf("finding %s: %w", p.name, err)
		}
		// Absolute paths: the tools run with the job's directory as working directory.
		if *p.dst, err = filepath.Abs(path); err != nil {
			return nil, fmt.Errorf("finding %s: %w", p.name, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, bin := range []string{v.tools.ffmpeg, v.tools.ffprobe} {
		// With the largest CPU limit any run gets: prlimit cannot raise a hard limit the worker's own
		// environment has set lower, and that must show here, not as a failed job.
		if err := v.tools.run(ctx, os.TempDir(), bin, []string{"-hide_banner", "-loglevel", "error", "-version"}, nil, cfg.MaxCPUTime); err != nil {
			return nil, fmt.Errorf("checking that %s runs under its resource limits (%d MiB of address space): %w",
				filepath.Base(bin), cfg.MaxMemoryBytes>>20, err)
		}
	}
	return v, nil
}

// VideoProbe is what Probe learned about an upload: its description, plus what Transform needs to
// encode it, tied to the file it describes. Handing it to TransformProbed saves probing twice (an
// ffprobe run costs about 100 ms, most of it loading ffmpeg's libraries).
type VideoProbe struct {
	Info VideoInfo

	p     probed
	path  string // absolute
	size  int64
	mtime time.Time
}

// Probe describes the video at path and checks it against the limits: an unreadable or unsupported
// file, one without a video stream, or one over the duration or frame size limit is bad input.
func (v *Videos) Probe(ctx context.Context, path string) (*VideoProbe, error) {
	return v.probes.describe(ctx, path)
}

// Transform writes outDir/video.mp4 (H.264/AAC, fast start, at most MaxHeight on the short edge),
// outDir/poster.jpg and, with HLS on, outDir/hls/, from srcPath. The poster's candidates
// (outDir/poster-1.jpg, poster-1.pgm, … poster-5.pgm) are removed before it returns.
func (v *Videos) Transform(ctx context.Context, srcPath, outDir string) (VideoResult, error) {
	if err := ctx.Err(); err != nil {
		return VideoResult{}, fmt.Errorf("transforming video: %w", err)
	}
	pr, err := v.Probe(ctx, srcPath)
	if err != nil {
		return VideoResult{}, err
	}
	return v.TransformProbed(ctx, pr, outDir)
}

// TransformProbed is Transform for a file Probe has already described. Should the file have changed
// since (size or modification time), it is probed again.
//
// One ffmpeg run writes the MP4 and, when it re-encodes, the poster too (a second output fed from the
// frames it decodes anyway, so the poster costs one JPEG encode). A remux decodes nothing, so its
// poster is a separate run from the upload's video stream, beside the remux.
func (v *Videos) TransformProbed(ctx context.Context, pr *VideoProbe, outDir string) (VideoResult, error) {
	if err := ctx.Err(); err != nil {
		return VideoResult{}, fmt.Errorf("transforming video: %w", err)
	}
	src, pr, outDir, err := v.probes.reprobed(ctx, pr, outDir)
	if err != nil {
		return VideoResult{}, err
	}
	p := pr.p
	res := VideoResult{Source: p.info, MP4Path: filepath.Join(outDir, mp4Name)}
	plan := planPoster(p.info.Duration)

	var out VideoInfo
	var posterDone chan struct{} // closed when the remux's poster run ends
	if canRemux(&v.cfg, p) {
		// Stream copy; should the input surprise ffmpeg, encode it after all. A copy decodes
		// nothing, so the poster is a run of its own, from the upload's video stream (the frames
		// the copy carries, already upright): it starts with the remux and runs beside it, mostly
		// waiting on process start-up like the remux does.
		posterDone = make(chan struct{})
		pctx, stopPoster := context.WithCancel(ctx)
		defer stopPoster()
		go func() {
			defer close(posterDone)
			res.PosterPath, res.PosterTimeSeconds, res.PosterErr = v.poster(pctx, src, p.videoStream, plan, outDir)
		}()
		res.Remuxed = v.remux(ctx, src, p, res.MP4Path) == nil
		if ctx.Err() != nil {
			<-posterDone
			return VideoResult{}, fmt.Errorf("transforming video: %w", ctx.Err())
		}
		if !res.Remuxed {
			stopPoster() // the encode below writes its own
			<-posterDone
			removePosterFiles(outDir)
			res.PosterPath, res.PosterTimeSeconds, res.PosterErr = "", 0, nil
		}
	}
	if res.Remuxed {
		// Our own ffmpeg's muxer wrote this MP4 (the streams are the upload's, already described and
		// checked by the input's ffprobe), so its header is read in Go like an encode's: an ffprobe
		// run here cost about 100 ms, most of a remux job's time after the copy itself.
		var rerr error
		out, rerr = readMP4Info(res.MP4Path)
		<-posterDone
		if ctx.Err() != nil {
			return VideoResult{}, fmt.Errorf("transforming video: %w", ctx.Err())
		}
		if rerr != nil {
			return VideoResult{}, internal("reading the remuxed video", rerr)
		}
	} else {
		withPoster := true
		err := v.encode(ctx, src, p, outDir, res.MP4Path, &plan)
		if errors.Is(err, errPosterOutput) {
			removePosterFiles(outDir)
			withPoster = false
			err = v.encode(ctx, src, p, outDir, res.MP4Path, nil)
		}
		if err != nil {
			removePosterFiles(outDir)
			return VideoResult{}, err
		}
		// Our own encoder's output: its header is read here, without another ffprobe run.
		if out, err = readMP4Info(res.MP4Path); err != nil {
			return VideoResult{}, internal("reading the encoded video", err)
		}
		var ok bool
		if withPoster {
			res.PosterPath, res.PosterTimeSeconds, ok, res.PosterErr = choosePoster(outDir, plan)
		}
		if !ok {
			// Encoded without the poster output, or no frame at or after the first candidate's time
			// reached it (a container that overstates its duration): take it from the MP4 (poster
			// falls back to the first frame).
			res.PosterPath, res.PosterTimeSeconds, res.PosterErr = v.poster(ctx, res.MP4Path, -1, plan, outDir)
		}
	}
	if ctx.Err() != nil {
		return VideoResult{}, fmt.Errorf("transforming video: %w", ctx.Err())
	}
	res.MP4 = out
	if err := v.checkOutput(res.MP4Path, p.info, out); err != nil {
		return VideoResult{}, err
	}
	if res.Source.Duration <= 0 {
		// The container does not say how long the video is (a live or streamed WebM, say): what
		// the encode decoded of it does, as the MP4 plays it.
		res.Source.Duration = out.Duration
	}

	if res.PosterPath != "" {
		if res.PosterWidth, res.PosterHeight, err = jpegSize(res.PosterPath); err != nil {
			os.Remove(res.PosterPath)
			res.PosterPath, res.PosterTimeSeconds, res.PosterErr = "", 0, fmt.Errorf("reading the poster: %w", err)
		}
	}

	if v.cfg.HLS {
		res.HLSDir = filepath.Join(outDir, hlsDirName)
		if res.HLSFiles, err = v.hls(ctx, res.MP4Path, outDir, res.HLSDir); err != nil {
			return VideoResult{}, err
		}
	}
	return res, nil
}

// encode runs the H.264/AAC transcode of the probed streams into mp4 and, from the same decoded
// frames (scaled, deinterlaced and tone-mapped like the MP4's), writes the poster's candidates of
// plan into outDir (none when plan is nil).
func (v *Videos) encode(ctx context.Context, src string, p probed, outDir, mp4 string, plan *posterPlan) error {
	threads := strconv.Itoa(v.cfg.Threads)
	args := inputArgs(&v.cfg, src)
	// Cap the short edge at MaxHeight, even dimensions (yuv420p needs them), never enlarge, except
	// that a short edge of 1 px (a valid video, a 1-pixel-wide strip) becomes 2 px, the least
	// yuv420p holds, the long edge following. ffmpeg has already applied any rotation, so iw×ih is
	// the displayed size. The split's second branch passes the poster's candidates alone, and their
	// output closes after the last, so the encode goes on alone.
	m := strconv.Itoa(v.cfg.MaxHeight)
	// Interlaced frames (camcorders' 1080i) are deinterlaced before scaling mixes their fields; an
	// HDR source is tone-mapped after scaling, on fewer pixels (see video_hdr.go).
	graph := fmt.Sprintf("[0:%d]", p.videoStream)
	if p.interlaced {
		graph += "bwdif=mode=send_frame:deint=interlaced,"
	}
	graph += fmt.Sprintf("scale=w='if(gte(iw,ih),-2,min(%s,max(2,trunc(iw/2)*2)))':h='if(gte(iw,ih),min(%s,max(2,trunc(ih/2)*2)),-2)'", m, m)
	graph += colourFilters(p)
	if plan != nil {
		graph += ",split=2[video][p];" + candidatesGraph("[p]", plan.selectFrom(0, 0))
	} else {
		graph += "[video]"
	}
	args = append(args,
		"-filter_threads", threads,
		"-filter_complex", graph,
		"-map", "[video]",
	)
	if p.audioStream >= 0 {
		args = append(args, "-map", fmt.Sprintf("0:%d", p.audioStream))
	}
	args = append(args,
		"-c:v", "libx264", "-preset", v.cfg.Preset, "-crf", strconv.Itoa(v.cfg.CRF),
		"-pix_fmt", "yuv420p", "-profile:v", "high",
		"-threads", threads,
	)
	args = append(args, colourTags(p)...)
	if v.cfg.HLS {
		// A keyframe at every segment boundary, so the HLS remux cuts even segments.
		args = append(args, "-force_key_frames",
			fmt.Sprintf("expr:gte(t,n_forced*%g)", v.cfg.HLSSegment.Seconds()))
	}
	if p.audioStream >= 0 {
		args = append(args, "-c:a", "aac", "-b:a", v.cfg.AudioBitrate)
		if p.channels > 2 {
			args = append(args, "-ac", "2") // browsers and phones play stereo everywhere
		}
	}
	args = append(args,
		// Metadata (GPS position, device, names) stays behind, as it does for images.
		"-map_metadata", "-1", "-map_chapters", "-1",
		"-movflags", "+faststart",
		"-fs", strconv.FormatInt(v.cfg.MaxOutputBytes, 10),
		"-f", "mp4", "-y", "file:"+mp4,
	)
	if plan != nil {
		args = append(args, candidateOutputs(posterCandidates, 1)...)
	}
	// Machine-readable progress on stdout, for the job's progress events.
	args = append(args, "-progress", "pipe:1", "-nostats")
	pw := &progressWriter{ctx: ctx, duration: p.info.Duration}
	cpu, rule := v.tools.cpuBudget(p.info.Duration)
	if err := v.tools.run(ctx, outDir, v.tools.ffmpeg, args, pw, cpu); err != nil {
		var te *toolError
		if plan != nil && ctx.Err() == nil && errors.As(err, &te) && te.signal == 0 && posterOutputFailed.MatchString(te.stderr) {
			return errPosterOutput
		}
		if te != nil {
			te.cpuRule = rule
		}
		return v.tools.classifyFFmpeg(ctx, "transcoding video", err)
	}
	return nil
}

// errPosterOutput says the encode failed setting up its poster output, not its MP4: TransformProbed
// encodes again without it, so the poster never fails a video (and a real problem with the input,
// such as one that needs more memory than the limit, is reported by the MP4 encode as usual).
var errPosterOutput = errors.New("the poster output failed")

// posterOutputFailed matches ffmpeg's errors about the streams of output files 1 and 2, the poster's
// candidates and their luma planes: "Error initializing output stream 1:0", "... for output stream
// #1:0" (ffmpeg 5), "[vost#1:0/mjpeg @ …]" (ffmpeg 6.1 and later).
var posterOutputFailed = regexp.MustCompile(`output stream #?[12]:\d|vost#[12]:\d`)

// canRemux says whether the input already is what encode would make, so its streams can be copied.
func canRemux(c *VideoConfig, p probed) bool {
	return !c.HLS && // HLS wants a keyframe at every segment boundary
		min(p.info.Width, p.info.Height) <= c.MaxHeight && remuxable(c, p)
}

// remuxable says whether the input's streams are what an encode makes, at the input's own size:
// H.264 yuv420p in MP4/MOV, upright, SDR, progressive, with stereo AAC or no audio (and remuxing is
// on). The fast path (canRemux) and a recipe's renditions as tall as the input (video_renditions.go)
// copy such streams instead of encoding them.
func remuxable(c *VideoConfig, p probed) bool {
	i := p.info
	return c.Remux &&
		(i.Container == "mp4" || i.Container == "mov") &&
		i.VideoCodec == "h264" && p.pixFmt == "yuv420p" && !p.rotated && i.HDR == "" && !p.interlaced &&
		(!i.HasAudio || (i.AudioCodec == "aac" && p.channels <= 2))
}

// remux copies the video and audio streams into a fast-start MP4, dropping metadata like encode does.
func (v *Videos) remux(ctx context.Context, src string, p probed, mp4 string) error {
	args := inputArgs(&v.cfg, src)
	args = append(args, "-map", fmt.Sprintf("0:%d", p.videoStream))
	if p.audioStream >= 0 {
		args = append(args, "-map", fmt.Sprintf("0:%d", p.audioStream))
	}
	args = append(args,
		"-c", "copy",
		"-map_metadata", "-1", "-map_chapters", "-1",
		"-movflags", "+faststart",
		"-fs", strconv.FormatInt(v.cfg.MaxOutputBytes, 10),
		"-f", "mp4", "-y", "file:"+mp4,
		"-progress", "pipe:1", "-nostats",
	)
	pw := &progressWriter{ctx: ctx, duration: p.info.Duration}
	// The encode's budget: a copy needs a small part of it, and a remux that fails is encoded after all.
	cpu, _ := v.tools.cpuBudget(p.info.Duration)
	return v.tools.run(ctx, filepath.Dir(mp4), v.tools.ffmpeg, args, pw, cpu)
}

// inputArgs are ffmpeg's options for reading an untrusted file, ending with -i.
func inputArgs(c *VideoConfig, src string) []string {
	threads := strconv.Itoa(c.Threads)
	return []string{
		"-nostdin", "-hide_banner", "-nostats", "-loglevel", "error",
		"-max_alloc", strconv.Itoa(maxAllocBytes),
		"-threads", threads,
		"-protocol_whitelist", "file",
		"-format_whitelist", inputFormats,
		"-t", strconv.FormatFloat(c.MaxDuration.Seconds(), 'f', -1, 64),
		"-i", "file:" + src,
	}
}

// checkOutput refuses results that show the input was bad: an MP4 cut off at the size cap, or one
// much shorter than its source claimed to be (a truncated or corrupt input that ffmpeg decoded as far
// as it could).
func (v *Videos) checkOutput(mp4 string, src, out VideoInfo) error {
	st, err := os.Stat(mp4)
	if err != nil {
		return internal("checking the encoded video", err)
	}
	if st.Size() >= v.cfg.MaxOutputBytes {
		return badInput(fmt.Sprintf("the encoded video would be larger than the %d MiB limit",
			v.cfg.MaxOutputBytes>>20), nil)
	}
	if src.Duration > 0 && out.Duration < src.Duration-math.Max(1, 0.1*src.Duration) {
		return badInput(fmt.Sprintf("video is truncated or corrupt: only %.1f s of %.1f s could be decoded",
			out.Duration, src.Duration), nil)
	}
	return nil
}

// hls remuxes the MP4 into an HLS VOD playlist and MPEG-TS segments in hlsDir, without re-encoding.
func (v *Videos) hls(ctx context.Context, mp4, outDir, hlsDir string) ([]string, error) {
	if err := os.MkdirAll(hlsDir, 0o755); err != nil {
		return nil, internal("making hls directory", err)
	}
	index := filepath.Join(hlsDir, hlsIndexName)
	args := append(inputArgs(&v.cfg, mp4),
		"-map", "0", "-c", "copy",
		"-f", "hls",
		"-hls_time", strconv.FormatFloat(v.cfg.HLSSegment.Seconds(), 'f', -1, 64),
		"-hls_playlist_type", "vod",
		"-hls_segment_type", "mpegts",
		"-hls_segment_filename", "file:"+filepath.Join(hlsDir, hlsSegmentName),
		"-y", "file:"+index,
	)
	if err := v.tools.run(ctx, outDir, v.tools.ffmpeg, args, nil, v.cfg.MaxCPUTime); err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("making hls: %w", ctx.Err())
		}
		// The input is our own MP4: a failure here is not the upload's fault.
		return nil, internal("making hls", err)
	}
	segments, err := filepath.Glob(filepath.Join(hlsDir, "seg_*.ts"))
	if err != nil || len(segments) == 0 {
		return nil, internal("making hls", fmt.Errorf("no segments written (%v)", err))
	}
	slices.Sort(segments) // seg_000.ts, seg_001.ts, ...: zero-padded, so lexical order is play order
	return append([]string{index}, segments...), nil
}
