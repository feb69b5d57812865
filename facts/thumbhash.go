package facts

// A hand port of rgbaToThumbHash from Evan Wallace's reference implementation (thumbhash.js, MIT, as
// published in the npm package "thumbhash" 0.1.1). Written by hand because no Go ThumbHash module could
// be had from the Go module proxy here (the ports we looked for — github.com/galdor/go-thumbhash,
// go.n16f.net/thumbhash and others — are not served), and the algorithm is ~80 lines.
//
// It follows the reference operation for operation, in the same order, so that the same RGBA input
// gives the same bytes as the reference under node whenever both see the same cosines (see cos below;
// the tests check exactly that, and that with Go's own cosines no quantised value is more than one
// step off). Two things keep the rest of the floating point identical to JavaScript's:
//   - every product that is then added is wrapped in float64(...): the Go spec lets a compiler fuse
//     x*y + z into one FMA (gc does on arm64 and with GOAMD64=v3), which rounds once instead of twice
//     and can flip a quantised bit; an explicit conversion forbids the fusion;
//   - Math.round is jsRound (ties toward +∞), not math.Round (ties away from zero).
// Only the encoder is ported: decoding is the UI's job, and the tests use the reference decoder.

import (
	"fmt"
	"math"
)

// rgbaToThumbHash encodes a w×h image of 8-bit non-premultiplied RGBA (row by row) to a ThumbHash.
// As the reference, it refuses images over 100 px on either side.
func rgbaToThumbHash(w, h int, rgba []byte) ([]byte, error) {
	if w > 100 || h > 100 {
		return nil, fmt.Errorf("%dx%d doesn't fit in 100x100", w, h)
	}
	if w < 1 || h < 1 || len(rgba) != w*h*4 {
		return nil, fmt.Errorf("%dx%d with %d bytes of RGBA", w, h, len(rgba))
	}
	n := w * h

	// Determine the average color
	var avgR, avgG, avgB, avgA float64
	for i, j := 0, 0; i < n; i, j = i+1, j+4 {
		alpha := float64(rgba[j+3]) / 255
		avgR = avgR + float64(alpha/255*float64(rgba[j]))
		avgG = avgG + float64(alpha/255*float64(rgba[j+1]))
		avgB = avgB + float64(alpha/255*float64(rgba[j+2]))
		avgA = avgA + alpha
	}
	if avgA != 0 {
		avgR /= avgA
		avgG /= avgA
		avgB /= avgA
	}

	hasAlpha := avgA < float64(n)
	lLimit := 7 // Use fewer luminance bits if there's alpha
	if hasAlpha {
		lLimit = 5
	}
	lx := max(1, jsRound(float64(lLimit*w)/float64(max(w, h))))
	ly := max(1, jsRound(float64(lLimit*h)/float64(max(w, h))))
	l := make([]float64, n) // luminance
	p := make([]float64, n) // yellow - blue
	q := make([]float64, n) // red - green
	a := make([]float64, n) // alpha

	// Convert the image from RGBA to LPQA (composite atop the average color)
	for i, j := 0, 0; i < n; i, j = i+1, j+4 {
		alpha := float64(rgba[j+3]) / 255
		r := float64(avgR*(1-alpha)) + float64(alpha/255*float64(rgba[j]))
		g := float64(avgG*(1-alpha)) + float64(alpha/255*float64(rgba[j+1]))
		b := float64(avgB*(1-alpha)) + float64(alpha/255*float64(rgba[j+2]))
		l[i] = (r + g + b) / 3
		p[i] = (r+g)/2 - b
		q[i] = r - g
		a[i] = alpha
	}

	// Encode using the DCT into DC (constant) and normalized AC (varying) terms
	fx := make([]float64, w)
	encodeChannel := func(channel []float64, nx, ny int) (dc float64, ac []float64, scale float64) {
		for cy := 0; cy < ny; cy++ {
			for cx := 0; cx*ny < nx*(ny-cy); cx++ {
				f := 0.0
				for x := 0; x < w; x++ {
					fx[x] = cos(math.Pi / float64(w) * float64(cx) * (float64(x) + 0.5))
				}
				for y := 0; y < h; y++ {
					fy := cos(math.Pi / float64(h) * float64(cy) * (float64(y) + 0.5))
					for x := 0; x < w; x++ {
						f = f + float64(channel[x+y*w]*fx[x]*fy)
					}
				}
				f /= float64(n)
				if cx != 0 || cy != 0 {
					ac = append(ac, f)
					scale = math.Max(scale, math.Abs(f))
				} else {
					dc = f
				}
			}
		}
		if scale != 0 {
			for i := range ac {
				ac[i] = 0.5 + float64(0.5/scale*ac[i])
			}
		}
		return dc, ac, scale
	}
	lDC, lAC, lScale := encodeChannel(l, max(3, lx), max(3, ly))
	pDC, pAC, pScale := encodeChannel(p, 3, 3)
	qDC, qAC, qScale := encodeChannel(q, 3, 3)
	var aDC, aScale float64
	var aAC []float64
	if hasAlpha {
		aDC, aAC, aScale = encodeChannel(a, 5, 5)
	}

	// Write the constants
	isLandscape := w > h
	header24 := jsRound(63*lDC) | jsRound(31.5+float64(31.5*pDC))<<6 | jsRound(31.5+float64(31.5*qDC))<<12 |
		jsRound(31*lScale)<<18 | b2i(hasAlpha)<<23
	header16 := ly
	if !isLandscape {
		header16 = lx
	}
	header16 |= jsRound(63*pScale)<<3 | jsRound(63*qScale)<<9 | b2i(isLandscape)<<15
	// ints until the end, as the reference's plain array, then truncated to bytes as its Uint8Array does.
	hash := []int{header24 & 255, (header24 >> 8) & 255, header24 >> 16, header16 & 255, header16 >> 8}
	acStart := 5
	if hasAlpha {
		acStart = 6
		hash = append(hash, jsRound(15*aDC)|jsRound(15*aScale)<<4)
	}

	// Write the varying factors
	channels := [][]float64{lAC, pAC, qAC}
	if hasAlpha {
		channels = append(channels, aAC)
	}
	acIndex := 0
	for _, ac := range channels {
		for _, f := range ac {
			at := acStart + acIndex>>1
			for len(hash) <= at {
				hash = append(hash, 0) // the reference's `undefined | x` is x
			}
			hash[at] |= jsRound(15*f) << ((acIndex & 1) << 2)
			acIndex++
		}
	}
	out := make([]byte, len(hash))
	for i, v := range hash {
		out[i] = byte(v)
	}
	return out, nil
}

// jsRound is JavaScript's Math.round: the nearest integer, ties toward +∞. x - floor(x) is exact for
// every float64 this file rounds, so the comparison is too.
func jsRound(x float64) int {
	f := math.Floor(x)
	if x-f >= 0.5 {
		f++
	}
	return int(f)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// cos is math.Cos, a variable only so the tests can run the port on the JavaScript engine's own
// cosines: math.Cos and V8's Math.cos differ in the last bit for some arguments (each within 1 ulp of
// the true value), which can move a quantised value across a rounding edge by one step. With the
// engine's cosines the tests demand the reference's bytes exactly.
var cos = math.Cos
