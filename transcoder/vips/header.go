package vips

// #include "shim.h"
import "C"

import (
	"fmt"
	"strings"
	"unsafe"
)

// Header is what a file's header says, read without decoding pixels.
type Header struct {
	Loader      string // libvips loader nickname, e.g. "jpegload"
	Width       int
	Height      int // of one page
	Pages       int // pages (frames) in the file, 1 for still images
	Bands       int
	HasAlpha    bool
	Orientation int // EXIF orientation, 1 when absent
	// HasICC says the file embeds an ICC colour profile (Thumbnail transforms from it to sRGB).
	HasICC bool
}

// ReadHeader reads path's header. It returns ErrUnknownFormat when no allowed loader accepts the
// file (wrapped with the blocked loader's name when only a blocked one does), and an *Error when the
// allowed loader fails on it.
func ReadHeader(path string) (Header, error) {
	if err := Init(); err != nil {
		return Header{}, err
	}
	if err := checkPath(path); err != nil {
		return Header{}, err
	}
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))

	var h C.mw_header
	var rc C.int
	err := run("reading the header", path, func() bool {
		h = C.mw_header{}
		rc = C.mw_read_header(cpath, &h)
		return rc >= 0
	})
	if err != nil {
		return Header{}, err
	}
	switch rc {
	case 0:
	case 1:
		// libvips' "... is not a known file format" names the path; ours says which formats are allowed.
		C.mw_error_clear()
		return Header{}, ErrUnknownFormat
	default:
		return Header{}, fmt.Errorf("%w (it looks like %s)", ErrUnknownFormat,
			strings.TrimSuffix(C.GoString(&h.loader[0]), "load"))
	}
	return Header{
		Loader:      C.GoString(&h.loader[0]),
		Width:       int(h.width),
		Height:      int(h.height),
		Pages:       int(h.pages),
		Bands:       int(h.bands),
		HasAlpha:    h.has_alpha != 0,
		Orientation: int(h.orientation),
		HasICC:      h.has_icc != 0,
	}, nil
}

// checkPath refuses paths libvips would not take literally: a name ending in "[...]" is read as
// "file[load options]".
func checkPath(path string) error {
	if strings.ContainsAny(path, "[]") || strings.ContainsRune(path, 0) {
		return fmt.Errorf("path %q contains characters libvips would interpret", path)
	}
	return nil
}
