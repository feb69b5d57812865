package transcoder

import "math"

// The geometry of a recipe: how large the one decode must be, the exact box of a cover variant, and
// the size a picture is scaled to before the cover crop. All sizes are of the upright picture.

// bounds is a variant's box: a side of 0 is free.
type bounds struct{ w, h int }

// unbounded is the box of the decoded picture itself: every variant can be made from it.
var unbounded = bounds{}

// contains reports whether every picture fitting b also fits a, so that a picture made to fit a can
// stand in for the decoded one when making one to fit b.
func (a bounds) contains(b bounds) bool {
	return (a.w == 0 || (b.w != 0 && b.w <= a.w)) && (a.h == 0 || (b.h != 0 && b.h <= a.h))
}

// fitWithinBox is the size of a w×h picture shrunk to fit b, never enlarged, rounded as libvips'
// thumbnail rounds it.
func fitWithinBox(w, h int, b bounds) (int, int) {
	scale := 1.0
	if b.w > 0 {
		scale = min(scale, float64(b.w)/float64(w))
	}
	if b.h > 0 {
		scale = min(scale, float64(b.h)/float64(h))
	}
	if scale >= 1 {
		return w, h
	}
	return max(1, int(math.Round(float64(w)*scale))), max(1, int(math.Round(float64(h)*scale)))
}

// coverBox is the exact size of a cover variant of a srcW×srcH source: its box, or, for a source
// smaller than the box on either side, the largest box of the same aspect ratio the source fills
// without being enlarged.
func coverBox(s ImageVariantSpec, srcW, srcH int) (int, int) {
	k := min(1, float64(srcW)/float64(s.Width), float64(srcH)/float64(s.Height))
	if k >= 1 {
		return s.Width, s.Height
	}
	return min(srcW, max(1, int(math.Round(float64(s.Width)*k)))), min(srcH, max(1, int(math.Round(float64(s.Height)*k))))
}

// coverScale is the size a w×h picture is scaled to so that it covers cw×ch with its aspect ratio
// kept, before the crop: one side exactly the box's, the other rounded but never short of it (the
// aspect ratio then bends by less than a pixel, which nobody sees, where rounding down would leave
// the crop a pixel short of the bounds). A picture already the size is left as it is.
func coverScale(w, h, cw, ch int) (int, int) {
	s := max(float64(cw)/float64(w), float64(ch)/float64(h))
	return max(cw, int(math.Round(float64(w)*s))), max(ch, int(math.Round(float64(h)*s)))
}

// decodeBox is the box a srcW×srcH source is decoded to fit: that of the variant needing the most
// pixels, so that every variant is made from the decoded picture by shrinking only. For a cover
// variant it bounds the one side the cover scale is set by and leaves the other free, so the
// decoded picture covers the variant's box. The first of equal needs wins (the default recipe's
// high variant, whose box is then the decode's, exactly as before recipes).
func decodeBox(specs []ImageVariantSpec, srcW, srcH int) bounds {
	best, bestScale := unbounded, -1.0
	for _, s := range specs {
		var b bounds
		var scale float64
		switch s.fit() {
		case FitCover:
			cw, ch := coverBox(s, srcW, srcH)
			sw, sh := float64(cw)/float64(srcW), float64(ch)/float64(srcH)
			if sw >= sh {
				b, scale = bounds{w: cw}, sw
			} else {
				b, scale = bounds{h: ch}, sh
			}
		default:
			b = bounds{s.Width, s.Height}
			w, _ := fitWithinBox(srcW, srcH, b)
			scale = float64(w) / float64(srcW)
		}
		scale = min(scale, 1)
		if scale > bestScale {
			best, bestScale = b, scale
		}
	}
	return best
}
