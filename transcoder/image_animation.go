package transcoder

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/mediaworker/mediaworker/transcoder/vips"
)

// animationPlan decides whether an image is decoded as an animation (every frame, for the variants
// that keep it: ImageVariantSpec.keepsAnimation) and says in warnings which variants show only the
// first frame of an animated source, and why. decode is the decode's box and srcW×srcH the source's
// upright size.
//
// A source whose animation no variant keeps is decoded as its first frame, each variant with a
// warning. Otherwise the animation is kept within the budget (animation); beyond it, or for an
// APNG libvips reads, every variant shows the first frame under the one warning that says why, as
// before recipes; within it, the variants that do not keep it get a warning each.
func (im *Images) animationPlan(h vips.Header, format string, sn sniffedImage, specs []ImageVariantSpec, decode bounds, srcW, srcH int) (animate bool, warnings []string) {
	pages := h.Pages
	if sn.Frames > 0 { // ffmpeg's intermediate of an APNG: the source's count
		pages = sn.Frames
	}
	animated := (format == "png" && sn.Animated) || sn.FirstFrameOnly || (pages > 1 && (format == "gif" || format == "webp"))
	if !animated {
		return false, nil
	}
	var keep, still []ImageVariantSpec
	for _, s := range specs {
		if s.keepsAnimation() {
			keep = append(keep, s)
		} else {
			still = append(still, s)
		}
	}
	if len(keep) > 0 && !sn.FirstFrameOnly {
		w, hh := fitWithinBox(srcW, srcH, decode)
		var warning string
		if animate, warning = im.animation(h, format, sn, w, hh); !animate && warning != "" {
			return false, []string{warning}
		}
	}
	if !animate {
		still = specs
	}
	// One warning per reason, naming its variants in the recipe's order.
	var reasons []string
	names := map[string][]string{}
	for _, s := range still {
		r := s.stillReason()
		if names[r] == nil {
			reasons = append(reasons, r)
		}
		names[r] = append(names[r], s.Name)
	}
	for _, r := range reasons {
		which, show := "variant "+names[r][0], "it shows"
		if len(names[r]) > 1 {
			which, show = "variants "+strings.Join(names[r], ", "), "they show"
		}
		warnings = append(warnings, fmt.Sprintf("animation not kept in %s: %s; %s the first frame", which, r, show))
	}
	return animate, warnings
}

// animation decides whether an animation kept by some variant is decoded as one and, when it is
// not, the warning that says so. w×hh is the size of the decoded frames.
//
// Animated GIF and WebP are kept within the budget of ImageConfig.AnimationMaxFrames and
// AnimationMaxPixels, counted on the decoded frames (those of the high variant in the default
// recipe): every frame is held decoded in memory before encoding, and the WebP encoder's time grows
// with it too. Beyond the budget the variants show the first frame. libvips 8.14 reads an APNG's
// default image only (its PNG loader knows no animation chunks), so an APNG is always its first
// frame, with a warning.
func (im *Images) animation(h vips.Header, format string, sn sniffedImage, w, hh int) (animate bool, warning string) {
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
