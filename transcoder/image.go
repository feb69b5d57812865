package transcoder

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sync/semaphore"

	"github.com/mediaworker/mediaworker/facts"
	"github.com/mediaworker/mediaworker/transcoder/vips"
)

// ImageConfig sets the limits and output of image transforms.
type ImageConfig struct {
	// MaxPixels caps width × height × pages as declared by the file's header; larger inputs are
	// refused before any pixel is decoded (libvips itself never checks decoded size).
	MaxPixels int64
	// MaxFrames caps the pages (animation frames) a file may declare; files declaring more are
	// refused from the header.
	MaxFrames int
	// MaxMetadataBytes caps the metadata a file may carry (EXIF, XMP, ICC profiles, comments and
	// text: JPEG APPn/COM segments, PNG ancillary chunks, WebP and GIF metadata chunks and extensions,
	// HEIF/AVIF metadata items and profiles, TIFF tags). Decoders hold it all in memory whatever the
	// picture's size, so a file carrying more is refused from a walk over its structure before any
	// decoder reads it (image_metadata.go). A camera's JPEG carries up to about 1 MB (MakerNotes and a
	// thumbnail), a print profile a few MB.
	MaxMetadataBytes int64
	// AnimationMaxFrames and AnimationMaxPixels are the budget of an animated GIF or WebP kept as
	// an animation: at most that many frames, and at most that many pixels over all frames of the
	// high variant (its frame size × frames; it is held decoded in memory, 4 bytes a pixel).
	// Beyond either, the variants show the first frame and the result carries a warning.
	AnimationMaxFrames int
	AnimationMaxPixels int64
	// High, Medium and Low are the long edges of the three variants. Images are never enlarged, so a
	// small source gives variants of its own size.
	High, Medium, Low int
	// QualityHigh, QualityMedium and QualityLow are the WebP qualities (1-100) of the variants.
	QualityHigh, QualityMedium, QualityLow int
	// Effort is libwebp's CPU effort, 0 (fastest) to 6 (smallest files).
	Effort int
	// HEIFDecodePixels caps the pixels of HEIC/AVIF images being decoded at once, over all jobs.
	// libheif has no shrink-on-load: it decodes the whole picture into buffers of its own, about
	// 7 bytes per pixel (two 24 MP HEICs at once peaked at 528 MiB). Within the cap, decodes run side
	// by side (two 12 MP phone photos at the default); an image above it decodes alone.
	HEIFDecodePixels int64
}

// DefaultImageConfig returns the defaults: 50 MP, 1000 frames, 16 MiB of metadata, animations of up
// to 300 frames and 25 MP over the frames of the high variant (100 MiB decoded), 2048/1024/480 px at
// Q 82/78/72, effort 2 (measured 1.5–1.6× faster than 4 with 1.2 % smaller files on a 12 MP JPEG: bench/RESULTS.md).
func DefaultImageConfig() ImageConfig {
	return ImageConfig{
		MaxPixels:        50_000_000,
		MaxFrames:        1000,
		MaxMetadataBytes: 16 << 20,

		AnimationMaxFrames: 300,
		AnimationMaxPixels: 25_000_000,

		High:          2048,
		Medium:        1024,
		Low:           480,
		QualityHigh:   82,
		QualityMedium: 78,
		QualityLow:    72,
		Effort:        2,

		HEIFDecodePixels: 25_000_000,
	}
}

// Validate reports the first setting that is out of range.
func (c ImageConfig) Validate() error {
	switch {
	case c.MaxPixels <= 0:
		return fmt.Errorf("image max pixels must be positive, got %d", c.MaxPixels)
	case c.MaxFrames <= 0:
		return fmt.Errorf("image max frames must be positive, got %d", c.MaxFrames)
	case c.MaxMetadataBytes <= 0:
		return fmt.Errorf("image max metadata bytes must be positive, got %d", c.MaxMetadataBytes)
	case c.Low <= 0 || c.Medium < c.Low || c.High < c.Medium:
		return fmt.Errorf("image sizes must satisfy high >= medium >= low > 0, got %d/%d/%d",
			c.High, c.Medium, c.Low)
	case c.High > 16383:
		// WebP's own limit is 16383 per side.
		return fmt.Errorf("image high size must be at most 16383, got %d", c.High)
	}
	for _, q := range []int{c.QualityHigh, c.QualityMedium, c.QualityLow} {
		if q < 1 || q > 100 {
			return fmt.Errorf("webp quality must be 1-100, got %d", q)
		}
	}
	if c.AnimationMaxFrames < 1 {
		return fmt.Errorf("animation max frames must be at least 1 (1 keeps only the first frame), got %d", c.AnimationMaxFrames)
	}
	if c.AnimationMaxPixels <= 0 {
		return fmt.Errorf("animation max pixels must be positive, got %d", c.AnimationMaxPixels)
	}
	if c.HEIFDecodePixels <= 0 {
		return fmt.Errorf("heif decode pixels must be positive, got %d", c.HEIFDecodePixels)
	}
	if c.Effort < 0 || c.Effort > 6 {
		return fmt.Errorf("webp effort must be 0-6, got %d", c.Effort)
	}
	return nil
}

