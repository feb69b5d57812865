package vips

// #include "shim.h"
import "C"

import (
	"fmt"
	"runtime"
	"unsafe"
)

// ToneCurve is how ThumbnailToneMapped brings an HDR picture to SDR, given the largest code value of
// its colour bands (peak, 0..65535): LUT maps each 16-bit code value to linear light with SDR white
// at 1 (65536 entries), Matrix (row-major) takes that light's primaries to BT.709/sRGB, and OETF maps
// linear light quantised to 16 bits (0..1 as 0..65535) to 8-bit sRGB (65536 entries).
type ToneCurve func(peak uint16) (lut []float32, matrix [9]float64, oetf []byte)

// ThumbnailToneMapped decodes the first picture of the HEIF/AVIF file at path at 16 bits a sample,
// tone-maps it to 8-bit sRGB with the tables curve makes from its peak, and shrinks it (never
// enlarged) to fit width×height into memory, as ThumbnailBox does for an SDR picture: upright, alpha
// kept unless fully opaque, metadata stripped. libvips 8.14 reads only ICC profiles, so the transfer
// and primaries of an HDR HEIF (its nclx property) are the caller's to name.
func ThumbnailToneMapped(path string, width, height int, curve ToneCurve) (*Image, error) {
	if err := Init(); err != nil {
		return nil, err
	}
	if err := checkPath(path); err != nil {
		return nil, err
	}
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var (
		p    *C.VipsImage
		peak C.double
	)
	if err := run("decoding", path, func() bool {
		p = C.mw_hdr_open(cpath, &peak)
		return p != nil
	}); err != nil {
		return nil, err
	}
	src := newImage(p)
	defer src.Close()
	lut, matrix, oetf := curve(uint16(min(max(float64(peak), 0), 65535)))
	if len(lut) != 65536 || len(oetf) != 65536 {
		return nil, fmt.Errorf("tone-mapping: tables of %d and %d entries, want 65536", len(lut), len(oetf))
	}
	// The tables cross into C memory: cgo forbids passing Go memory that C keeps, and libvips copies
	// them only into images it builds.
	clut := C.malloc(C.size_t(len(lut) * 4))
	defer C.free(clut)
	copy(unsafe.Slice((*float32)(clut), len(lut)), lut)
	coetf := C.malloc(C.size_t(len(oetf)))
	defer C.free(coetf)
	copy(unsafe.Slice((*byte)(coetf), len(oetf)), oetf)
	var cm [9]C.double
	for i, v := range matrix {
		cm[i] = C.double(v)
	}
	w, h := side(width), side(height)
	var out *C.VipsImage
	err := run("decoding", path, func() bool {
		out = C.mw_hdr_thumbnail(src.p, (*C.float)(clut), &cm[0], (*C.uchar)(coetf), w, h)
		return out != nil
	})
	runtime.KeepAlive(src)
	if err != nil {
		return nil, err
	}
	return newImage(out), nil
}
