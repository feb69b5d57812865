package transcoder

import (
	"fmt"
	"math"
	"strconv"

	"github.com/mediaworker/mediaworker/transcoder/vips"
)

// animation decides whether an image is transformed as an animation (every frame, into animated
// WebPs) and, when an animation is not kept, the warning that says so.
//
// Animated GIF and WebP are kept within the budget of ImageConfig.AnimationMaxFrames and
// AnimationMaxPixels, counted on the high variant: every frame of it is held decoded in memory
// before encoding, and the WebP encoder's time grows with it too. Beyond the budget the variants
// show the first frame. libvips 8.14 reads an APNG's default image only (its PNG loader knows no
// animation chunks), so an APNG is always its first frame, with a warning.
func (im *Images) animation(h vips.Header, format string, sn sniffedImage) (animate bool, warning string) {
	if format == "png" && sn.Animated { // only when ffmpeg is not at hand (Images.UseFFmpeg)
		return false, "animation not kept: animated PNG (APNG) is read as its first frame; upload an animated WebP or GIF to keep the animation"
	}
	pages := h.Pages
	if sn.Frames > 0 { // ffmpeg's intermediate of an APNG: the source's count
		pages = sn.Frames
	}
	if pages <= 1 || (format != "gif" && format != "webp") {
		return false, ""
	}
	w, hh := fitWithin(h.Width, h.Height, im.cfg.High)
	pixels := int64(w) * int64(hh) * int64(pages)
	if pages <= im.cfg.AnimationMaxFrames && pixels <= im.cfg.AnimationMaxPixels {
		return true, ""
	}
	count := strconv.Itoa(pages)
	if sn.Capped && pages > im.cfg.AnimationMaxFrames {
		count = "more than " + strconv.Itoa(im.cfg.AnimationMaxFrames)
	}
	return false, fmt.Sprintf("animation not kept: %s frames of %d×%d (%s MP) exceed the animation budget of %d frames and %s MP; the variants show the first frame",
		count, w, hh, megapixels(pixels), im.cfg.AnimationMaxFrames, megapixels(im.cfg.AnimationMaxPixels))
}

// fitWithin is the size of a w×h image shrunk to fit size×size, never enlarged (as libvips'
// thumbnail rounds it).
func fitWithin(w, h, size int) (int, int) {
	if w <= size && h <= size {
		return w, h
	}
	scale := float64(size) / float64(max(w, h))
	return max(1, int(math.Round(float64(w)*scale))), max(1, int(math.Round(float64(h)*scale)))
}