// ImageVariant is one written variant.
type ImageVariant struct {
	Quality       string      // the variant's name (ImageVariantSpec.Name): "high", "medium", "low" by default
	Format        ImageFormat // webp, avif, jpeg or png
	Path          string      // outDir/<quality>.<Format.Ext()>
	Width, Height int         // of a frame
	Frames        int         // more than 1 for an animation
	Size          int64       // bytes
}

// ImageResult describes the source and the variants written from it.
type ImageResult struct {
	Width, Height int    // of the source, upright (after EXIF rotation)
	Format        string // jpeg, png, webp, gif, heif, avif or tiff
	HasAlpha      bool
	// Frames is the number of frames kept: more than 1 when an animation was kept (in the variants
	// whose Frames say so: all of them in the default recipe).
	Frames   int
	Variants []ImageVariant // in the recipe's order: high, medium, low by default
	// Facts are the picture's placeholder, colours and perceptual hash (package facts), from a small
	// copy of the decoded picture; nil if that copy could not be made (they are extras: the variants
	// do not depend on them).
	Facts *facts.Facts
	// HDR names the transfer of an HDR still ("pq" or "hlg": a HEIF or AVIF whose nclx colour
	// property says so) that was tone-mapped to SDR sRGB; "" for every other image.
	HDR string
	// Warnings say what the variants lack that the source had (an animation beyond the budget,
	// shown as its first frame), for the response's warnings.
	Warnings []string
}

// Images transforms images. It is safe for concurrent use; each call works on its own images.
type Images struct {
	cfg  ImageConfig
	heif *semaphore.Weighted // pixels of HEIF decodes in flight, at most cfg.HEIFDecodePixels
	// ffmpeg decodes the animations libvips cannot (image_ffmpeg.go); nil: it is not used.
	ffmpeg *Videos
}

// NewImages checks cfg. libvips is loaded and started by the first Transform (see package vips for
// why), or by Preload.
func NewImages(cfg ImageConfig) (*Images, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("validating image config: %w", err)
	}
	return &Images{cfg: cfg, heif: semaphore.NewWeighted(cfg.HEIFDecodePixels)}, nil
}

// LibvipsVersion loads libvips if need be and returns its version, e.g. "8.14.1".
func LibvipsVersion() (string, error) { return vips.Version() }

// Preload loads and starts libvips now rather than at the first image (once per process).
func (im *Images) Preload() error {
	if err := vips.Init(); err != nil {
		return internal("starting libvips", err)
	}
	return nil
}

// Transform writes outDir/high.webp, outDir/medium.webp and outDir/low.webp from srcPath: it is
// TransformRecipe with the default recipe (ImageConfig.DefaultRecipe).
func (im *Images) Transform(ctx context.Context, srcPath, outDir string) (ImageResult, error) {
	return im.TransformRecipe(ctx, srcPath, outDir, im.cfg.DefaultRecipe())
}

// TransformRecipe writes one file per variant of specs from srcPath, outDir/<name>.<ext>, and
// returns them in the order of specs; no specs (nil) are the default recipe. An invalid recipe is
// an internal error (the configuration's fault, not the upload's).
//
// The source is decoded once, shrunk on load straight to the size the largest variant needs
// (decodeBox), and every variant is made from that picture in memory: a variant fitting inside a
// box is resized from the smallest picture made so far whose box contains its own (the default
// recipe chains high → medium → low), a cover variant is scaled and cropped from the smallest one
// that covers its box. Decoding for each variant would decode the file up to once per variant (a
// 12 MP JPEG needs a full decode for both 2048 and 1024 px, since libjpeg only pre-shrinks by a
// factor when 4× or more is left over), for no visible gain: each step is a 2× or larger Lanczos
// reduction of an image already far above the next size. Decoding once also means a corrupt file
// fails in one place, the decode, which is what lets failures be classified by step: header and
// decode failures are the input's fault; resize, crop, encode and write failures are ours.
//
// libvips calls cannot be interrupted, so ctx is checked between steps.
func (im *Images) TransformRecipe(ctx context.Context, srcPath, outDir string, specs []ImageVariantSpec) (ImageResult, error) {
	if len(specs) == 0 {
		specs = im.cfg.DefaultRecipe()
	}
	if err := ValidateImageRecipe(specs); err != nil {
		return ImageResult{}, internal("validating the image recipe", err)
	}
	if err := ctx.Err(); err != nil {
		return ImageResult{}, fmt.Errorf("transforming image: %w", err)
	}
	if st, err := os.Stat(srcPath); err != nil {
		return ImageResult{}, internal("opening image", err)
	} else if !st.Mode().IsRegular() {
		return ImageResult{}, internal("opening image", fmt.Errorf("%s is not a regular file", srcPath))
	}

	if err := im.Preload(); err != nil { // once; a broken install is our fault, not the image's
		return ImageResult{}, err
	}
	sn := sniffImage(srcPath)
	// Before any decoder, libvips' or ffmpeg's, reads the file: they hold its metadata in memory.
	if err := im.checkMetadata(srcPath, sn); err != nil {
		return ImageResult{}, err
	}
	if im.viaFFmpeg(sn) {
		return im.transformAnimation(ctx, srcPath, outDir, sn, specs)
	}
	res, err := im.transformFile(ctx, srcPath, outDir, sn, specs)
	if err == nil && sn.Format == "GIF" {
		if w := gifCutWarning(srcPath); w != "" { // image_gif_cut.go
			res.Warnings = append(res.Warnings, w)
		}
	}
	return res, err
}

