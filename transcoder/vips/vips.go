// Package vips is mediaworker's own thin binding to libvips (8.14). It is the only cgo package in the
// module and exposes just what the image transcoder needs: a header read, a shrink-on-load thumbnail of
// the first page (or of every frame of an animation) into memory, a resize, a cover crop and the
// first frame of an in-memory image, and WebP, AVIF, JPEG and PNG encodes to a buffer.
//
// libvips is set up once per process (Init) for untrusted input: every loader is blocked except
// jpeg, png, webp, gif, heif and tiff (and libvips' own "untrusted" operations stay blocked too), the
// operation cache is off, and each operation gets a small thread pool so concurrency comes from the
// number of image jobs, not from inside one job.
//
// libvips writes its temporary files (not used by the operations here for ordinary images) under
// TMPDIR, which is process-global: the worker exports its --tmp-dir as TMPDIR at start.
//
// libvips' error buffer is global (shared by all threads, guarded by a lock inside libvips), not
// per-thread, and an operation's messages may be written by its worker threads, so neither
// runtime.LockOSThread nor a per-thread buffer would tell whose message is whose. Operations therefore
// run concurrently under a shared lock and never read the buffer; one that fails is run once more
// alone, under the exclusive lock with the buffer cleared first, and the buffer then holds its own
// messages and nobody else's (errors.go). Failures are rare, so this costs a second attempt at a
// broken file, during which other jobs' libvips calls wait (at most the length of the operations in
// flight plus the repeat), and nothing for good ones; the same file always gets the same message.
//
// The C code is in shim.c (declared in shim.h) so that the Go side can be split by concept. AVIF is
// encoded by the shim through libheif itself rather than libvips' heifsave, which cannot set the
// encoder's thread count; libheif is the library libvips' heif module loads at Init.
//
// libvips is loaded with dlopen at the first Init, not linked: its 130 dependencies (poppler, librsvg,
// OpenEXR, x265, gnutls, ...) add about 30 MB of mapped libraries to a process's RSS and tens of
// milliseconds to its start, which an idle worker, or one that only ever sees videos, never needs.
// The binary links with --as-needed and the shim calls libvips and GLib only through the pointers
// mw_load fills (declared with __typeof__ of the real prototypes, so the compiler still checks every
// call), so libvips is not among the binary's NEEDED libraries; TestMain checks that it is not mapped
// before Init.
package vips

// #cgo LDFLAGS: -Wl,--as-needed -lm
// #cgo pkg-config: vips
// #include "shim.h"
import "C"

import (
	"errors"
	"fmt"
	"sync"
)

// ErrUnknownFormat is returned by ReadHeader when none of the allowed loaders recognises the file.
var ErrUnknownFormat = errors.New("not a jpeg, png, webp, gif, heif (heic, avif) or tiff image")

// Concurrency is the size of libvips' thread pool per operation, and the AV1 encoder's thread count
// (libheif's aom plugin would start 4). One keeps a job on one core, so --max-image-jobs decides how
// many cores images use; decoding and the WebP, JPEG and PNG encoders are single-threaded in their
// libraries anyway.
const Concurrency = 1

var (
	initOnce sync.Once
	initErr  error
)

// Init loads, starts and configures libvips once per process; later calls return the first result.
// The first image job calls it (see the package doc for why not start-up); it takes some tens of
// milliseconds.
func Init() error {
	initOnce.Do(func() {
		if msg := C.mw_load(); msg != nil {
			initErr = fmt.Errorf("loading libvips (%s, Debian package libvips42): %s", C.MW_LIBVIPS, C.GoString(msg))
			return
		}
		switch C.mw_init(C.int(Concurrency)) {
		case 0:
		case -2:
			initErr = fmt.Errorf("starting libvips: %s has another ABI than the headers mediaworker was built with; rebuild it", C.MW_LIBVIPS)
		default:
			initErr = fmt.Errorf("starting libvips: %w", takeError())
		}
	})
	return initErr
}

// Version is the loaded libvips' version, e.g. "8.14.1"; it loads libvips if need be.
func Version() (string, error) {
	if err := Init(); err != nil {
		return "", err
	}
	return C.GoString(C.mw_version_string()), nil
}

// Trim hands memory that glibc keeps free after a job back to the system (malloc_trim), so one large
// image does not hold the worker's RSS up until the next one happens to reuse it.
func Trim() { C.malloc_trim(0) }
