package transcoder

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/mediaworker/mediaworker/transcoder/vips"
)

// Animations libvips 8.14 cannot read are decoded by ffmpeg: an APNG (libvips' PNG loader reads its
// default image only) and an AVIF image sequence (libheif 1.15 reads still items only, and a
// sequence may have none). ffmpeg runs exactly as it does for videos (toolRunner.run: prlimit's memory,
// CPU-time and file-size limits, its own process group, the job's directory), reads the upload with
// one demuxer only, and writes every frame, shrunk to the recipe's decode size (the high variant's
// in the default recipe), as a lossless animated WebP (animationFile) whose frame durations are the
// source's; only the first frame when no variant keeps the animation. That file then takes the path
// of any animated WebP: the budget, the variants, the warnings.

// decodeAnimationStep names ffmpeg's step in errors.
const decodeAnimationStep = "decoding the animation"

// animationFile is the fixed name, in the job's directory, of ffmpeg's lossless intermediate. The dot
// in it keeps it apart from every variant's file, <name>.<ext>, since a variant's name has none.
const animationFile = "frames.ffmpeg.webp"

// animationDemuxers are the ffmpeg demuxers allowed on each format decoded this way, and nothing
// else (the whitelist also binds nested demuxers). AVIF is ISO-BMFF, read by ffmpeg's mov demuxer.
var animationDemuxers = map[string]string{
	"PNG":  "apng",
	"AVIF": "mov,mp4,m4a,3gp,3g2,mj2",
}

// UseFFmpeg lets Transform decode APNG and AVIF image sequences with ffmpeg, confined by v's limits.
// Without it an APNG gives its first frame with a warning and an AVIF sequence is refused.
func (im *Images) UseFFmpeg(v *Videos) { im.ffmpeg = v }

// viaFFmpeg reports whether the sniffed file is an animation only ffmpeg can read here.
func (im *Images) viaFFmpeg(sn sniffedImage) bool {
	return im.ffmpeg != nil && sn.Animated && animationDemuxers[sn.Format] != ""
}

// transformAnimation checks the source against the limits, has ffmpeg decode it into
// outDir/frames.ffmpeg.webp, and transforms that into the variants of specs. The result describes
// the source.
func (im *Images) transformAnimation(ctx context.Context, srcPath, outDir string, sn sniffedImage, specs []ImageVariantSpec) (ImageResult, error) {
	var w, h, frames int
	switch sn.Format {
	case "PNG":
		// The header of the default image gives the size; acTL the frame count.
		hdr, err := vips.ReadHeader(srcPath)
		if err != nil {
			return ImageResult{}, imageInputError("reading image header", srcPath, sn, "", err)
		}
		hdr.Pages = max(sn.Frames, 1)
		if err := im.checkLimits(hdr); err != nil {
			return ImageResult{}, err
		}
		w, h, frames = hdr.Width, hdr.Height, hdr.Pages
	case "AVIF":
		// ffprobe under the video limits (frame size, duration); the frame count is capped below.
		p, err := im.ffmpeg.Probe(ctx, srcPath)
		if err != nil {
			return ImageResult{}, err
		}
		w, h = p.Info.Width, p.Info.Height
		if int64(w)*int64(h) > im.cfg.MaxPixels {
			return ImageResult{}, badInput(fmt.Sprintf("image is %d×%d (%s MP), limit is %s MP",
				w, h, megapixels(int64(w)*int64(h)), megapixels(im.cfg.MaxPixels)), nil)
		}
	}

	anim := filepath.Join(outDir, animationFile)
	defer os.Remove(anim)
	// One frame more than the budget: enough to tell that the budget is exceeded. The first frame
	// alone when no variant keeps the animation.
	maxFrames, keep := 1, false
	for _, s := range specs {
		keep = keep || s.keepsAnimation()
	}
	if keep {
		maxFrames = im.cfg.AnimationMaxFrames + 1
	}
	decode := decodeBox(specs, w, h)
	if err := im.ffmpeg.decodeAnimation(ctx, srcPath, anim, animationDemuxers[sn.Format], decode, maxFrames); err != nil {
		var e *Error
		if errors.As(err, &e) && e.BadInput && e.Msg == decodeAnimationStep+": "+undecodableVideo {
			// ffmpeg's words ("Invalid OBU length", "chunk too big") are for the operator's log.
			return ImageResult{}, &Error{BadInput: true, Detail: e.Detail, cause: e.cause, Msg: fmt.Sprintf(
				"decoding image: the %s animation is damaged or truncated (was the upload cut short?)", sn.Format)}
		}
		return ImageResult{}, err
	}
	res, err := im.transformFile(ctx, anim, outDir, sniffedImage{Format: "WebP", Frames: frames, Capped: frames == 0, FirstFrameOnly: !keep}, specs)
	if err != nil {
		var e *Error
		if errors.As(err, &e) && e.BadInput {
			// ffmpeg wrote this file: a failure to read it back is ours, not the upload's.
			return ImageResult{}, internal("reading ffmpeg's frames", err)
		}
		return ImageResult{}, err
	}
	res.Width, res.Height, res.Format = w, h, formatOf(sn)
	if frames > 1 && res.Frames > 1 && res.Frames < frames {
		// ffmpeg decodes what is there: an APNG cut short loses its last frames without an error.
		res.Warnings = append(res.Warnings, fmt.Sprintf(
			"animation incomplete: the file holds %d of the %d frames it declares (was the upload cut short?)", res.Frames, frames))
	}
	return res, nil
}

// decodeAnimation has ffmpeg write up to maxFrames frames of src, each shrunk to fit b (never
// enlarged; a free side is bounded by the frame's own), as a lossless animated WebP at dst with the
// source's frame durations.
func (v *Videos) decodeAnimation(ctx context.Context, src, dst, demuxers string, b bounds, maxFrames int) error {
	bw, bh := "iw", "ih" // min(iw,iw): free
	if b.w > 0 {
		bw = strconv.Itoa(b.w)
	}
	if b.h > 0 {
		bh = strconv.Itoa(b.h)
	}
	args := []string{
		"-nostdin", "-hide_banner", "-nostats", "-loglevel", "error",
		"-max_alloc", strconv.Itoa(maxAllocBytes),
		"-threads", "1",
		"-protocol_whitelist", "file",
		"-format_whitelist", demuxers,
		"-i", "file:" + src,
		"-map", "0:v:0", "-frames:v", strconv.Itoa(maxFrames),
		"-vf", fmt.Sprintf("scale=w='min(%s,iw)':h='min(%s,ih)':force_original_aspect_ratio=decrease,format=rgba", bw, bh),
		"-c:v", "libwebp_anim", "-lossless", "1", "-compression_level", "0", "-loop", "0",
		"-f", "webp", "-y", "file:" + dst,
	}
	if err := v.tools.run(ctx, filepath.Dir(dst), v.tools.ffmpeg, args, nil, v.cfg.MaxCPUTime); err != nil {
		return v.tools.classifyFFmpeg(ctx, decodeAnimationStep, err)
	}
	return nil
}

// formatOf names a sniffed format as ImageResult.Format does.
func formatOf(sn sniffedImage) string {
	switch sn.Format {
	case "PNG":
		return "png"
	case "AVIF":
		return "avif"
	}
	return sn.Format
}
