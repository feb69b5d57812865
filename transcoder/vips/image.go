package vips

// #include "shim.h"
import "C"

import (
	"fmt"
	"runtime"
	"unsafe"
)

// Image is a decoded image held in memory: one picture, or the frames of an animation stacked
// vertically (PageHeight each). Close releases it; Close is idempotent.
type Image struct {
	p *C.VipsImage
}

func newImage(p *C.VipsImage) *Image {
	im := &Image{p: p}
	// A safety net for a forgotten Close, not the way images are meant to be released.
	runtime.SetFinalizer(im, (*Image).Close)
	return im
}

// Thumbnail decodes the file at path into memory, shrunk (never enlarged) to fit in size×size; see
// ThumbnailBox.
func Thumbnail(path string, size int, allFrames, hasICC bool) (*Image, error) {
	return ThumbnailBox(path, size, size, allFrames, hasICC)
}

// ThumbnailBox decodes the file at path into memory, shrunk (never enlarged) to fit in
// width×height, where 0 leaves a side unbounded and the box is upright (libvips swaps it for a file
// it rotates), rotated upright from its EXIF orientation, in sRGB (because metadata, including any
// ICC profile, is stripped on save): hasICC (Header.HasICC) says the file embeds a profile to
// transform from; a file without one is taken as sRGB, as browsers take it, and its pixels keep their
// values. Alpha is kept unless it is fully opaque. Decoding stops at the first error
// (fail_on=error), which includes truncated files. With allFrames it decodes every frame of an
// animation (each shrunk to fit, delays and loop count kept); otherwise the first page only. The
// decoder shrinks while it decodes where it can (JPEG by 2, 4 or 8, WebP, HEIF's thumbnail), so a
// smaller box costs less.
func ThumbnailBox(path string, width, height int, allFrames, hasICC bool) (*Image, error) {
	if err := Init(); err != nil {
		return nil, err
	}
	if err := checkPath(path); err != nil {
		return nil, err
	}
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	all := C.int(0)
	if allFrames {
		all = 1
	}
	icc := C.int(0)
	if hasICC {
		icc = 1
	}
	w, h := side(width), side(height)
	var p *C.VipsImage
	if !allFrames { // a still's decode and resize may run on idle cores (cores.go)
		defer withThreads()()
	}
	if err := run("decoding", path, func() bool {
		p = C.mw_thumbnail_file(cpath, w, h, all, icc)
		return p != nil
	}); err != nil {
		return nil, err
	}
	return newImage(p), nil
}

// side is a box's side for libvips: 0 (unbounded) becomes the largest coordinate libvips knows.
func side(n int) C.int {
	if n <= 0 || n > C.VIPS_MAX_COORD {
		return C.VIPS_MAX_COORD
	}
	return C.int(n)
}

// Thumbnail returns a copy of im shrunk (never enlarged) to fit in size×size; every frame of an
// animation is shrunk alike.
func (im *Image) Thumbnail(size int) (*Image, error) { return im.ThumbnailBox(size, size) }

// ThumbnailBox returns a copy of im shrunk (never enlarged) to fit in width×height, 0 leaving a side
// unbounded; every frame of an animation is shrunk alike.
func (im *Image) ThumbnailBox(width, height int) (*Image, error) {
	w, h := side(width), side(height)
	var p *C.VipsImage
	err := run("resizing", "", func() bool {
		p = C.mw_thumbnail_image(im.p, w, h)
		return p != nil
	})
	runtime.KeepAlive(im)
	if err != nil {
		return nil, err
	}
	return newImage(p), nil
}

// Interesting says which part of an image a crop keeps.
type Interesting int

const (
	// InterestingCentre keeps the middle.
	InterestingCentre Interesting = iota
	// InterestingEntropy keeps the part with the most detail (Shannon entropy).
	InterestingEntropy
	// InterestingAttention keeps what draws the eye: edges, skin tones and saturated colour
	// (libvips' smart crop).
	InterestingAttention
)

// Cover returns width×height cut from im scaled to exactly scaledW×scaledH (pass im's own size to
// cut without scaling), the part kept chosen by how. The caller picks the scaled size, which must
// be at least width×height, so that the result is exactly width×height whatever the rounding.
// im must be a single frame (FirstFrame).
func (im *Image) Cover(scaledW, scaledH, width, height int, how Interesting) (*Image, error) {
	if scaledW < width || scaledH < height || width <= 0 || height <= 0 {
		return nil, fmt.Errorf("cover: cannot cut %d×%d out of %d×%d", width, height, scaledW, scaledH)
	}
	var p *C.VipsImage
	err := run("cropping", "", func() bool {
		p = C.mw_cover(im.p, C.int(scaledW), C.int(scaledH), C.int(width), C.int(height), C.int(how))
		return p != nil
	})
	runtime.KeepAlive(im)
	if err != nil {
		return nil, err
	}
	return newImage(p), nil
}

// FirstFrame returns a still copy of the first frame of an animation (of im itself, for a still
// image), without the animation's frame layout and timing.
func (im *Image) FirstFrame() (*Image, error) {
	var p *C.VipsImage
	err := run("taking the first frame", "", func() bool {
		p = C.mw_first_frame(im.p)
		return p != nil
	})
	runtime.KeepAlive(im)
	if err != nil {
		return nil, err
	}
	return newImage(p), nil
}

// Width is the image's width in pixels.
func (im *Image) Width() int { defer runtime.KeepAlive(im); return int(C.mw_width(im.p)) }

// Height is the height of one frame in pixels (of the image, for a still one).
func (im *Image) Height() int { defer runtime.KeepAlive(im); return int(C.mw_page_height(im.p)) }

// Frames is the number of frames: 1 for a still image.
func (im *Image) Frames() int { defer runtime.KeepAlive(im); return int(C.mw_frames(im.p)) }

// Bands is the number of bands (3 for RGB, 4 for RGBA, ...).
func (im *Image) Bands() int { defer runtime.KeepAlive(im); return int(C.mw_bands(im.p)) }

// HasAlpha reports whether the image has an alpha band.
func (im *Image) HasAlpha() bool { defer runtime.KeepAlive(im); return C.mw_has_alpha(im.p) != 0 }

// WebP encodes im as WebP with quality q (1-100) and effort (0-6), metadata stripped; an animation
// becomes an animated WebP with its frame delays and loop count.
func (im *Image) WebP(q, effort int) ([]byte, error) {
	var buf unsafe.Pointer
	var n C.size_t
	err := run("encoding webp", "", func() bool {
		return C.mw_webp(im.p, C.int(q), C.int(effort), &buf, &n) == 0
	})
	runtime.KeepAlive(im)
	if err != nil {
		return nil, err
	}
	defer C.mw_gfree(buf)
	data, err := stripWebPMetadata(C.GoBytes(buf, C.int(n)))
	if err != nil {
		return nil, fmt.Errorf("stripping webp metadata: %w", err)
	}
	return data, nil
}

// Close releases the pixels. It is idempotent.
func (im *Image) Close() {
	if im == nil || im.p == nil {
		return
	}
	C.mw_unref(im.p)
	im.p = nil
	runtime.SetFinalizer(im, nil)
}
