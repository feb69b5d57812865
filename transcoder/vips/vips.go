// Package vips is mediaworker's own thin binding to libvips (8.14). It is the only cgo package in the
// module and exposes just what the image transcoder needs: a header read, a shrink-on-load thumbnail of
// the first page into memory, a resize of an in-memory image, and a WebP encode to a buffer.
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
// per-thread, so runtime.LockOSThread would not help. Successful operations can leave messages in it
// too (heifload logs "bad seek" on ordinary HEIC files), so each operation clears it first, and a
// failing one takes it with vips_error_buffer_copy (copy and clear in one locked step). With jobs
// running at once, a message can therefore lose its text (another job cleared it) or carry a
// neighbour's: the text is for people only. Callers classify failures by the step that failed
// (header, decode, resize, encode), never by parsing the message.
//
// libvips is loaded with dlopen at the first Init, not linked: its 130 dependencies (poppler, librsvg,
// OpenEXR, x265, gnutls, ...) add about 30 MB of mapped libraries to a process's RSS and tens of
// milliseconds to its start, which an idle worker, or one that only ever sees videos, never needs.
// The binary links with --as-needed and the shim calls libvips and GLib only through the pointers
// mw_load fills (declared with __typeof__ of the real prototypes, so the compiler still checks every
// call), so libvips is not among the binary's NEEDED libraries; TestMain checks that it is not mapped
// before Init.
package vips

