package console

// The previews' placeholders: a response's ThumbHash decoded here, on the server, into a small PNG that
// the page carries as a data: URL. So the page needs no decoder script and shows the placeholder in the
// same render as the rest, before (or without) the real preview.
//
// thumbHashToRGBA is a hand port of thumbHashToRGBA from Evan Wallace's reference implementation
// (thumbhash.js of the npm package "thumbhash" 0.1.1, https://github.com/evanw/thumbhash):
//
//	Copyright (c) 2023 Evan Wallace
//
//	Permission is hereby granted, free of charge, to any person obtaining a copy
//	of this software and associated documentation files (the "Software"), to deal
//	in the Software without restriction, including without limitation the rights
//	to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
//	copies of the Software, and to permit persons to whom the Software is
//	furnished to do so, subject to the following conditions:
//
//	The above copyright notice and this permission notice shall be included in all
//	copies or substantial portions of the Software.
//
//	THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
//	IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
//	FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
//	AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
//	LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
//	OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
//	SOFTWARE.
//
// It follows the reference operation for operation, in the same order, as package facts' encoder does
// (facts/thumbhash.go): every product that is then added is wrapped in float64(...) so that no compiler
// fuses it into an FMA, Math.round is jsRound, and a store into the reference's Uint8Array truncates.
// Bytes past the end of a short hash read as 0, as the reference's undefined does in its bit operations.
// The tests check the pixels against the reference under node, byte for byte on the engine's cosines.

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"image"
	"image/png"
	"math"
	"regexp"
	"sync"
)

// maxThumbHash is the longest ThumbHash the console decodes, in bytes; a real one is about 25 (at most
// 5 + 1 + 27/2 + 4 + 4 + 7 = 37 with alpha).
const maxThumbHash = 64

// thumbHashToRGBA decodes a ThumbHash into a w×h image (≤ 32 px on its long side) of 8-bit
// non-premultiplied RGBA, row by row, as the reference does. It fails only for a hash too short to have
// a header or whose header gives the image no width or height.
func thumbHashToRGBA(hash []byte) (w, h int, rgba []byte, err error) {
	if len(hash) < 5 {
		return 0, 0, nil, fmt.Errorf("a ThumbHash of %d bytes has no header", len(hash))
	}
	at := func(i int) int {
		if i < len(hash) {
			return int(hash[i])
		}
		return 0
	}

	// Read the constants
	header24 := at(0) | at(1)<<8 | at(2)<<16
	header16 := at(3) | at(4)<<8
	lDC := float64(header24&63) / 63
	pDC := float64((header24>>6)&63)/31.5 - 1
	qDC := float64((header24>>12)&63)/31.5 - 1
	lScale := float64((header24>>18)&31) / 31
	hasAlpha := header24>>23 != 0
	pScale := float64((header16>>3)&63) / 63
	qScale := float64((header16>>9)&63) / 63
	isLandscape := header16>>15 != 0
	lx := max(3, pick(isLandscape, pick(hasAlpha, 5, 7), header16&7))
	ly := max(3, pick(isLandscape, header16&7, pick(hasAlpha, 5, 7)))
	aDC := 1.0
	if hasAlpha {
		aDC = float64(at(5)&15) / 15
	}
	aScale := float64(at(5)>>4) / 15

	// Read the varying factors (boost saturation by 1.25x to compensate for quantization)
	acStart := pick(hasAlpha, 6, 5)
	acIndex := 0
	decodeChannel := func(nx, ny int, scale float64) []float64 {
		var ac []float64
		for cy := 0; cy < ny; cy++ {
			for cx := pick(cy != 0, 0, 1); cx*ny < nx*(ny-cy); cx++ {
				nibble := (at(acStart+acIndex>>1) >> ((acIndex & 1) << 2)) & 15
				acIndex++
				ac = append(ac, (float64(nibble)/7.5-1)*scale)
			}
		}
		return ac
	}
	lAC := decodeChannel(lx, ly, lScale)
	pAC := decodeChannel(3, 3, pScale*1.25)
	qAC := decodeChannel(3, 3, qScale*1.25)
	var aAC []float64
	if hasAlpha {
		aAC = decodeChannel(5, 5, aScale)
	}

	// Decode using the DCT into RGB
	ratio := thumbHashToApproximateAspectRatio(hash)
	fw, fh := 32*ratio, 32.0
	if ratio > 1 {
		fw, fh = 32, 32/ratio
	}
	if !(fw >= 0.5 && fh >= 0.5) { // no width or height (the reference makes an empty image), or NaN
		return 0, 0, nil, errors.New("the ThumbHash's header gives its image no width or height")
	}
	w, h = jsRound(fw), jsRound(fh)
	rgba = make([]byte, w*h*4)
	fx := make([]float64, max(lx, pick(hasAlpha, 5, 3)))
	fy := make([]float64, max(ly, pick(hasAlpha, 5, 3)))
	for y, i := 0, 0; y < h; y++ {
		for x := 0; x < w; x, i = x+1, i+4 {
			l, p, q, a := lDC, pDC, qDC, aDC

			// Precompute the coefficients
			for cx := range fx {
				fx[cx] = cos(math.Pi / float64(w) * (float64(x) + 0.5) * float64(cx))
			}
			for cy := range fy {
				fy[cy] = cos(math.Pi / float64(h) * (float64(y) + 0.5) * float64(cy))
			}

			// Decode L
			for cy, j := 0, 0; cy < ly; cy++ {
				fy2 := fy[cy] * 2
				for cx := pick(cy != 0, 0, 1); cx*ly < lx*(ly-cy); cx, j = cx+1, j+1 {
					l = l + float64(lAC[j]*fx[cx]*fy2)
				}
			}

			// Decode P and Q
			for cy, j := 0, 0; cy < 3; cy++ {
				fy2 := fy[cy] * 2
				for cx := pick(cy != 0, 0, 1); cx < 3-cy; cx, j = cx+1, j+1 {
					f := fx[cx] * fy2
					p = p + float64(pAC[j]*f)
					q = q + float64(qAC[j]*f)
				}
			}

			// Decode A
			if hasAlpha {
				for cy, j := 0, 0; cy < 5; cy++ {
					fy2 := fy[cy] * 2
					for cx := pick(cy != 0, 0, 1); cx < 5-cy; cx, j = cx+1, j+1 {
						a = a + float64(aAC[j]*fx[cx]*fy2)
					}
				}
			}

			// Convert to RGB
			b := l - float64(2.0/3*p)
			r := (float64(3*l) - b + q) / 2
			g := r - q
			rgba[i] = toUint8(math.Max(0, 255*math.Min(1, r)))
			rgba[i+1] = toUint8(math.Max(0, 255*math.Min(1, g)))
			rgba[i+2] = toUint8(math.Max(0, 255*math.Min(1, b)))
			rgba[i+3] = toUint8(math.Max(0, 255*math.Min(1, a)))
		}
	}
	return w, h, rgba, nil
}

