package vips

// #include "shim.h"
import "C"

import (
	"runtime"
	"unsafe"
)

// The encoders beside WebP (image.go). Each writes the picture and nothing else: the source's
// metadata was removed when it was decoded (mw_strip), and each saver is told to strip what it
// would add of its own.

// JPEG encodes im as a baseline JPEG of quality q (1-100) with optimised Huffman tables, alpha
// flattened onto white. im must be a single frame.
func (im *Image) JPEG(q int) ([]byte, error) {
	return im.encode("encoding jpeg", func(buf *unsafe.Pointer, n *C.size_t) bool {
		return C.mw_jpeg(im.p, C.int(q), buf, n) == 0
	})
}

// PNG encodes im as a PNG, lossless, alpha kept. im must be a single frame.
func (im *Image) PNG() ([]byte, error) {
	return im.encode("encoding png", func(buf *unsafe.Pointer, n *C.size_t) bool {
		return C.mw_png(im.p, buf, n) == 0
	})
}

// AVIF encodes im as a still AVIF of quality q (1-100, libheif's scale: 50 is libvips' default)
// with the AV1 encoder at speed (0, slowest and smallest, to 9, fastest) on Concurrency threads,
// 8-bit 4:2:0, alpha kept. im must be a single frame.
func (im *Image) AVIF(q, speed int) ([]byte, error) {
	return im.encode("encoding avif", func(buf *unsafe.Pointer, n *C.size_t) bool {
		return C.mw_avif(im.p, C.int(q), C.int(speed), C.int(Concurrency), buf, n) == 0
	})
}

// encode runs an encoder that leaves a g_malloc'ed buffer, and copies the buffer into Go memory.
func (im *Image) encode(what string, enc func(*unsafe.Pointer, *C.size_t) bool) ([]byte, error) {
	var buf unsafe.Pointer
	var n C.size_t
	err := run(what, "", func() bool { return enc(&buf, &n) })
	runtime.KeepAlive(im)
	if err != nil {
		return nil, err
	}
	defer C.mw_gfree(buf)
	return C.GoBytes(buf, C.int(n)), nil
}
