// Package facts computes what a media UI shows before the real image arrives — a ThumbHash placeholder,
// a dominant colour and a small palette — and a perceptual hash for finding near-duplicates, all from
// one small decoded copy of the image. It is pure Go over image.Image: decoding (libvips) stays with the
// caller, so this package imports nothing of ours and no cgo.
//
// Every hash here is only comparable with one made by the same algorithm; Algorithms names each one
// exactly, so an API that stores hashes can store that string beside them and recompute when it changes.
package facts

import (
	"encoding/base64"
	"errors"
	"fmt"
	"image"
	"math/bits"
	"strconv"

	"github.com/corona10/goimagehash"
)

// Algorithms names the exact algorithm and version behind each field of Facts. Change it whenever any
// of them changes (a library upgrade included): hashes made under different strings must not be compared.
const Algorithms = "facts v1. " +
	"input: the image box-averaged (premultiplied alpha) to ≤100 px on its long side, 8-bit non-premultiplied sRGB; " +
	"thumbhash v1 (evanw reference, thumbhash.js of npm thumbhash 0.1.1, ported exactly in facts/thumbhash.go on Go's math.Cos, whose last-bit differences from a JS engine's Math.cos can move a quantised value by one step), std base64 with padding; " +
	"phash: github.com/corona10/goimagehash v1.1.0 PerceptionHash (nfnt/resize bilinear to 64x64, luma 0.299/0.587/0.114 of premultiplied RGB, " +
	"2-D DCT 64x64 → top-left 8x8, bit set where coefficient > median, first coefficient = most significant bit), 16 lowercase hex digits; " +
	"dominant colour: histogram at 4 bits/channel, pixels weighted by alpha (alpha 0 ignored), bins by weight merged greedily into " +
	"clusters whose first bin's mean is within 48 (Euclidean, 0–255 sRGB), colour = weighted mean of a cluster, " +
	"dominant = heaviest cluster, palette = up to 5 heaviest clusters holding ≥1% of the weight"

// Version is the short name of Algorithms that answers carry (factsAlgorithm): an API compares hashes
// only between answers with the same Version. It changes whenever Algorithms does.
const Version = "mediaworker-facts/1"

// Facts are what a media UI shows first, computed from one small decoded copy of the image.
type Facts struct {
	ThumbHash     string   // base64 (std encoding, as the reference implementation's demo) of the ThumbHash
	DominantColor string   // "#rrggbb" sRGB; empty when every pixel is fully transparent
	Palette       []string // up to 5 "#rrggbb", most common first; nil when every pixel is fully transparent
	PHash         string   // 64-bit perceptual hash, 16 lowercase hex digits
}

// maxSide is ThumbHash's limit (the reference refuses larger input: bigger is slower with no benefit),
// and the size of the one small copy every fact is computed from, so the phash and colours of a large
// image passed here are those of its 100 px copy, as when the caller makes that copy itself.
const maxSide = 100

// FromImage computes the facts of img. Callers should pass a small copy (≤100 px on the long side); a
// larger image is box-downscaled here first, which costs time proportional to its pixels.
func FromImage(img image.Image) (Facts, error) {
	if img == nil {
		return Facts{}, errors.New("facts: nil image")
	}
	b := img.Bounds()
	if b.Dx() <= 0 || b.Dy() <= 0 {
		return Facts{}, fmt.Errorf("facts: empty image %v", b)
	}
	small := downscale(img, maxSide)
	sw, sh := small.Rect.Dx(), small.Rect.Dy()

	th, err := rgbaToThumbHash(sw, sh, small.Pix)
	if err != nil {
		return Facts{}, fmt.Errorf("facts: thumbhash: %w", err)
	}
	ph, err := goimagehash.PerceptionHash(small)
	if err != nil {
		return Facts{}, fmt.Errorf("facts: phash: %w", err)
	}
	dominant, palette := dominantColors(small)
	return Facts{
		ThumbHash:     base64.StdEncoding.EncodeToString(th),
		DominantColor: dominant,
		Palette:       palette,
		PHash:         fmt.Sprintf("%016x", ph.GetHash()),
	}, nil
}

// downscale returns img as 8-bit non-premultiplied RGBA (what ThumbHash's reference takes) with its long
// side at most limit. Each source pixel falls in exactly one destination pixel, whose value is the plain
// mean of its sources in premultiplied 16-bit space (averaging premultiplied keeps the colour of
// transparent pixels out of the mix), converted back with rounding. At or under limit the pixels are
// only converted.
func downscale(img image.Image, limit int) *image.NRGBA {
	b := img.Bounds()
	w, h := b.Dx(), b.Dy()
	dw, dh := w, h
	if w > limit || h > limit {
		if w >= h {
			dw, dh = limit, scaleSide(h, limit, w)
		} else {
			dw, dh = scaleSide(w, limit, h), limit
		}
	}
	// Sums per destination pixel: premultiplied R, G, B, A (each ≤ 0xffff per source pixel) and count.
	// uint64 holds any image the decoder can produce.
	sums := make([][5]uint64, dw*dh)
	for y := 0; y < h; y++ {
		dy := y * dh / h
		for x := 0; x < w; x++ {
			dx := x * dw / w
			r, g, bl, a := img.At(b.Min.X+x, b.Min.Y+y).RGBA()
			s := &sums[dy*dw+dx]
			s[0] += uint64(r)
			s[1] += uint64(g)
			s[2] += uint64(bl)
			s[3] += uint64(a)
			s[4]++
		}
	}
	out := image.NewNRGBA(image.Rect(0, 0, dw, dh))
	for i, s := range sums {
		p := out.Pix[i*4 : i*4+4]
		if s[3] == 0 {
			continue // fully transparent: 0,0,0,0 as image/draw would leave it
		}
		// Un-premultiply: colour = sumC / sumA (in 0..1), alpha = sumA / (count·0xffff).
		p[0] = uint8((s[0]*255 + s[3]/2) / s[3])
		p[1] = uint8((s[1]*255 + s[3]/2) / s[3])
		p[2] = uint8((s[2]*255 + s[3]/2) / s[3])
		den := s[4] * 0xffff
		p[3] = uint8((s[3]*255 + den/2) / den)
	}
	return out
}

// scaleSide is the short side when the long side goes to limit: rounded, at least 1.
func scaleSide(short, limit, long int) int {
	n := (short*limit*2 + long) / (long * 2)
	if n < 1 {
		n = 1
	}
	return n
}

// PHashDistance is the Hamming distance (0..64) between two PHash values: 0 is the same picture, a
// handful of bits is a re-encoding or a resize, around 32 is unrelated. Each must be exactly 16 hex
// digits (either case), as Facts.PHash has.
func PHashDistance(a, b string) (int, error) {
	x, err := parsePHash(a)
	if err != nil {
		return 0, err
	}
	y, err := parsePHash(b)
	if err != nil {
		return 0, err
	}
	return bits.OnesCount64(x ^ y), nil
}

func parsePHash(s string) (uint64, error) {
	if len(s) != 16 {
		return 0, fmt.Errorf("facts: phash %q: want 16 hex digits, have %d characters", s, len(s))
	}
	// ParseUint with base 16 takes neither a sign, a 0x prefix nor underscores, so 16 characters that
	// parse are 16 hex digits.
	v, err := strconv.ParseUint(s, 16, 64)
	if err != nil {
		return 0, fmt.Errorf("facts: phash %q: not hex", s)
	}
	return v, nil
}
