package vips

// #include "shim.h"
import "C"

import (
	"fmt"
	"image"
	"runtime"
	"unsafe"
)

// SmallRGBA returns the image's first frame shrunk to fit size × size (never enlarged) as 8-bit sRGB
// with straight alpha: the small copy the asset facts are computed from (package facts), made from
// the decoded picture in memory, so it costs a resize of an image already small, not a decode.
func (im *Image) SmallRGBA(size int) (*image.NRGBA, error) {
	var (
		buf  unsafe.Pointer
		n    C.size_t
		w, h C.int
	)
	err := run("making a small copy", "", func() bool {
		return C.mw_rgba_small(im.p, C.int(size), &buf, &n, &w, &h) == 0
	})
	runtime.KeepAlive(im)
	if err != nil {
		return nil, err
	}
	defer C.mw_gfree(buf)
	if int(n) != int(w)*int(h)*4 {
		return nil, fmt.Errorf("making a small copy: %d bytes for %d×%d RGBA", n, w, h)
	}
	img := image.NewNRGBA(image.Rect(0, 0, int(w), int(h)))
	copy(img.Pix, unsafe.Slice((*byte)(buf), int(n)))
	return img, nil
}
