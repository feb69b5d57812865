package transcoder

import "github.com/mediaworker/mediaworker/transcoder/vips"

// pictures holds what one recipe made in memory from its one decode, so that each variant is made
// from the smallest picture that will do: resizing a 1024 px picture to 480 px costs a quarter of
// resizing the 2048 px one, and looks the same.
type pictures struct {
	decoded  *vips.Image
	box      bounds // the decode's
	animated bool   // decoded holds every frame of an animation
	// made are the pictures variants can be made from, in the order they were made: the decoded
	// one, its first frame once a still variant of an animation needed it, and every variant that
	// fits inside a box (a cover variant is cut, so it stands in for nothing).
	made []picture
	// owned are closed by close: everything made here.
	owned []*vips.Image
}

type picture struct {
	img      *vips.Image
	box      bounds // the box it was made to fit
	whole    bool   // the decoded picture or its first frame: every variant can be made from it
	animated bool
}

func newPictures(decoded *vips.Image, decode bounds, animated bool) *pictures {
	return &pictures{
		decoded:  decoded,
		box:      decode,
		animated: animated,
		made:     []picture{{img: decoded, box: decode, whole: true, animated: animated}},
		owned:    []*vips.Image{decoded},
	}
}

func (p *pictures) close() {
	for _, img := range p.owned {
		img.Close()
	}
}

// variant returns the picture of s, animated or not, for a srcW×srcH (upright) source. The picture
// belongs to p.
func (p *pictures) variant(s ImageVariantSpec, animated bool, srcW, srcH int) (*vips.Image, error) {
	if p.animated && !animated {
		if err := p.takeFirstFrame(); err != nil {
			return nil, err
		}
	}
	if s.fit() == FitCover {
		cw, ch := coverBox(s, srcW, srcH)
		src := p.smallest(false, func(pic picture) bool {
			return pic.img.Width() >= cw && pic.img.Height() >= ch
		})
		rw, rh := coverScale(src.img.Width(), src.img.Height(), cw, ch)
		img, err := src.img.Cover(rw, rh, cw, ch, interesting(s.crop()))
		if err != nil {
			return nil, internal("cropping image to "+s.Name, err)
		}
		p.owned = append(p.owned, img)
		return img, nil
	}

	b := bounds{s.Width, s.Height}
	for i := len(p.made) - 1; i >= 0; i-- {
		// Made for this very box (the decode's, as the default recipe's high variant is): as it is.
		if pic := p.made[i]; pic.animated == animated && pic.box == b {
			return pic.img, nil
		}
	}
	src := p.smallest(animated, func(pic picture) bool { return pic.box.contains(b) })
	img, err := src.img.ThumbnailBox(b.w, b.h)
	if err != nil {
		return nil, internal("resizing image to "+s.Name, err)
	}
	p.owned = append(p.owned, img)
	p.made = append(p.made, picture{img: img, box: b, animated: animated})
	return img, nil
}

// smallest returns the smallest picture made, animated or not, that will do (the latest of equal
// ones): the whole picture always will.
func (p *pictures) smallest(animated bool, will func(picture) bool) picture {
	var best picture
	for _, pic := range p.made {
		if pic.animated != animated || !(pic.whole || will(pic)) {
			continue
		}
		if best.img == nil || pic.img.Width()*pic.img.Height() <= best.img.Width()*best.img.Height() {
			best = pic
		}
	}
	return best
}

// takeFirstFrame adds the decoded animation's first frame to the pictures made, once.
func (p *pictures) takeFirstFrame() error {
	for _, pic := range p.made {
		if pic.whole && !pic.animated {
			return nil
		}
	}
	img, err := p.decoded.FirstFrame()
	if err != nil {
		return internal("taking the first frame", err)
	}
	p.owned = append(p.owned, img)
	p.made = append(p.made, picture{img: img, box: p.box, whole: true})
	return nil
}

func interesting(c Crop) vips.Interesting {
	switch c {
	case CropCentre:
		return vips.InterestingCentre
	case CropEntropy:
		return vips.InterestingEntropy
	}
	return vips.InterestingAttention
}

// forFacts returns the smallest whole-frame picture made (the decoded one, or a variant fitted inside
// a box: never a cover crop) that still has factsSide pixels on its long side: the facts' small copy
// costs a shrink of that (the default recipe's 480 px low variant: about 3 ms) instead of the 2048 px
// decode (about 60 ms).
func (p *pictures) forFacts() *vips.Image {
	best := p.made[0]
	for _, pic := range p.made[1:] {
		w, h := pic.img.Width(), pic.img.Height()
		if max(w, h) >= factsSide && w*h < best.img.Width()*best.img.Height() {
			best = pic
		}
	}
	return best.img
}
