package transcoder

import "fmt"

// HDR sources: phones record 10-bit HLG HEVC, HDR10 cameras and exports PQ (HEVC, VP9 or AV1). Played
// as if they were SDR, as browsers and most players do with an 8-bit H.264 tagged HLG or PQ (or not
// tagged at all), they look grey and washed out. The encode tone-maps them to SDR BT.709 instead:
// zimg (zscale) linearises the transfer and converts BT.2020 primaries to BT.709, the tonemap filter
// compresses highlights (mobius: linear up to the highlights, then a smooth roll-off, so a scene's
// diffuse white and colours come out as an SDR camera would record them), and the result is tagged
// BT.709 so players do not guess.
//
// Cost: about twice the CPU of an SDR encode at the same output size (3 s of 4K30 HLG HEVC to 1080p:
// 12 CPU-s against 5.5), the float conversion being done after scaling down.
//
// Measured on testsrc2 converted to HLG and to PQ with SDR white at 100 cd/m² (internal/testenv),
// 8-bit averages against the SDR pattern's luma 121 / saturation 109: untreated (what the worker made
// before) 100/38 for HLG, 96/22 for PQ; tone-mapped with hable 83/60, reinhard 102/77, mobius
// 108/83.

// Transfer characteristics, as ffprobe names them.
const (
	transferHLG = "arib-std-b67"
	transferPQ  = "smpte2084"
)

// colour is a video stream's colour description, as ffprobe names it ("" when untagged).
type colour struct {
	primaries, transfer, space, rng string
}

// hdr names the stream's HDR transfer: "hlg", "pq" or "" (SDR).
func (c colour) hdr() string {
	switch c.transfer {
	case transferHLG:
		return "hlg"
	case transferPQ:
		return "pq"
	}
	return ""
}

// tonemapNominalPeak is the luminance (cd/m²) that SDR white maps to: the reference white of BT.2408
// scaled the way zimg does for SDR displays.
const tonemapNominalPeak = 100

// colourFilters returns the filters (each after a comma) that bring the probed stream to SDR BT.709
// 8-bit: nothing for an SDR source, the tone map for an HDR one. The source's own tags are passed to
// zscale explicitly, BT.2020 assumed where a tag is missing (an HDR stream tagged only with its
// transfer), because zimg refuses to convert from an unknown colour space.
func colourFilters(p probed) string {
	if p.info.HDR == "" {
		return ""
	}
	c := p.colour
	primaries := "bt2020"
	if c.primaries != "" && c.primaries != "unknown" {
		primaries = c.primaries
	}
	matrix := "2020_ncl"
	if c.space != "" && c.space != "unknown" {
		matrix = c.space
	}
	rng := "limited"
	if c.rng == "pc" {
		rng = "full"
	}
	// One zscale pass linearises and converts the primaries (zimg orders the steps itself; the same
	// output, bit for bit, as a second pass for the primaries, which cost more CPU), tonemap works on
	// linear float RGB, and a last pass applies the BT.709 transfer and matrix.
	return fmt.Sprintf(",zscale=tin=%s:pin=%s:min=%s:rin=%s:t=linear:p=bt709:npl=%d,format=gbrpf32le,"+
		"tonemap=tonemap=mobius:desat=0,zscale=t=bt709:m=bt709:r=limited,format=yuv420p",
		c.transfer, primaries, matrix, rng, tonemapNominalPeak)
}

// colourTags returns the encoder options that tag the MP4's video as SDR BT.709 when the source was
// tone-mapped; an SDR source keeps whatever its frames say, as before.
func colourTags(p probed) []string {
	if p.info.HDR == "" {
		return nil
	}
	return []string{"-color_primaries", "bt709", "-color_trc", "bt709", "-colorspace", "bt709", "-color_range", "tv"}
}