// thumbHashToApproximateAspectRatio is the reference's: width over height from the header alone
// (+Inf or NaN for a header without a height).
func thumbHashToApproximateAspectRatio(hash []byte) float64 {
	header := int(hash[3])
	hasAlpha := hash[2]&0x80 != 0
	isLandscape := hash[4]&0x80 != 0
	lx := pick(isLandscape, pick(hasAlpha, 5, 7), header&7)
	ly := pick(isLandscape, header&7, pick(hasAlpha, 5, 7))
	return float64(lx) / float64(ly)
}

func pick(c bool, yes, no int) int {
	if c {
		return yes
	}
	return no
}

// jsRound is JavaScript's Math.round: the nearest integer, ties toward +∞.
func jsRound(x float64) int {
	f := math.Floor(x)
	if x-f >= 0.5 {
		f++
	}
	return int(f)
}

// toUint8 is a store into a Uint8Array of a value in [0, 255]: truncated toward zero (NaN is 0).
func toUint8(x float64) byte {
	if !(x >= 0) {
		return 0
	}
	return byte(min(x, 255))
}

// cos is math.Cos, a variable only so the tests can run the port on the JavaScript engine's cosines.
var cos = math.Cos

// thumbHashPattern is standard base64 with padding, as responses carry a ThumbHash.
var thumbHashPattern = regexp.MustCompile(`^[A-Za-z0-9+/]+={0,2}$`)

// placeholderURL is a response's ThumbHash as a data: URL of a PNG, or "" when it is not one: the hash
// comes from a response on the stream, so it must be standard base64 of at most maxThumbHash bytes and
// decode to an image before the page uses it. Only the PNG made here reaches the page, never the text.
func placeholderURL(thumbHash string) template.URL {
	if thumbHash == "" || len(thumbHash) > base64.StdEncoding.EncodedLen(maxThumbHash) || !thumbHashPattern.MatchString(thumbHash) {
		return ""
	}
	placeholders.mu.Lock()
	u, ok := placeholders.m[thumbHash]
	placeholders.mu.Unlock()
	if ok {
		return u
	}
	if hash, err := base64.StdEncoding.DecodeString(thumbHash); err == nil && len(hash) <= maxThumbHash {
		if w, h, rgba, err := thumbHashToRGBA(hash); err == nil {
			var buf bytes.Buffer
			img := &image.NRGBA{Pix: rgba, Stride: 4 * w, Rect: image.Rect(0, 0, w, h)}
			if (&png.Encoder{CompressionLevel: png.BestCompression}).Encode(&buf, img) == nil {
				// Safe as a URL: made here from our own PNG's bytes, base64 only.
				u = template.URL("data:image/png;base64," + base64.StdEncoding.EncodeToString(buf.Bytes()))
			}
		}
	}
	placeholders.mu.Lock()
	if len(placeholders.m) >= maxPlaceholders {
		clear(placeholders.m)
	}
	placeholders.m[thumbHash] = u // "" too: a bad hash is not decoded again on every refresh
	placeholders.mu.Unlock()
	return u
}

// placeholders remembers the data: URLs made, so the page's refresh every few seconds does not decode
// the same 50 hashes again. Twice the recent outcomes; emptied when full.
const maxPlaceholders = 128

var placeholders = struct {
	mu sync.Mutex
	m  map[string]template.URL
}{m: map[string]template.URL{}}

// colorPattern is a dominant colour as responses carry it.
var colorPattern = regexp.MustCompile(`^#[0-9a-f]{6}$`)

// safeColor passes only a colour "#rrggbb" (lowercase hex) to the page; anything else is dropped.
func safeColor(c string) string {
	if !colorPattern.MatchString(c) {
		return ""
	}
	return c
}