/*
#cgo LDFLAGS: -Wl,--as-needed
#cgo pkg-config: vips
#define G_DISABLE_CAST_CHECKS
#include <dlfcn.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <vips/vips.h>

// Every libvips and GLib function the shim calls, reached through mw_<name> pointers.
#define MW_SYMBOLS(X) \
	X(vips_init) X(vips_version) X(vips_version_string) X(vips_error_clear) X(vips_error_buffer_copy) \
	X(vips_cache_set_max) X(vips_cache_set_max_mem) X(vips_cache_set_max_files) \
	X(vips_concurrency_set) X(vips_block_untrusted_set) X(vips_operation_block_set) \
	X(vips_foreign_find_load) X(vips_nickname_find) X(vips_image_new_from_file) \
	X(vips_image_get_width) X(vips_image_get_height) X(vips_image_get_page_height) \
	X(vips_image_get_bands) X(vips_image_get_format) X(vips_image_hasalpha) \
	X(vips_image_get_orientation) X(vips_image_get_typeof) X(vips_image_get_int) \
	X(vips_image_get_string) X(vips_image_copy_memory) X(vips_extract_band) X(vips_min) \
	X(vips_thumbnail) X(vips_thumbnail_image) X(vips_webpsave_buffer) \
	X(g_object_unref) X(g_free) X(g_strlcpy) X(g_log_set_handler) \
	X(g_type_from_name) X(g_type_class_ref) X(g_type_class_unref)

#define MW_DECLARE(name) static __typeof__(name) *mw_##name;
MW_SYMBOLS(MW_DECLARE)

// libvipsName is the library's soname for the ABI the headers describe (8.x: libvips.so.42).
#define MW_LIBVIPS "libvips.so.42"

// mw_load opens libvips and fills the pointers; NULL on success, else what failed (static or
// dlerror's buffer, not to be freed).
static const char *mw_load(void) {
	void *h = dlopen(MW_LIBVIPS, RTLD_NOW | RTLD_LOCAL);
	if (!h)
		return dlerror();
	// dlsym on the handle also searches the libraries libvips depends on (GLib, GObject).
#define MW_LOAD(name) if (!(mw_##name = dlsym(h, #name))) return "libvips lacks " #name;
	MW_SYMBOLS(MW_LOAD)
	return NULL;
}

static void mw_drop_log(const gchar *domain, GLogLevelFlags level, const gchar *msg, gpointer data) {
}

// mw_init starts libvips and locks it down for untrusted input. Called once.
static int mw_init(int concurrency) {
	// Go runs cgo calls on many threads and glibc gives each its own malloc arena (up to 8 per
	// core); libvips' large, short-lived pixel buffers then fragment them and RSS creeps up job after
	// job. Two arenas keep it flat at no measurable cost.
	mallopt(M_ARENA_MAX, 2);
	// Large buffers straight from mmap, so they go back to the system when freed: measured on two
	// concurrent 24 MP HEICs, peak RSS fell from 437–587 MiB to 275–351 MiB.
	mallopt(M_MMAP_THRESHOLD, 128 * 1024);
	// VIPS_INIT's ABI check, through the pointers.
	if (mw_vips_version(3) - mw_vips_version(5) != VIPS_LIBRARY_CURRENT - VIPS_LIBRARY_AGE)
		return -2;
	if (mw_vips_init("mediaworker"))
		return -1;

	// libvips prints warnings about the files it reads ("error in tile 0 x 360", "ignoring nclx
	// profile") straight to stderr, outside the worker's structured log. Every failure that matters
	// is returned as an error with libvips' message, so the warnings are dropped.
	mw_g_log_set_handler("VIPS", G_LOG_LEVEL_WARNING, mw_drop_log, NULL);

	// No operation cache: every job opens different files, and a cache would keep decoded pixels
	// and file descriptors of finished jobs alive.
	mw_vips_cache_set_max(0);
	mw_vips_cache_set_max_mem(0);
	mw_vips_cache_set_max_files(0);

	mw_vips_concurrency_set(concurrency);

	// Block every loader, then allow the six formats the worker accepts. Blocking a class blocks its
	// subclasses (file, buffer and source variants), and unblocking works the same way.
	mw_vips_block_untrusted_set(TRUE);
	mw_vips_operation_block_set("VipsForeignLoad", TRUE);
	mw_vips_operation_block_set("VipsForeignLoadJpeg", FALSE);
	mw_vips_operation_block_set("VipsForeignLoadPng", FALSE);
	mw_vips_operation_block_set("VipsForeignLoadWebp", FALSE);
	mw_vips_operation_block_set("VipsForeignLoadNsgif", FALSE);
	mw_vips_operation_block_set("VipsForeignLoadHeif", FALSE);
	mw_vips_operation_block_set("VipsForeignLoadTiff", FALSE);
	return 0;
}

// mw_error takes the error buffer (copy and clear in one locked step). Free with g_free.
static char *mw_error(void) {
	return mw_vips_error_buffer_copy();
}

typedef struct {
	int width;
	int height;
	int pages;
	int bands;
	int has_alpha;
	int orientation;
	char loader[64];
} mw_header;

// mw_blocked reports whether the operation class named name (e.g. "VipsForeignLoadMatrixFile") is
// blocked. mw_vips_foreign_find_load() also returns blocked loaders; they only fail when run.
static int mw_blocked(const char *name) {
	GType type = mw_g_type_from_name(name);
	VipsOperationClass *class;
	int blocked;

	if (!type)
		return 1;
	class = (VipsOperationClass *) mw_g_type_class_ref(type);
	blocked = (class->flags & VIPS_OPERATION_BLOCKED) != 0;
	mw_g_type_class_unref(class);
	return blocked;
}

// mw_read_header opens path lazily (header only, no pixels are decoded) and fills h. It returns 1
// when no loader recognises the file, 2 when only a blocked one does (its nickname is in
// h->loader), -1 on other errors, 0 on success.
static int mw_read_header(const char *path, mw_header *h) {
	const char *loader;
	VipsImage *im;
	const char *nick = NULL;
	int pages = 1;

	mw_vips_error_clear();
	if (!(loader = mw_vips_foreign_find_load(path)))
		return 1;
	if (mw_blocked(loader)) {
		const char *nickname = mw_vips_nickname_find(mw_g_type_from_name(loader));
		mw_g_strlcpy(h->loader, nickname ? nickname : loader, sizeof(h->loader));
		return 2;
	}

	im = mw_vips_image_new_from_file(path,
		"access", VIPS_ACCESS_SEQUENTIAL,
		"fail_on", VIPS_FAIL_ON_ERROR,
		NULL);
	if (!im)
		return -1;

	h->width = mw_vips_image_get_width(im);
	h->height = mw_vips_image_get_page_height(im);
	h->bands = mw_vips_image_get_bands(im);
	h->has_alpha = mw_vips_image_hasalpha(im);
	h->orientation = mw_vips_image_get_orientation(im);

	// Read n-pages directly: vips_image_get_n_pages() reports 1 for counts it finds implausible,
	// which would hide exactly the files the page limit is for.
	if (mw_vips_image_get_typeof(im, VIPS_META_N_PAGES) &&
		mw_vips_image_get_int(im, VIPS_META_N_PAGES, &pages))
		pages = 1;
	h->pages = pages;

	if (mw_vips_image_get_typeof(im, VIPS_META_LOADER))
		mw_vips_image_get_string(im, VIPS_META_LOADER, &nick);
	mw_g_strlcpy(h->loader, nick ? nick : loader, sizeof(h->loader));

	mw_g_object_unref(im);
	return 0;
}

// mw_drop_opaque_alpha replaces *im by its colour bands when its alpha band is fully opaque (GIFs
// always decode with alpha, and many PNGs carry an unused one): the WebPs are smaller and HasAlpha
// means the image really has transparency.
static int mw_drop_opaque_alpha(VipsImage **im) {
	VipsImage *alpha, *opaque;
	double min, opaque_value;
	int bands = mw_vips_image_get_bands(*im);

	if (!mw_vips_image_hasalpha(*im))
		return 0;
	switch (mw_vips_image_get_format(*im)) {
	case VIPS_FORMAT_UCHAR:
		opaque_value = 255;
		break;
	case VIPS_FORMAT_USHORT:
		opaque_value = 65535;
		break;
	default:
		return 0; // thumbnails are 8-bit; leave anything unusual as it is
	}
	if (mw_vips_extract_band(*im, &alpha, bands - 1, NULL))
		return -1;
	if (mw_vips_min(alpha, &min, NULL)) {
		mw_g_object_unref(alpha);
		return -1;
	}
	mw_g_object_unref(alpha);
	if (min < opaque_value)
		return 0;
	if (mw_vips_extract_band(*im, &opaque, 0, "n", bands - 1, NULL))
		return -1;
	mw_g_object_unref(*im);
	*im = opaque;
	return 0;
}

// mw_thumbnail_file decodes the first page of path shrunk to fit size x size (never enlarged),
// upright (EXIF orientation applied) and in sRGB, into memory.
static VipsImage *mw_thumbnail_file(const char *path, int size) {
	VipsImage *t = NULL;
	VipsImage *mem;

	mw_vips_error_clear();
	if (mw_vips_thumbnail(path, &t, size,
		"height", size,
		"size", VIPS_SIZE_DOWN,
		"fail_on", VIPS_FAIL_ON_ERROR,
		"export_profile", "srgb",
		NULL))
		return NULL;
	mem = mw_vips_image_copy_memory(t);
	mw_g_object_unref(t);
	if (mem && mw_drop_opaque_alpha(&mem)) {
		mw_g_object_unref(mem);
		return NULL;
	}
	return mem;
}

// mw_thumbnail_image shrinks an in-memory image to fit size x size (never enlarged) into memory.
static VipsImage *mw_thumbnail_image(VipsImage *in, int size) {
	VipsImage *t = NULL;
	VipsImage *mem;

	mw_vips_error_clear();
	if (mw_vips_thumbnail_image(in, &t, size,
		"height", size,
		"size", VIPS_SIZE_DOWN,
		NULL))
		return NULL;
	mem = mw_vips_image_copy_memory(t);
	mw_g_object_unref(t);
	return mem;
}

// mw_webp encodes in as WebP. strip=TRUE drops the ICC profile and XMP, but libvips 8.14.1 still
// writes an EXIF chunk (measured); WebP.stripMetadata removes what is left.
static int mw_webp(VipsImage *in, int q, int effort, void **buf, size_t *len) {
	mw_vips_error_clear();
	return mw_vips_webpsave_buffer(in, buf, len,
		"Q", q,
		"effort", effort,
		"strip", TRUE,
		NULL);
}

static int mw_width(VipsImage *im) { return mw_vips_image_get_width(im); }
static int mw_height(VipsImage *im) { return mw_vips_image_get_height(im); }
static int mw_bands(VipsImage *im) { return mw_vips_image_get_bands(im); }
static int mw_has_alpha(VipsImage *im) { return mw_vips_image_hasalpha(im); }
static void mw_unref(VipsImage *im) { mw_g_object_unref(im); }
static void mw_gfree(void *p) { mw_g_free(p); }
static const char *mw_version_string(void) { return mw_vips_version_string(); }
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"unsafe"
)

// ErrUnknownFormat is returned by ReadHeader when none of the allowed loaders recognises the file.
var ErrUnknownFormat = errors.New("not a jpeg, png, webp, gif, heif or tiff image")

// Concurrency is the size of libvips' thread pool per operation. One keeps a job on one core, so
// --max-image-jobs decides how many cores images use; decoding and WebP encoding are single-threaded
// in their libraries anyway.
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

// takeError returns libvips' error buffer as an error and clears it.
func takeError() error {
	p := C.mw_error()
	defer C.mw_gfree(unsafe.Pointer(p))
	msg := strings.TrimSpace(C.GoString(p))
	if msg == "" {
		msg = "libvips failed without a message"
	}
	// libvips messages are "domain: text" lines; keep them on one line for logs and responses.
	return errors.New(strings.ReplaceAll(msg, "\n", "; "))
}

// Header is what a file's header says, read without decoding pixels.
type Header struct {
	Loader      string // libvips loader nickname, e.g. "jpegload"
	Width       int
	Height      int // of one page
	Pages       int // pages (frames) in the file, 1 for still images
	Bands       int
	HasAlpha    bool
	Orientation int // EXIF orientation, 1 when absent
}

// ReadHeader reads path's header. It returns ErrUnknownFormat when no allowed loader accepts the file.
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
	switch C.mw_read_header(cpath, &h) {
	case 0:
	case 1:
		_ = takeError() // "... is not a known file format": ours says which formats are allowed
		return Header{}, ErrUnknownFormat
	case 2:
		return Header{}, fmt.Errorf("%w (it looks like %s)", ErrUnknownFormat,
			strings.TrimSuffix(C.GoString(&h.loader[0]), "load"))
	default:
		return Header{}, takeError()
	}
	return Header{
		Loader:      C.GoString(&h.loader[0]),
		Width:       int(h.width),
		Height:      int(h.height),
		Pages:       int(h.pages),
		Bands:       int(h.bands),
		HasAlpha:    h.has_alpha != 0,
		Orientation: int(h.orientation),
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

// Image is a decoded image held in memory. Close releases it; Close is idempotent.
type Image struct {
	p *C.VipsImage
}

func newImage(p *C.VipsImage) *Image {
	im := &Image{p: p}
	// A safety net for a forgotten Close, not the way images are meant to be released.
	runtime.SetFinalizer(im, (*Image).Close)
	return im
}

// Thumbnail decodes the first page of the file at path into memory, shrunk (never enlarged) to fit
// in size×size, rotated upright from its EXIF orientation, converted to sRGB (because metadata,
// including any ICC profile, is stripped on save), with alpha kept unless it is fully opaque. Decoding stops at the first
// error (fail_on=error), which includes truncated files.
func Thumbnail(path string, size int) (*Image, error) {
	if err := Init(); err != nil {
		return nil, err
	}
	if err := checkPath(path); err != nil {
		return nil, err
	}
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	p := C.mw_thumbnail_file(cpath, C.int(size))
	if p == nil {
		return nil, takeError()
	}
	return newImage(p), nil
}

// Thumbnail returns a copy of im shrunk (never enlarged) to fit in size×size.
func (im *Image) Thumbnail(size int) (*Image, error) {
	p := C.mw_thumbnail_image(im.p, C.int(size))
	runtime.KeepAlive(im)
	if p == nil {
		return nil, takeError()
	}
	return newImage(p), nil
}

// Width is the image's width in pixels.
func (im *Image) Width() int { defer runtime.KeepAlive(im); return int(C.mw_width(im.p)) }

// Height is the image's height in pixels.
func (im *Image) Height() int { defer runtime.KeepAlive(im); return int(C.mw_height(im.p)) }

// Bands is the number of bands (3 for RGB, 4 for RGBA, ...).
func (im *Image) Bands() int { defer runtime.KeepAlive(im); return int(C.mw_bands(im.p)) }

// HasAlpha reports whether the image has an alpha band.
func (im *Image) HasAlpha() bool { defer runtime.KeepAlive(im); return C.mw_has_alpha(im.p) != 0 }

// WebP encodes im as WebP with quality q (1-100) and effort (0-6), metadata stripped.
func (im *Image) WebP(q, effort int) ([]byte, error) {
	var buf unsafe.Pointer
	var n C.size_t
	rc := C.mw_webp(im.p, C.int(q), C.int(effort), &buf, &n)
	runtime.KeepAlive(im)
	if rc != 0 {
		return nil, takeError()
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
