package transcoder

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// A recipe is the list of variants one image becomes: each an ImageVariantSpec, named, sized, fitted
// and encoded on its own, all made from one decode of the source (Images.TransformRecipe).
// ImageConfig.DefaultRecipe is today's high / medium / low WebP set.

// Fit says how a variant's picture fills its box.
type Fit string

const (
	// FitInside shrinks the picture to fit within the box, keeping its aspect ratio; a side of the
	// box left at 0 does not bound it. The picture is never enlarged: a source smaller than the box
	// keeps its size.
	FitInside Fit = "inside"
	// FitCover fills the box exactly: the picture is shrunk until it covers the box, and what
	// overhangs is cut off (Crop chooses which part stays). It is never enlarged: a source smaller
	// than the box gives the largest cut of the box's aspect ratio at the source's own resolution
	// (a 1200×630 box on an 800×600 source gives 800×420).
	FitCover Fit = "cover"
)

// Crop says which part of the picture a FitCover variant keeps.
type Crop string

const (
	// CropAttention keeps what draws the eye: edges, skin tones and saturated colour (libvips'
	// smart crop, VIPS_INTERESTING_ATTENTION). The default.
	CropAttention Crop = "attention"
	// CropEntropy keeps the part with the most detail.
	CropEntropy Crop = "entropy"
	// CropCentre keeps the middle.
	CropCentre Crop = "centre"
)

// ImageFormat is the encoding of a variant.
//
// PNG is written for any source, opaque or not: a variant asked for as PNG is a PNG file, because
// whoever asked for it (an email client, an icon, an editor) needs that format, and neither
// refusing opaque photos (a recipe that fails on every photo) nor writing another format under the
// png name would be what they asked for. It is lossless (Quality must stay 0) and keeps alpha; for
// photos it is several times the size of the lossy formats, so recipes use it for graphics.
type ImageFormat string

const (
	// FormatWebP is lossy WebP, animated where the source is and the variant asks (Animated).
	FormatWebP ImageFormat = "webp"
	// FormatAVIF is a still AVIF (AV1, 8-bit 4:2:0, alpha kept).
	FormatAVIF ImageFormat = "avif"
	// FormatJPEG is a baseline JPEG; alpha is flattened onto white.
	FormatJPEG ImageFormat = "jpeg"
	// FormatPNG is a lossless PNG with alpha (see ImageFormat for why it is written for any source).
	FormatPNG ImageFormat = "png"
)

// Ext is the file name extension of the format, without the dot: webp, avif, jpg or png.
func (f ImageFormat) Ext() string {
	if f == FormatJPEG {
		return "jpg"
	}
	return string(f)
}

// ContentType is the format's media type, e.g. "image/webp".
func (f ImageFormat) ContentType() string { return "image/" + string(f) }

// DefaultQuality is the quality a variant of the format gets when its spec leaves Quality at 0:
// the defaults of the libraries that encode it (libvips' WebP and JPEG 75, libheif's AVIF 50, on its
// own scale, which lands near WebP 75 in size and looks); 0 for lossless PNG.
func (f ImageFormat) DefaultQuality() int {
	switch f {
	case FormatWebP, FormatJPEG:
		return 75
	case FormatAVIF:
		return 50
	}
	return 0
}

// ImageVariantSpec is one variant of a recipe.
type ImageVariantSpec struct {
	// Name names the variant: the response's "quality" and the file's name (<name>.<ext>). It is
	// [a-z0-9][a-z0-9_-]{0,31}, so it can never be the job's other files ("input", ffmpeg's
	// intermediate, which has a dot in its name).
	Name string
	// Width and Height are the box, in pixels: 0 leaves a side free (at least one must be set; both
	// for FitCover), at most 16383 (WebP's limit, and far beyond any screen).
	Width, Height int
	// Fit is how the picture fills the box; "" is FitInside.
	Fit Fit
	// Crop is the part a FitCover variant keeps; "" is CropAttention. Only for FitCover.
	Crop Crop
	// Format is the encoding; "" is FormatWebP.
	Format ImageFormat
	// Quality is the encoder's quality, 1-100; 0 is the format's default (DefaultQuality). PNG is
	// lossless and takes none.
	Quality int
	// Animated keeps an animated source (GIF, WebP, APNG, AVIF sequence) animated in this variant,
	// within the animation budget (ImageConfig.AnimationMaxFrames, AnimationMaxPixels). Only WebP
	// variants of FitInside can be: AVIF, JPEG and PNG variants, and FitCover ones, show the first
	// frame, as does a variant that does not ask, and the result carries a warning saying so.
	Animated bool
}

// maxSide is the largest box side: WebP's limit per side.
const maxSide = 16383

// maxVariants bounds a recipe: every variant is an encode of its own, and the job's time and the
// response's size grow with them.
const maxVariants = 16