// transformFile is TransformRecipe on a file libvips reads, sniffed as sn.
func (im *Images) transformFile(ctx context.Context, srcPath, outDir string, sn sniffedImage, specs []ImageVariantSpec) (ImageResult, error) {
	hdr, err := vips.ReadHeader(srcPath)
	if err != nil {
		if e := im.decoderSizeRefusal(err, sn); e != nil {
			return ImageResult{}, e
		}
		if sn.Format == "HEIF" || sn.Format == "AVIF" {
			// Detection refuses these from the file's head; a meta box beyond it is read here.
			if p, ok := readHEIFPrimary(srcPath); ok && p.unsupported() != "" {
				return ImageResult{}, badInputSaid("reading image header: "+p.unsupported(), err)
			}
		}
		return ImageResult{}, imageInputError("reading image header", srcPath, sn, "", err)
	}
	if err := im.checkLimits(hdr); err != nil {
		return ImageResult{}, err
	}
	res := ImageResult{Width: hdr.Width, Height: hdr.Height, Format: formatName(hdr.Loader)}
	if res.Format == "heif" && sn.Format == "AVIF" {
		res.Format = "avif" // libvips reads both with its heif loader (AVIF through libheif's AV1 decoder)
	}
	if hdr.Orientation >= 5 && hdr.Orientation <= 8 { // 90° or 270° turns
		res.Width, res.Height = hdr.Height, hdr.Width
	}

	if err := ctx.Err(); err != nil {
		return ImageResult{}, fmt.Errorf("transforming image: %w", err)
	}
	releaseHEIF := func() {}
	if res.Format == "heif" || res.Format == "avif" {
		// Held for the decode only: what follows works on the shrunk copy in memory.
		w := min(int64(hdr.Width)*int64(hdr.Height), im.cfg.HEIFDecodePixels)
		if err := im.heif.Acquire(ctx, w); err != nil {
			return ImageResult{}, fmt.Errorf("transforming image: %w", err)
		}
		var once sync.Once
		releaseHEIF = func() { once.Do(func() { im.heif.Release(w) }) }
		defer releaseHEIF()
	}
	defer vips.Trim() // after the images below are released

	// This job holds a core until it ends; writeVariants borrows the idle ones.
	defer vips.Enter()()
	decode := decodeBox(specs, res.Width, res.Height)
	animate, warnings := im.animationPlan(hdr, res.Format, sn, specs, decode, res.Width, res.Height)
	res.Warnings = append(res.Warnings, warnings...)
	var decoded *vips.Image
	if c := hdrStill(srcPath, res.Format, hdr, animate); c != nil {
		// Tone-mapped to SDR sRGB (image_hdr.go), facts and all: libvips would show its code values as sRGB.
		decoded, err = vips.ThumbnailToneMapped(srcPath, decode.w, decode.h, c.toneCurve())
		res.HDR = c.hdr()
	} else {
		decoded, err = vips.ThumbnailBox(srcPath, decode.w, decode.h, animate, hdr.HasICC)
	}
	releaseHEIF()
	if err != nil {
		return ImageResult{}, imageInputError("decoding image", srcPath, sn, hdr.Loader, err)
	}
	res.HasAlpha = decoded.HasAlpha()
	res.Frames = decoded.Frames()

	made := newPictures(decoded, decode, animate)
	defer made.close()
	imgs := make([]*vips.Image, len(specs)) // made owns them
	for i, s := range specs {
		if err := ctx.Err(); err != nil {
			return ImageResult{}, fmt.Errorf("transforming image: %w", err)
		}
		if imgs[i], err = made.variant(s, animate && s.keepsAnimation(), res.Width, res.Height); err != nil {
			return ImageResult{}, err
		}
	}
	vs, err := im.writeVariants(ctx, imgs, specs, outDir)
	if err != nil {
		return ImageResult{}, err
	}
	res.Variants = append(res.Variants, vs...)
	res.Facts = assetFacts(made.forFacts())
	return res, nil
}

