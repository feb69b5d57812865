package transcoder

import (
	"math"

	"github.com/mediaworker/mediaworker/transcoder/vips"
)

// HDR stills: 10-bit HEIC and AVIF whose nclx colour property says BT.2020 primaries with the PQ
// (transfer 16) or HLG (18) transfer, as Android cameras, some phones' exports and browsers write
// them. libvips 8.14 knows only ICC profiles and ignores nclx, so their code values were shown as if
// they were sRGB: flat and grey (colourfulness 0.32–0.45, contrast 0.43–0.54 of the SDR picture).
// They are tone-mapped to SDR sRGB instead, as videos are (video_hdr.go), with the same few steps
// zimg and ffmpeg's tonemap take, done by libvips on the 16-bit decode (vips.ThumbnailToneMapped):
//
//  1. the transfer's inverse to display light in cd/m² (PQ's EOTF; HLG's inverse OETF and its OOTF
//     for a 1000 cd/m² display, system gamma 1.2, per channel);
//  2. SDR white: the picture's brightest value, but at least 100 cd/m² (zimg's nominal peak for an
//     SDR display) and at most 203 (BT.2408's HDR reference white). A picture whose light stays
//     within SDR's (an SDR photo stored as HDR, whichever white it was given) is shown as it was;
//     one with highlights puts diffuse white at 203 cd/m², where cameras and BT.2408 put it;
//  3. a tone curve: linear up to 0.8 of white, then an extended-Reinhard roll-off that brings the
//     brightest value to white (so highlights keep their detail instead of clipping), per channel;
//  4. BT.2020 (or the file's P3 or BT.709) primaries to BT.709/sRGB, out-of-gamut colours clipped;
//  5. the sRGB transfer, to 8 bits.

// cicp is a picture's coding-independent code points (ITU-T H.273), from a HEIF nclx property.
type cicp struct {
	primaries, transfer, matrix uint16
	fullRange                   bool
}

// H.273 code points the worker acts on.
const (
	cicpBT709     = 1
	cicpBT2020    = 9
	cicpP3D65     = 12
	cicpPQ        = 16
	cicpHLG       = 18
	hdrWhiteMin   = 100.0  // cd/m²: SDR's nominal peak (tonemapNominalPeak)
	hdrWhiteMax   = 203.0  // cd/m²: BT.2408's reference white
	hlgDisplay    = 1000.0 // cd/m²: the HLG display the OOTF is for
	toneKnee      = 0.8    // of white: linear below, rolled off above
	hlgGammaFixed = 1.2    // HLG's system gamma at 1000 cd/m²
)

// hdr names the transfer of an HDR picture: "pq", "hlg" or "" (SDR, or not told).
func (c cicp) hdr() string {
	switch c.transfer {
	case cicpPQ:
		return "pq"
	case cicpHLG:
		return "hlg"
	}
	return ""
}

// toBT709 is the matrix from the picture's primaries to BT.709's, in linear light (from the
// primaries' chromaticities, D65 white). BT.2020 is assumed when the file does not say.
func (c cicp) toBT709() [9]float64 {
	switch c.primaries {
	case cicpBT709:
		return [9]float64{1, 0, 0, 0, 1, 0, 0, 0, 1}
	case cicpP3D65:
		return [9]float64{
			1.2249401, -0.2249404, 0,
			-0.0420569, 1.0420571, 0,
			-0.0196376, -0.0786361, 1.0982735,
		}
	}
	return [9]float64{
		1.6604910, -0.5876411, -0.0728499,
		-0.1245505, 1.1328999, -0.0083494,
		-0.0181508, -0.1005789, 1.1187297,
	}
}

// displayLight is the transfer's inverse: display light in cd/m² of a signal in 0..1.
func (c cicp) displayLight(e float64) float64 {
	if c.transfer == cicpHLG {
		return hlgDisplay * math.Pow(hlgInverseOETF(e), hlgGammaFixed)
	}
	return 10000 * pqEOTF(e)
}

// pqEOTF is SMPTE ST 2084's EOTF: a signal in 0..1 to light relative to 10000 cd/m².
func pqEOTF(e float64) float64 {
	const (
		m1 = 2610.0 / 16384
		m2 = 2523.0 / 4096 * 128
		c1 = 3424.0 / 4096
		c2 = 2413.0 / 4096 * 32
		c3 = 2392.0 / 4096 * 32
	)
	p := math.Pow(max(e, 0), 1/m2)
	return math.Pow(max(p-c1, 0)/(c2-c3*p), 1/m1)
}

// hlgInverseOETF is BT.2100 HLG's inverse OETF: a signal in 0..1 to scene light in 0..1.
func hlgInverseOETF(e float64) float64 {
	const (
		a = 0.17883277
		b = 1 - 4*a
	)
	c := 0.5 - a*math.Log(4*a)
	e = min(max(e, 0), 1)
	if e <= 0.5 {
		return e * e / 3
	}
	return (math.Exp((e-c)/a) + b) / 12
}

// rollOff is the tone curve on light relative to white: x below the knee, then an extended
// Reinhard curve with slope 1 at the knee that reaches 1 at peak (the brightest value, relative to
// white). With peak at or below 1 nothing needs compressing.
func rollOff(x, peak float64) float64 {
	if peak <= 1 || x <= toneKnee {
		return x
	}
	t := (x - toneKnee) / (1 - toneKnee)
	m := (peak - toneKnee) / (1 - toneKnee)
	return toneKnee + (1-toneKnee)*t*(1+t/(m*m))/(1+t)
}

// srgbOETF is the sRGB transfer: linear light in 0..1 to a signal in 0..1.
func srgbOETF(l float64) float64 {
	l = min(max(l, 0), 1)
	if l <= 0.0031308 {
		return 12.92 * l
	}
	return 1.055*math.Pow(l, 1/2.4) - 0.055
}

// toneCurve returns the tables vips.ThumbnailToneMapped applies to a picture with code points c.
// The decode's 16-bit code values are the file's 10 or 12 bits shifted up (libvips), so a code value
// over 65535 is the signal.
func (c cicp) toneCurve() vips.ToneCurve {
	return func(peakCode uint16) ([]float32, [9]float64, []byte) {
		peak := c.displayLight(float64(peakCode) / 65535)
		white := min(max(peak, hdrWhiteMin), hdrWhiteMax)
		lut := make([]float32, 65536)
		for v := range lut {
			lut[v] = float32(rollOff(c.displayLight(float64(v)/65535)/white, peak/white))
		}
		oetf := make([]byte, 65536)
		for v := range oetf {
			oetf[v] = byte(math.Round(255 * srgbOETF(float64(v)/65535)))
		}
		return lut, c.toBT709(), oetf
	}
}

// hdrStill returns the code points of a HEIF or AVIF still (format as ImageResult names it) whose
// primary picture is tagged PQ or HLG, nil for anything else: animations (their frames are decoded
// as they are), and pictures other than RGB or RGBA.
func hdrStill(path, format string, h vips.Header, animate bool) *cicp {
	if (format != "heif" && format != "avif") || animate || (h.Bands != 3 && h.Bands != 4) {
		return nil
	}
	p, ok := readHEIFPrimary(path)
	if !ok || p.nclx == nil || p.nclx.hdr() == "" {
		return nil
	}
	return p.nclx
}