var variantName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,31}$`)

// Validate reports the first field of s that is out of range; errors name the field as a recipe
// spells it (name, width, height, fit, crop, format, quality, animated).
func (s ImageVariantSpec) Validate() error {
	if !variantName.MatchString(s.Name) {
		return fmt.Errorf("name %q must be 1-32 characters of a-z, 0-9, _ and -, starting with a letter or digit", s.Name)
	}
	for _, d := range []struct {
		field string
		n     int
	}{{"width", s.Width}, {"height", s.Height}} {
		if d.n < 0 || d.n > maxSide {
			return fmt.Errorf("%s must be 0-%d pixels (0: free), got %d", d.field, maxSide, d.n)
		}
	}
	if s.Width == 0 && s.Height == 0 {
		return errors.New("width and height are both 0: set at least one")
	}
	switch s.fit() {
	case FitInside:
		if s.Crop != "" {
			return fmt.Errorf("crop %q needs fit %q (fit %q never crops)", s.Crop, FitCover, FitInside)
		}
	case FitCover:
		if s.Width == 0 || s.Height == 0 {
			return fmt.Errorf("fit %q needs both width and height, got %d×%d", FitCover, s.Width, s.Height)
		}
		switch s.crop() {
		case CropAttention, CropEntropy, CropCentre:
		default:
			return fmt.Errorf("crop must be %q, %q or %q, got %q", CropAttention, CropEntropy, CropCentre, s.Crop)
		}
	default:
		return fmt.Errorf("fit must be %q or %q, got %q", FitInside, FitCover, s.Fit)
	}
	switch s.format() {
	case FormatWebP, FormatAVIF, FormatJPEG:
		if s.Quality < 0 || s.Quality > 100 {
			return fmt.Errorf("quality must be 1-100 (0: the format's default), got %d", s.Quality)
		}
	case FormatPNG:
		if s.Quality != 0 {
			return fmt.Errorf("quality must be 0 for format %q, which is lossless, got %d", FormatPNG, s.Quality)
		}
	default:
		return fmt.Errorf("format must be %q, %q, %q or %q, got %q", FormatWebP, FormatAVIF, FormatJPEG, FormatPNG, s.Format)
	}
	return nil
}

// ValidateImageRecipe reports the first problem of a recipe: none or more than 16 variants, a name
// used twice, or a variant that is not valid (named by its position and name).
func ValidateImageRecipe(specs []ImageVariantSpec) error {
	if len(specs) == 0 {
		return errors.New("recipe has no variants")
	}
	if len(specs) > maxVariants {
		return fmt.Errorf("recipe has %d variants, at most %d", len(specs), maxVariants)
	}
	seen := make(map[string]int, len(specs))
	for i, s := range specs {
		if err := s.Validate(); err != nil {
			return fmt.Errorf("variant %d (%q): %w", i+1, s.Name, err)
		}
		if j, ok := seen[s.Name]; ok {
			return fmt.Errorf("variant %d: name %q is also variant %d's; names must be unique", i+1, s.Name, j+1)
		}
		seen[s.Name] = i
	}
	return nil
}

// DefaultRecipe is the recipe Images.Transform makes: high, medium and low, each a WebP fitting
// inside a square of c.High, c.Medium and c.Low pixels at c.QualityHigh, c.QualityMedium and
// c.QualityLow, animations kept.
func (c ImageConfig) DefaultRecipe() []ImageVariantSpec {
	return []ImageVariantSpec{
		{Name: "high", Width: c.High, Height: c.High, Fit: FitInside, Format: FormatWebP, Quality: c.QualityHigh, Animated: true},
		{Name: "medium", Width: c.Medium, Height: c.Medium, Fit: FitInside, Format: FormatWebP, Quality: c.QualityMedium, Animated: true},
		{Name: "low", Width: c.Low, Height: c.Low, Fit: FitInside, Format: FormatWebP, Quality: c.QualityLow, Animated: true},
	}
}

func (s ImageVariantSpec) fit() Fit {
	if s.Fit == "" {
		return FitInside
	}
	return s.Fit
}

func (s ImageVariantSpec) crop() Crop {
	if s.Crop == "" {
		return CropAttention
	}
	return s.Crop
}

func (s ImageVariantSpec) format() ImageFormat {
	if s.Format == "" {
		return FormatWebP
	}
	return s.Format
}

func (s ImageVariantSpec) quality() int {
	if s.Quality == 0 {
		return s.format().DefaultQuality()
	}
	return s.Quality
}

// keepsAnimation reports whether the variant can be an animation: an animated WebP that fits inside
// its box. A cover crop of an animation would have to find one crop for every frame, and the other
// encoders write still images here (libvips 8.14 writes no AVIF sequences).
func (s ImageVariantSpec) keepsAnimation() bool {
	return s.Animated && s.format() == FormatWebP && s.fit() == FitInside
}

// label names a variant in errors: "high webp", "avatar avif".
func (s ImageVariantSpec) label() string { return s.Name + " " + string(s.format()) }

// stillReason says why an animated source gives variant s its first frame only, for warnings.
func (s ImageVariantSpec) stillReason() string {
	switch {
	case !s.Animated:
		return "the recipe asks for a still image"
	case s.format() != FormatWebP:
		return strings.ToUpper(string(s.format())) + " variants are still images"
	default:
		return "a cover crop is cut from the first frame"
	}
}

// avifSpeed is the AV1 encoder's speed, libaom's cpu-used from 0 (slowest) to 9; 8 is libvips'
// heifsave effort 1 (effort = 9 - speed). It runs on one thread (vips.Concurrency), like every image
// job. BenchmarkAVIFvsWebP, on the 2048 px variant of a noisy 12 MP JPEG (testenv.MakeNoisyJPEG),
// AVIF at quality 50 against the high WebP (Q 82, effort 2), CPU time per encode on this project's
// 2-core EPYC test machine over two runs: speed 7 cost 0.63-0.67 s, 2.8-3.0× the WebP's
// 0.21-0.23 s; speed 8 0.28-0.31 s, 1.2-1.4×; speed 9 0.19-0.21 s, 0.9×, with files 27 % larger
// than speed 8's (57 against 45 KiB). On ffmpeg's clean testsrc2 picture, which WebP encodes in
// half the time, speed 8 is 2.2× and speed 9 1.2×. Speed 8 is the slowest within about twice a
// WebP's cost. (libvips' own default, effort 4, is speed 5: about 18 s of CPU for a like picture
// with the vips CLI.)
const avifSpeed = 8