// factsSide is the long side of the copy the facts are computed from: ThumbHash's own limit.
const factsSide = 100

// assetFacts computes the facts of a decoded picture (its first frame), nil when it cannot.
func assetFacts(decoded *vips.Image) *facts.Facts {
	small, err := decoded.SmallRGBA(factsSide)
	if err != nil {
		return nil
	}
	f, err := facts.FromImage(small)
	if err != nil {
		return nil
	}
	return &f
}

// checkLimits refuses inputs whose header declares more frames or pixels than allowed.
func (im *Images) checkLimits(h vips.Header) error {
	if h.Width <= 0 || h.Height <= 0 || h.Pages <= 0 {
		return badInput(fmt.Sprintf("image header declares %d×%d pixels and %d pages", h.Width, h.Height, h.Pages), nil)
	}
	if h.Pages > im.cfg.MaxFrames {
		return badInput(fmt.Sprintf("image has %d frames, limit is %d", h.Pages, im.cfg.MaxFrames), nil)
	}
	pixels := int64(h.Width) * int64(h.Height) * int64(h.Pages)
	if pixels > im.cfg.MaxPixels {
		dims := fmt.Sprintf("%d×%d", h.Width, h.Height)
		if h.Pages > 1 {
			dims += fmt.Sprintf(" × %d frames", h.Pages)
		}
		return badInput(fmt.Sprintf("image is %s (%s MP), limit is %s MP",
			dims, megapixels(pixels), megapixels(im.cfg.MaxPixels)), nil)
	}
	return nil
}

// writeVariants encodes the variants, each still on a core no other image job holds when there is one
// (vips.Borrow: a job alone on the machine encodes its 2048 px variant beside the smaller ones), else
// one after another on the job's own. The job's own goroutine always encodes the last, so it never
// idles while a borrowed core works. Animations stay sequential: their encoder state is the largest
// a job holds and the memory estimate counts one at a time.
func (im *Images) writeVariants(ctx context.Context, imgs []*vips.Image, specs []ImageVariantSpec, outDir string) ([]ImageVariant, error) {
	vs := make([]ImageVariant, len(specs))
	errs := make([]error, len(specs))
	var wg sync.WaitGroup
	for i, s := range specs {
		if err := ctx.Err(); err != nil {
			errs[i] = fmt.Errorf("transforming image: %w", err)
			break
		}
		if i < len(specs)-1 && imgs[i].Frames() == 1 && vips.Borrow() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer vips.Return()
				vs[i], errs[i] = im.writeVariant(imgs[i], s, outDir)
			}()
			continue
		}
		vs[i], errs[i] = im.writeVariant(imgs[i], s, outDir)
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return vs, nil
}

// writeVariant encodes img as s asks into outDir/<name>.<ext>.
func (im *Images) writeVariant(img *vips.Image, s ImageVariantSpec, outDir string) (ImageVariant, error) {
	var data []byte
	var err error
	switch f := s.format(); f {
	case FormatWebP:
		data, err = img.WebP(s.quality(), im.cfg.Effort)
	case FormatAVIF:
		data, err = img.AVIF(s.quality(), avifSpeed)
	case FormatJPEG:
		data, err = img.JPEG(s.quality())
	case FormatPNG:
		data, err = img.PNG()
	default: // Validate refuses it
		err = fmt.Errorf("unknown format %q", f)
	}
	if err != nil {
		return ImageVariant{}, internal("encoding "+s.label(), err)
	}
	path := filepath.Join(outDir, s.Name+"."+s.format().Ext())
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return ImageVariant{}, internal("writing "+s.label(), err)
	}
	return ImageVariant{
		Quality: s.Name,
		Format:  s.format(),
		Path:    path,
		Width:   img.Width(),
		Height:  img.Height(),
		Frames:  img.Frames(),
		Size:    int64(len(data)),
	}, nil
}

// formatName turns a loader nickname ("jpegload", "heifload_source") into a format name ("jpeg").
func formatName(loader string) string {
	name, _, _ := strings.Cut(loader, "load")
	if name == "" {
		return loader
	}
	return name
}

// megapixels formats a pixel count in megapixels: whole numbers without decimals, others with one.
func megapixels(pixels int64) string {
	if pixels%1_000_000 == 0 {
		return fmt.Sprintf("%d", pixels/1_000_000)
	}
	return fmt.Sprintf("%.1f", float64(pixels)/1e6)
}
