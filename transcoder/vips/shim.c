// The C side of package vips: see vips.go for why libvips is reached through dlopen'd pointers.

#define G_DISABLE_CAST_CHECKS
#include <dlfcn.h>
#include <malloc.h>
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <vips/vips.h>

#include "shim.h"

// Every libvips and GLib function the shim calls, reached through mw_<name> pointers.
#define MW_SYMBOLS(X) \
	X(vips_init) X(vips_version) X(vips_version_string) X(vips_error_clear) X(vips_error_buffer_copy) \
	X(vips_cache_set_max) X(vips_cache_set_max_mem) X(vips_cache_set_max_files) \
	X(vips_concurrency_set) X(vips_concurrency_get) X(vips_block_untrusted_set) X(vips_operation_block_set) \
	X(vips_foreign_find_load) X(vips_nickname_find) X(vips_image_new_from_file) \
	X(vips_image_get_width) X(vips_image_get_height) X(vips_image_get_page_height) \
	X(vips_image_get_bands) X(vips_image_get_format) X(vips_image_hasalpha) \
	X(vips_image_get_orientation) X(vips_image_get_typeof) X(vips_image_get_int) \
	X(vips_image_get_string) X(vips_image_copy_memory) X(vips_extract_band) X(vips_min) \
	X(vips_thumbnail) X(vips_thumbnail_image) X(vips_webpsave_buffer) \
	X(vips_image_get_fields) X(vips_image_remove) \
	X(vips_smartcrop) X(vips_extract_area) X(vips_flatten) X(vips_colourspace) X(vips_cast) \
	X(vips_image_get_interpretation) X(vips_image_write_to_memory) X(vips_error) \
	X(vips_array_double_newv) X(vips_area_unref) X(vips_jpegsave_buffer) X(vips_pngsave_buffer) \
	X(vips_bandjoin_const1) X(vips_shrink) \
	X(vips_max) X(vips_maplut) X(vips_recomb) X(vips_linear) X(vips_bandjoin2) X(vips_copy) \
	X(vips_image_new_from_memory_copy) X(vips_image_new_matrix_from_array) \
	X(vips_image_new) X(vips_image_pipelinev) X(vips_image_generate) X(vips_region_new) \
	X(vips_region_prepare) X(vips_embed) X(vips_sequential) X(vips_autorot) X(vips_icc_transform) \
	X(g_object_set_data_full) X(g_object_ref) X(g_object_unref) X(g_free) X(g_realloc) X(g_strfreev) X(g_strlcpy) X(g_log_set_handler) \
	X(g_type_from_name) X(g_type_class_ref) X(g_type_class_unref)

// The libheif functions the AVIF encoder calls (mw_avif). libvips' heifsave cannot set the AV1
// encoder's thread count (libheif's aom plugin starts 4 by default), so the shim drives libheif
// itself; libheif is the library libvips' heif module already loaded at vips_init.
#define MW_HEIF_SYMBOLS(X) \
	X(heif_context_alloc) X(heif_context_free) X(heif_context_get_encoder_for_format) \
	X(heif_encoder_release) X(heif_encoder_set_lossy_quality) X(heif_encoder_set_lossless) \
	X(heif_encoder_set_parameter_integer) X(heif_encoder_set_parameter_string) \
	X(heif_encoding_options_alloc) X(heif_encoding_options_free) X(heif_context_encode_image) \
	X(heif_context_write) X(heif_image_create) X(heif_image_add_plane) X(heif_image_get_plane) \
	X(heif_image_release)

#define MW_DECLARE(name) static __typeof__(name) *mw_##name;
MW_SYMBOLS(MW_DECLARE)
MW_HEIF_SYMBOLS(MW_DECLARE)

// mw_heif_missing is NULL once the libheif pointers are filled, else why AVIF cannot be written.
static const char *mw_heif_missing = "libheif was not loaded";

// MW_LIBVIPS is the library's soname for the ABI the headers describe (8.x: libvips.so.42).

// mw_load opens libvips and fills the pointers; NULL on success, else what failed (static or
// dlerror's buffer, not to be freed).
const char *mw_load(void) {
	void *h = dlopen(MW_LIBVIPS, RTLD_NOW | RTLD_LOCAL);
	if (!h)
		return dlerror();
	// dlsym on the handle also searches the libraries libvips depends on (GLib, GObject).
#define MW_LOAD(name) if (!(mw_##name = dlsym(h, #name))) return "libvips lacks " #name;
	MW_SYMBOLS(MW_LOAD)
	return NULL;
}

// mw_load_heif fills the libheif pointers, or says in mw_heif_missing why it could not: without
// libheif only AVIF variants fail, every other image works.
static void mw_load_heif(void) {
	// Already mapped by libvips' heif module (vips_init loads it); dlopen only takes a reference.
	void *h = dlopen(MW_LIBHEIF, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		mw_heif_missing = "libheif (" MW_LIBHEIF ") cannot be loaded";
		return;
	}
#define MW_LOAD_HEIF(name) if (!(mw_##name = dlsym(h, #name))) { mw_heif_missing = "libheif lacks " #name; return; }
	MW_HEIF_SYMBOLS(MW_LOAD_HEIF)
	mw_heif_missing = NULL;
}

static void mw_drop_log(const gchar *domain, GLogLevelFlags level, const gchar *msg, gpointer data) {
}

// mw_concurrency_set sets the thread count of the libvips pipelines that start from now on
// (process-global; Go's withThreads orders the calls).
void mw_concurrency_set(int n) { mw_vips_concurrency_set(n); }
int mw_concurrency_get(void) { return mw_vips_concurrency_get(); }

// mw_init starts libvips and locks it down for untrusted input. Called once.
int mw_init(int concurrency) {
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

	mw_load_heif();
	return 0;
}

// mw_error takes the error buffer (copy and clear in one locked step). Free with g_free.
char *mw_error(void) {
	return mw_vips_error_buffer_copy();
}


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
int mw_read_header(const char *path, mw_header *h) {
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
	h->has_icc = mw_vips_image_get_typeof(im, VIPS_META_ICC_NAME) != 0;

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

// mw_keep_field says whether a field of a decoded image is one the WebP encoder needs: the frame
// layout and timing of an animation. Everything else a loader attached is the source's metadata.
static int mw_keep_field(const char *name) {
	static const char *keep[] = {
		VIPS_META_PAGE_HEIGHT, VIPS_META_N_PAGES, "delay", "loop", "gif-delay", "gif-loop", NULL,
	};
	for (int i = 0; keep[i]; i++)
		if (!strcmp(name, keep[i]))
			return 1;
	return 0;
}

// mw_strip removes the source's metadata (EXIF, XMP, IPTC, ICC profile, comments, loader fields)
// from an image the shim made. webpsave's strip does not stop libvips 8.14.1 from rebuilding an
// EXIF chunk from what the source carried (vips__exif_update), which on a large EXIF block fails
// ("exif too large", from 8 MiB) or crashes the process (a HEIF's 1 MiB EXIF item: SIGSEGV in
// webpsave, measured); nothing of it is meant to leave the worker anyway. Built-in header fields
// (width, bands, ...) are not metadata and vips_image_remove leaves them alone.
// With keep_animation 0 the frame layout and timing go too (a still image cut from an animation).
static void mw_strip_fields(VipsImage *im, int keep_animation) {
	gchar **fields = mw_vips_image_get_fields(im);

	for (int i = 0; fields && fields[i]; i++)
		if (!keep_animation || !mw_keep_field(fields[i]))
			mw_vips_image_remove(im, fields[i]);
	mw_g_strfreev(fields);
}

static void mw_strip(VipsImage *im) { mw_strip_fields(im, 1); }

// The 8-bit resize (mw_resize_exact). libvips 8.14 shrinks an 8-bit image vertically (reducev) through
// an orc program whose Lanczos coefficients carry only 6 fractional bits; its horizontal pass, and
// both passes of libvips 8.15 and later (highway), carry 12. The coarse coefficients shift pixels by up
// to 5 of 255, which is enough to flip libwebp's choices on a noisy photo: measured on the benchmark's
// noisy 12 MP JPEGs, the 2048 px WebP came out 6 % smaller with SSIM 0.005 lower than sharp's (libvips
// 8.17) from the same photo. libvips' own C path (VIPS_NOVECTOR) is exact but scalar and cost 0.1 CPU-s
// a photo more. mw_reduce below is that C path's arithmetic, down and across — the same mask, offsets,
// rounding and edge pixels, bit for bit — with the accumulation laid out row by row so the compiler
// vectorises it.

#define MW_MAX_POINT 2000         // libvips' own cap on a mask's points
#define MW_SUBPIXELS 64           // VIPS_TRANSFORM_SCALE: mask positions between two input rows

typedef struct {
	double shrink;
	double offset;
	int n_point;
	int *mask; // (MW_SUBPIXELS + 1) × n_point, in 1/4096ths (VIPS_INTERPOLATE_SCALE)
} mw_reduce_state;

static void mw_reduce_free(gpointer p) {
	mw_reduce_state *st = p;
	free(st->mask);
	free(st);
}

// mw_reduce_seq is what one thread of a reduce works with: its region on the input and scratch
// buffers kept from strip to strip (a strip's transposed input is ~200 KiB: allocated for each, it
// would be mapped and unmapped each time, page faults and all).
typedef struct {
	VipsRegion *ir;
	void *buf;
	size_t cap;
} mw_reduce_seq;

static void *mw_reduce_start(VipsImage *out, void *a, void *b) {
	mw_reduce_seq *seq = calloc(1, sizeof(*seq));

	if (!seq)
		return NULL;
	if (!(seq->ir = mw_vips_region_new((VipsImage *) a))) {
		free(seq);
		return NULL;
	}
	return seq;
}

static int mw_reduce_stop(void *vseq, void *a, void *b) {
	mw_reduce_seq *seq = vseq;

	mw_g_object_unref(seq->ir);
	free(seq->buf);
	free(seq);
	return 0;
}

// mw_reduce_scratch returns seq's buffer of at least n bytes, NULL when out of memory.
static void *mw_reduce_scratch(mw_reduce_seq *seq, size_t n) {
	if (n > seq->cap) {
		void *p = realloc(seq->buf, n);
		if (!p) {
			mw_vips_error("mediaworker", "out of memory");
			return NULL;
		}
		seq->buf = p;
		seq->cap = n;
	}
	return seq->buf;
}

// mw_lanczos3 is libvips' calculate_coefficients_lanczos with a = 3 (templates.h).
static void mw_lanczos3(double *c, int n_points, double shrink, double x) {
	const double half = x + n_points / 2.0 - 1;
	double sum = 0;

	for (int i = 0; i < n_points; i++) {
		const double xp = (i - half) / shrink;
		double l;

		if (xp == 0.0)
			l = 1.0;
		else if (xp < -3 || xp > 3)
			l = 0.0;
		else
			l = 3.0 * sin(VIPS_PI * xp) * sin(VIPS_PI * xp / 3.0) / (VIPS_PI * VIPS_PI * xp * xp);
		c[i] = l;
		sum += l;
	}
	for (int i = 0; i < n_points; i++)
		c[i] /= sum;
}

// mw_reducev_row writes one output row: ne samples, each the rounded sum of n input rows lskip bytes
// apart weighted by c. acc holds ne ints.
// On x86-64 an AVX2 copy is made beside the baseline (SSE2) one and picked at load time.
#if defined(__x86_64__)
#define MW_VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define MW_VECTOR_CLONES
#endif
__attribute__((optimize("O3"))) MW_VECTOR_CLONES
static void mw_reducev_row(unsigned char *restrict q, const unsigned char *restrict p, int ne, size_t lskip,
	const int *restrict c, int n, int *restrict acc) {
	for (int z = 0; z < ne; z++)
		acc[z] = 1 << 11; // rounds to nearest: libvips' unsigned_fixed_round
	for (int i = 0; i < n; i++) {
		const unsigned char *restrict row = p + (size_t) i * lskip;
		const int ci = c[i];
		for (int z = 0; z < ne; z++)
			acc[z] += ci * row[z];
	}
	for (int z = 0; z < ne; z++) {
		int v = acc[z] >> 12;
		q[z] = v < 0 ? 0 : v > 255 ? 255 : v;
	}
}

// mw_reducev_gen is vips_reducev_gen's uchar case (libvips 8.14 reducev.cpp).
static int mw_reducev_gen(VipsRegion *out, void *vseq, void *a, void *b, gboolean *stop) {
	mw_reduce_seq *seq = vseq;
	VipsRegion *ir = seq->ir;
	const mw_reduce_state *st = b;
	const VipsRect *r = &out->valid;
	const int bands = out->im->Bands;
	const int ne = r->width * bands;
	VipsRect s;
	int *acc;

	s.left = r->left;
	s.top = r->top * st->shrink - st->offset;
	s.width = r->width;
	s.height = r->height * st->shrink + st->n_point;
	if (mw_vips_region_prepare(ir, &s))
		return -1;
	if (!(acc = mw_reduce_scratch(seq, sizeof(int) * (size_t) ne)))
		return -1;

	double Y = (r->top + 0.5) * st->shrink - 0.5 - st->offset;
	for (int y = 0; y < r->height; y++) {
		unsigned char *q = out->data + (size_t) y * out->bpl;
		const int py = (int) Y;
		const unsigned char *p;

		// The arithmetic keeps the taps inside the prepared rows; checked anyway, per row, because
		// the sizes are the uploader's and a slip here reads another buffer's bytes into a picture.
		if (py < ir->valid.top || py + st->n_point > ir->valid.top + ir->valid.height) {
			mw_vips_error("mediaworker", "resize taps outside their input rows");
			return -1;
		}
		p = ir->data + (size_t) (py - ir->valid.top) * ir->bpl + (size_t) (r->left - ir->valid.left) * bands;
		const int sy = Y * MW_SUBPIXELS * 2;
		const int siy = sy & (MW_SUBPIXELS * 2 - 1);
		const int ty = (siy + 1) >> 1;

		mw_reducev_row(q, p, ne, ir->bpl, st->mask + ty * st->n_point, st->n_point, acc);
		Y += st->shrink;
	}
	return 0;
}

// mw_reduceh_gen is vips_reduceh_gen's uchar case (libvips 8.14 reduceh.cpp), whose C loop libvips runs
// one output sample at a time (a third of a photo's instructions, measured with callgrind). Here the
// strip of input is transposed, so that each output column is mw_reducev_row's weighted sum of whole
// input columns, which vectorises; the sums, and so the samples, are the same.
static int mw_reduceh_gen(VipsRegion *out, void *vseq, void *a, void *b, gboolean *stop) {
	mw_reduce_seq *seq = vseq;
	VipsRegion *ir = seq->ir;
	const mw_reduce_state *st = b;
	const VipsRect *r = &out->valid;
	const int bands = out->im->Bands;
	const int ne = r->height * bands; // one transposed column: the strip's rows, band by band
	VipsRect s;
	unsigned char *cols, *col;
	int *acc, iw;

	s.left = r->left * st->shrink - st->offset;
	s.top = r->top;
	s.width = r->width * st->shrink + st->n_point;
	s.height = r->height;
	if (mw_vips_region_prepare(ir, &s))
		return -1;
	iw = ir->valid.width;
	// acc, then the transposed input, then one output column.
	if (!(acc = mw_reduce_scratch(seq, sizeof(int) * (size_t) ne + (size_t) (iw + 1) * ne)))
		return -1;
	cols = (unsigned char *) (acc + ne);
	col = cols + (size_t) iw * ne;
	for (int y = 0; y < r->height; y++) {
		const unsigned char *row = ir->data + (size_t) (r->top + y - ir->valid.top) * ir->bpl;
		unsigned char *c = cols + y * bands;
		if (bands == 3)
			for (int x = 0; x < iw; x++) {
				c[(size_t) x * ne] = row[x * 3];
				c[(size_t) x * ne + 1] = row[x * 3 + 1];
				c[(size_t) x * ne + 2] = row[x * 3 + 2];
			}
		else
			for (int x = 0; x < iw; x++)
				for (int k = 0; k < bands; k++)
					c[(size_t) x * ne + k] = row[x * bands + k];
	}

	double X = (r->left + 0.5) * st->shrink - 0.5 - st->offset;
	for (int x = 0; x < r->width; x++) {
		const int ix = (int) X;
		const int sx = X * MW_SUBPIXELS * 2;
		const int six = sx & (MW_SUBPIXELS * 2 - 1);
		const int tx = (six + 1) >> 1;

		if (ix < ir->valid.left || ix - ir->valid.left + st->n_point > iw) { // as in mw_reducev_gen
			mw_vips_error("mediaworker", "resize taps outside their input columns");
			return -1;
		}
		mw_reducev_row(col, cols + (size_t) (ix - ir->valid.left) * ne, ne, ne, st->mask + tx * st->n_point,
			st->n_point, acc);
		if (bands == 3) // a byte loop, not memcpy: a call per 3 bytes cost more than the copy
			for (int y = 0; y < r->height; y++) {
				unsigned char *q = out->data + (size_t) y * out->bpl + (size_t) x * 3;
				q[0] = col[y * 3];
				q[1] = col[y * 3 + 1];
				q[2] = col[y * 3 + 2];
			}
		else
			for (int y = 0; y < r->height; y++)
				for (int k = 0; k < bands; k++)
					out->data[(size_t) y * out->bpl + (size_t) x * bands + k] = col[y * bands + k];
		X += st->shrink;
	}
	return 0;
}

// mw_reduce shrinks in (8-bit, uncoded) by shrink across (horizontal) or down with a Lanczos 3 kernel,
// as vips_reduceh or vips_reducev(in, out, shrink, "kernel", VIPS_KERNEL_LANCZOS3) compute it with
// vectors off, when no integer shrink comes first (gap). 0 on success.
static int mw_reduce(VipsImage *in, VipsImage **out, double shrink, int horizontal) {
	const int side = horizontal ? in->Xsize : in->Ysize;
	const int size = (int) ((double) side / shrink + 0.5); // VIPS_ROUND_UINT
	const double extra_pixels = size * shrink - side;
	mw_reduce_state *st;
	VipsImage *embedded = NULL, *t;
	double *c;
	int margin;

	if (size <= 0) {
		mw_vips_error("mediaworker", "image has shrunk to nothing");
		return -1;
	}
	if (!(st = calloc(1, sizeof(*st))))
		return -1;
	st->shrink = shrink;
	st->n_point = 2 * rint(3 * shrink) + 1;
	// Rounding the size down leaves input pixels unused: start inside by half of them, so both edges
	// lose alike.
	st->offset = (1 + extra_pixels) / 2.0 - 1;
	if (st->n_point > MW_MAX_POINT ||
		!(st->mask = malloc(sizeof(int) * (MW_SUBPIXELS + 1) * st->n_point)) ||
		!(c = malloc(sizeof(double) * st->n_point))) {
		mw_vips_error("mediaworker", "reduce factor too large");
		mw_reduce_free(st);
		return -1;
	}
	for (int i = 0; i < MW_SUBPIXELS + 1; i++) {
		mw_lanczos3(c, st->n_point, shrink, (float) i / MW_SUBPIXELS);
		for (int j = 0; j < st->n_point; j++)
			st->mask[i * st->n_point + j] = c[j] * VIPS_INTERPOLATE_SCALE;
	}
	free(c);

	// Edge pixels repeated, so the mask has input beyond the first and last.
	margin = (int) ceil(st->n_point / 2.0) - 1;
	if (horizontal ?
		mw_vips_embed(in, &embedded, margin, 0, in->Xsize + st->n_point, in->Ysize, "extend", VIPS_EXTEND_COPY, NULL) :
		mw_vips_embed(in, &embedded, 0, margin, in->Xsize, in->Ysize + st->n_point, "extend", VIPS_EXTEND_COPY, NULL)) {
		mw_reduce_free(st);
		return -1;
	}
	t = mw_vips_image_new();
	mw_g_object_set_data_full(G_OBJECT(t), "mw-reduce", st, mw_reduce_free);
	// Kept as long as t: the regions its threads read through are made from it as they start.
	mw_g_object_set_data_full(G_OBJECT(t), "mw-reduce-in", embedded, mw_g_object_unref);
	if (mw_vips_image_pipelinev(t, VIPS_DEMAND_STYLE_THINSTRIP, embedded, NULL)) {
		mw_g_object_unref(t);
		return -1;
	}
	if (horizontal)
		t->Xsize = size;
	else
		t->Ysize = size;
	if (mw_vips_image_generate(t, mw_reduce_start, horizontal ? mw_reduceh_gen : mw_reducev_gen,
		mw_reduce_stop, embedded, st)) {
		mw_g_object_unref(t);
		return -1;
	}
	// As vips_reducev does: a large reduce can make threads ask a sequential loader for rows out of
	// order; a line cache on the output keeps them in order.
	if (!horizontal && mw_vips_image_get_typeof(t, VIPS_META_SEQUENTIAL)) {
		VipsImage *seq = NULL;
		int rc = mw_vips_sequential(t, &seq, "tile_height", 10, NULL);
		mw_g_object_unref(t);
		if (rc)
			return -1;
		t = seq;
	}
	*out = t;
	return 0;
}

// mw_exact says whether mw_resize_exact can shrink in by hshrink across and vshrink down: 8-bit,
// uncoded, 3-band sRGB or 1-band B_W without alpha (vips_thumbnail premultiplies an alpha and converts
// other spaces first), and each side shrunk by less than 4 (beyond, vips_resize box-shrinks by an
// integer first: gap 2), a side of factor 1 left as it is.
static int mw_exact(VipsImage *in, double hshrink, double vshrink) {
	VipsInterpretation interp = mw_vips_image_get_interpretation(in);
	int w, h;

	if (in->Coding != VIPS_CODING_NONE || mw_vips_image_get_format(in) != VIPS_FORMAT_UCHAR ||
		!((in->Bands == 3 && interp == VIPS_INTERPRETATION_sRGB) ||
		  (in->Bands == 1 && interp == VIPS_INTERPRETATION_B_W)) ||
		!(hshrink >= 1.0 && hshrink < 4.0 && vshrink >= 1.0 && vshrink < 4.0) || (hshrink == 1.0 && vshrink == 1.0))
		return 0;
	w = (int) (in->Xsize / hshrink + 0.5);
	h = (int) (in->Ysize / vshrink + 0.5);
	return w > 0 && h > 0 && (double) in->Xsize / w < 4.0 && (double) in->Ysize / h < 4.0;
}

// mw_resize_exact is vips_resize(in, out, 1 / hshrink, "vscale", 1 / vshrink) for an image mw_exact
// takes: down, then across; a factor of 1 is no pass, as in vips_resize.
static int mw_resize_exact(VipsImage *in, VipsImage **out, double hshrink, double vshrink) {
	VipsImage *v = NULL;
	int rc;

	if (vshrink == 1.0) {
		v = in;
		mw_g_object_ref(v);
	} else if (mw_reduce(in, &v, vshrink, 0))
		return -1;
	if (hshrink == 1.0) {
		*out = v;
		return 0;
	}
	rc = mw_reduce(v, out, hshrink, 1);
	mw_g_object_unref(v);
	return rc;
}

// mw_fit_shrink is vips_thumbnail's shrink for a w × h picture fitting inside bw × bh, never
// enlarged: the larger of the two sides' factors, for both.
static double mw_fit_shrink(int w, int h, int bw, int bh) {
	double hshrink = (double) w / bw, vshrink = (double) h / bh;
	double s = hshrink < vshrink ? vshrink : hshrink;

	return s < 1.0 ? 1.0 : s;
}

// mw_thumbnail_exact is vips_thumbnail (libvips 8.14, size down, first page, export_profile srgb when
// has_icc) for the JPEGs and PNGs mw_exact takes, with mw_resize_exact's resize. It returns 1, having
// done nothing, for any other file: vips_thumbnail's resize is the one left to do.
static int mw_thumbnail_exact(const char *path, int width, int height, int has_icc, VipsImage **out) {
	VipsImage *im, *t = NULL;
	const char *loader = NULL;
	int orientation, jpeg, shrink_on_load = 1, rc;
	double shrink, hshrink, vshrink;

	if (!(im = mw_vips_image_new_from_file(path, "access", VIPS_ACCESS_SEQUENTIAL, "fail_on", VIPS_FAIL_ON_ERROR, NULL)))
		return -1;
	if (mw_vips_image_get_typeof(im, VIPS_META_LOADER))
		mw_vips_image_get_string(im, VIPS_META_LOADER, &loader);
	jpeg = loader && !strcmp(loader, "jpegload");
	if (!jpeg && !(loader && !strcmp(loader, "pngload"))) {
		mw_g_object_unref(im);
		return 1;
	}
	// The box is upright; the stored picture is turned by a quarter for orientations 5 to 8.
	orientation = mw_vips_image_get_orientation(im);
	if (orientation >= 5 && orientation <= 8) {
		int w = width;
		width = height;
		height = w;
	}
	shrink = mw_fit_shrink(im->Xsize, im->Ysize, width, height);
	// vips_thumbnail's shrink-on-load: libjpeg's block shrink, leaving at least 2 for the resize, from
	// the smaller of the two sides' factors, each at most its side's length. Not from shrink: a JPEG
	// 26 × 2 fit into 2 × 1 would be loaded shrunk by 4, 0 rows high, and libvips 8.14's jpegload
	// then fails an assertion, which aborts the whole process.
	if (jpeg) {
		double common = shrink;
		if (common > im->Xsize)
			common = im->Xsize;
		if (common > im->Ysize)
			common = im->Ysize;
		shrink_on_load = common >= 16 ? 8 : common >= 8 ? 4 : common >= 4 ? 2 : 1;
	}
	if (shrink_on_load > 1) {
		mw_g_object_unref(im);
		if (!(im = mw_vips_image_new_from_file(path, "access", VIPS_ACCESS_SEQUENTIAL, "fail_on", VIPS_FAIL_ON_ERROR,
			"shrink", shrink_on_load, NULL)))
			return -1;
		shrink = mw_fit_shrink(im->Xsize, im->Ysize, width, height);
	}
	// As vips_thumbnail does: a side is never shrunk by more than its length (to less than a pixel),
	// so a picture 2 pixels across fit into 3 × 3 is shrunk by 2 across, not 3.
	hshrink = shrink < im->Xsize ? shrink : im->Xsize;
	vshrink = shrink < im->Ysize ? shrink : im->Ysize;
	if (!mw_exact(im, hshrink, vshrink)) {
		mw_g_object_unref(im);
		return 1;
	}
	rc = mw_resize_exact(im, &t, hshrink, vshrink);
	mw_g_object_unref(im);
	if (rc)
		return -1;
	if (has_icc) {
		// As vips_thumbnail does it: from the embedded profile to sRGB after the resize, relative intent.
		VipsImage *srgb = NULL;
		rc = mw_vips_icc_transform(t, &srgb, "srgb", "embedded", TRUE, "intent", VIPS_INTENT_RELATIVE, NULL);
		mw_g_object_unref(t);
		if (rc)
			return -1;
		t = srgb;
	}
	if (orientation != 1) {
		// vips_autorot turns the picture in memory: the loader is sequential.
		VipsImage *mem = mw_vips_image_copy_memory(t);
		mw_g_object_unref(t);
		if (!mem)
			return -1;
		rc = mw_vips_autorot(mem, &t, NULL);
		mw_g_object_unref(mem);
		if (rc)
			return -1;
	}
	*out = t;
	return 0;
}

// mw_thumbnail_file decodes path shrunk to fit width x height (never enlarged; the box is upright,
// libvips swaps it for a file it rotates), upright (EXIF
// orientation applied) and in sRGB, into memory. With all_pages it decodes every page of an animation
// (the loader's n=-1), each page shrunk to fit, as one tall image with page-height set and the
// frame delays and loop count kept as metadata; otherwise the first page only.
//
// has_icc says the file embeds an ICC profile: its pixels are then transformed from that profile to
// sRGB (export_profile), since the profile is stripped on save. A file without one is sRGB already
// (browsers take it so) and libvips' processing-space conversion is all it needs: asking 8.14 to
// export it to sRGB anyway runs an ICC transform that costs ~0.1 CPU-s per 2048 px variant and
// shifts the colours (measured on a profile-less 12 MP JPEG: mean R +13.7, G +4.2, B +5.2 of 255,
// contrast down 8 %).
//
// A still 8-bit JPEG or PNG is resized by mw_thumbnail_exact (libvips' exact Lanczos, as 8.15+ and sharp
// compute it); anything else by vips_thumbnail.
VipsImage *mw_thumbnail_file(const char *path, int width, int height, int all_pages, int has_icc) {
	VipsImage *t = NULL;
	VipsImage *mem;
	char *name = NULL;
	int rc;

	mw_vips_error_clear();
	if (!all_pages) {
		rc = mw_thumbnail_exact(path, width, height, has_icc, &t);
		if (rc < 0)
			return NULL;
		if (rc == 0)
			goto resized;
	}
	// libvips 8.14's thumbnail has no option_string: load options go in the file name, "file[n=-1]"
	// (the Go side refuses paths that contain brackets, so the name cannot carry options of its own).
	if (all_pages) {
		size_t n = strlen(path) + sizeof("[n=-1]");
		if (!(name = malloc(n)))
			return NULL;
		snprintf(name, n, "%s[n=-1]", path);
	}
	if (has_icc)
		rc = mw_vips_thumbnail(name ? name : path, &t, width,
			"height", height,
			"size", VIPS_SIZE_DOWN,
			"fail_on", VIPS_FAIL_ON_ERROR,
			"export_profile", "srgb",
			NULL);
	else
		rc = mw_vips_thumbnail(name ? name : path, &t, width,
			"height", height,
			"size", VIPS_SIZE_DOWN,
			"fail_on", VIPS_FAIL_ON_ERROR,
			NULL);
	free(name);
	if (rc)
		return NULL;
resized:
	mem = mw_vips_image_copy_memory(t);
	mw_g_object_unref(t);
	if (mem && mw_drop_opaque_alpha(&mem)) {
		mw_g_object_unref(mem);
		return NULL;
	}
	if (mem)
		mw_strip(mem); // the smaller variants are made from this image and inherit its fields
	return mem;
}

// HDR stills (HEIF/AVIF tagged PQ or HLG through their nclx colour property, which libvips 8.14
// ignores: it knows only ICC profiles). The Go side (transcoder/image_hdr.go) does the colour
// science; the shim applies it with libvips' own operations, lazily, so the full-size picture is never
// held twice: the decode at 16 bits a sample, a look-up table from code values to tone-mapped linear
// light (the transfer's inverse and the tone curve in one), the 3x3 matrix to BT.709/sRGB primaries,
// and a second table from 16-bit linear light to 8-bit sRGB.

// mw_hdr_open opens the first picture of the file at path at 16 bits a sample (an 8-bit file is
// scaled up) and returns it with the largest value of its colour bands in *peak (decoding it; the
// loader keeps the decoded picture for mw_hdr_thumbnail). Only RGB and RGBA pictures are taken.
VipsImage *mw_hdr_open(const char *path, double *peak) {
	VipsImage *in, *wide = NULL, *colour = NULL, *t = NULL;
	int bands;

	mw_vips_error_clear();
	if (!(in = mw_vips_image_new_from_file(path, "fail_on", VIPS_FAIL_ON_ERROR, NULL)))
		return NULL;
	bands = mw_vips_image_get_bands(in);
	if (bands != 3 && bands != 4) {
		mw_vips_error("mediaworker", "an HDR picture of %d bands: only RGB and RGBA are tone-mapped", bands);
		mw_g_object_unref(in);
		return NULL;
	}
	switch (mw_vips_image_get_format(in)) {
	case VIPS_FORMAT_USHORT:
		wide = in;
		break;
	case VIPS_FORMAT_UCHAR: {
		double a[] = {257}, b[] = {0};
		if (mw_vips_linear(in, &t, a, b, 1, NULL) || mw_vips_cast(t, &wide, VIPS_FORMAT_USHORT, NULL)) {
			if (t)
				mw_g_object_unref(t);
			mw_g_object_unref(in);
			return NULL;
		}
		mw_g_object_unref(t);
		mw_g_object_unref(in);
		break;
	}
	default:
		mw_vips_error("mediaworker", "an HDR picture of an unexpected sample format");
		mw_g_object_unref(in);
		return NULL;
	}
	if (mw_vips_extract_band(wide, &colour, 0, "n", 3, NULL) || mw_vips_max(colour, peak, NULL)) {
		if (colour)
			mw_g_object_unref(colour);
		mw_g_object_unref(wide);
		return NULL;
	}
	mw_g_object_unref(colour);
	return wide;
}

// mw_hdr_thumbnail tone-maps in (from mw_hdr_open) to 8-bit sRGB and shrinks it to fit width x
// height (never enlarged), into memory, like mw_thumbnail_file. lut maps each 16-bit code value to
// linear light, SDR white at 1; matrix (row-major 3x3) converts it to BT.709 primaries; oetf maps
// linear light in 16 bits (clipped to 0..1 first) to 8-bit sRGB. An alpha band is kept (scaled to 8
// bits).
VipsImage *mw_hdr_thumbnail(VipsImage *in, const float *lut, const double *matrix, const unsigned char *oetf,
	int width, int height) {
	VipsImage *t[12] = {NULL};
	VipsImage *mem = NULL, *out;
	double scale[] = {65535}, zero[] = {0}, alpha_scale[] = {1.0 / 257};
	int n = 0;

	mw_vips_error_clear();
#define MW_STEP(call) do { if (call) goto done; n++; } while (0)
	MW_STEP(mw_vips_extract_band(in, &t[n], 0, "n", 3, NULL));                                     // 0 colour
	if (!(t[n] = mw_vips_image_new_from_memory_copy(lut, 65536 * sizeof(float), 65536, 1, 1, VIPS_FORMAT_FLOAT)))
		goto done;
	n++;                                                                                            // 1 lut
	MW_STEP(mw_vips_maplut(t[0], &t[n], t[1], NULL));                                              // 2 linear
	if (!(t[n] = mw_vips_image_new_matrix_from_array(3, 3, matrix, 9)))
		goto done;
	n++;                                                                                            // 3 matrix
	MW_STEP(mw_vips_recomb(t[2], &t[n], t[3], NULL));                                              // 4 BT.709
	MW_STEP(mw_vips_linear(t[4], &t[n], scale, zero, 1, NULL));                                     // 5
	MW_STEP(mw_vips_cast(t[5], &t[n], VIPS_FORMAT_USHORT, NULL));                                  // 6 clipped
	if (!(t[n] = mw_vips_image_new_from_memory_copy(oetf, 65536, 65536, 1, 1, VIPS_FORMAT_UCHAR)))
		goto done;
	n++;                                                                                            // 7 oetf
	MW_STEP(mw_vips_maplut(t[6], &t[n], t[7], NULL));                                              // 8 sRGB
	out = t[8];
	if (mw_vips_image_get_bands(in) == 4) {
		MW_STEP(mw_vips_extract_band(in, &t[n], 3, NULL));                                      // 9 alpha
		MW_STEP(mw_vips_linear(t[9], &t[n], alpha_scale, zero, 1, "uchar", TRUE, NULL));        // 10
		MW_STEP(mw_vips_bandjoin2(t[8], t[10], &t[n], NULL));                                   // 11
		out = t[11];
	}
	{
		VipsImage *tagged = NULL, *small = NULL;
		if (mw_vips_copy(out, &tagged, "interpretation", VIPS_INTERPRETATION_sRGB, NULL))
			goto done;
		// The pixels are sRGB now: a profile the file carried must not be applied on top.
		mw_vips_image_remove(tagged, VIPS_META_ICC_NAME);
		if (!mw_vips_thumbnail_image(tagged, &small, width, "height", height, "size", VIPS_SIZE_DOWN, NULL)) {
			mem = mw_vips_image_copy_memory(small);
			mw_g_object_unref(small);
		}
		mw_g_object_unref(tagged);
	}
done:
#undef MW_STEP
	for (int i = 0; i < 12; i++)
		if (t[i])
			mw_g_object_unref(t[i]);
	if (mem && mw_drop_opaque_alpha(&mem)) {
		mw_g_object_unref(mem);
		return NULL;
	}
	if (mem)
		mw_strip(mem);
	return mem;
}

// mw_thumbnail_image shrinks an in-memory image to fit width x height (never enlarged) into memory.
VipsImage *mw_thumbnail_image(VipsImage *in, int width, int height) {
	VipsImage *t = NULL;
	VipsImage *mem;

	const double shrink = mw_fit_shrink(in->Xsize, in->Ysize, width, height);
	// A side never shrunk by more than its length, as in mw_thumbnail_exact.
	const double hshrink = shrink < in->Xsize ? shrink : in->Xsize;
	const double vshrink = shrink < in->Ysize ? shrink : in->Ysize;

	mw_vips_error_clear();
	if (mw_vips_image_get_page_height(in) == mw_vips_image_get_height(in) && mw_exact(in, hshrink, vshrink)) {
		if (mw_resize_exact(in, &t, hshrink, vshrink))
			return NULL;
	} else if (mw_vips_thumbnail_image(in, &t, width,
		"height", height,
		"size", VIPS_SIZE_DOWN,
		NULL))
		return NULL;
	mem = mw_vips_image_copy_memory(t);
	mw_g_object_unref(t);
	return mem;
}

// mw_webp encodes in as WebP. strip=TRUE drops the ICC profile and XMP, but libvips 8.14.1 still
// writes an EXIF chunk (measured; a minimal one, once mw_strip has removed the source's);
// WebP.stripMetadata removes what is left.
int mw_webp(VipsImage *in, int q, int effort, void **buf, size_t *len) {
	mw_vips_error_clear();
	return mw_vips_webpsave_buffer(in, buf, len,
		"Q", q,
		"effort", effort,
		"strip", TRUE,
		NULL);
}

// mw_first_frame copies the first frame of an animation held in memory (the top page of the stacked
// frames) into an image of its own, without the animation's fields: a still image for the encoders
// that write one frame.
VipsImage *mw_first_frame(VipsImage *in) {
	VipsImage *t = NULL;
	VipsImage *mem;

	mw_vips_error_clear();
	if (mw_vips_extract_area(in, &t, 0, 0,
		mw_vips_image_get_width(in), mw_vips_image_get_page_height(in), NULL))
		return NULL;
	mem = mw_vips_image_copy_memory(t);
	mw_g_object_unref(t);
	if (mem)
		mw_strip_fields(mem, 0);
	return mem;
}

// mw_cover scales in to exactly rw x rh (the caller keeps the aspect ratio to within a pixel, and
// passes in's own size when no scaling is needed) and cuts width x height out of that, where
// interesting (0 centre, 1 entropy, 2 attention) finds the part to keep. Scaling first and cropping
// the scaled image is what vips_thumbnail_image's crop does too, but its rounding can leave the
// scaled image a pixel short of the box on the side it does not fit exactly, and then the crop comes
// out a pixel short: here the caller chooses the scaled size.
VipsImage *mw_cover(VipsImage *in, int rw, int rh, int width, int height, int interesting) {
	VipsImage *scaled, *t = NULL;
	VipsImage *mem;
	VipsInteresting how;

	switch (interesting) {
	case 0:
		how = VIPS_INTERESTING_CENTRE;
		break;
	case 1:
		how = VIPS_INTERESTING_ENTROPY;
		break;
	default:
		how = VIPS_INTERESTING_ATTENTION;
		break;
	}

	mw_vips_error_clear();
	if (rw == mw_vips_image_get_width(in) && rh == mw_vips_image_get_height(in)) {
		scaled = in;
		mw_g_object_ref(scaled);
	}
	else {
		// size=force: each axis to its own target, the caller's rounding, not libvips'.
		if (mw_vips_thumbnail_image(in, &t, rw,
			"height", rh,
			"size", VIPS_SIZE_FORCE,
			NULL))
			return NULL;
		// In memory: attention and entropy read the image more than once.
		scaled = mw_vips_image_copy_memory(t);
		mw_g_object_unref(t);
		if (!scaled)
			return NULL;
	}
	if (rw == width && rh == height)
		return scaled;
	t = NULL;
	if (mw_vips_smartcrop(scaled, &t, width, height, "interesting", how, NULL)) {
		mw_g_object_unref(scaled);
		return NULL;
	}
	mem = mw_vips_image_copy_memory(t);
	mw_g_object_unref(t);
	mw_g_object_unref(scaled);
	return mem;
}

// mw_8bit returns in with 8 bits per band (a new reference), converting a 16-bit image (a 16-bit
// PNG's thumbnail stays 16-bit) to sRGB or, if grey, to 8-bit grey.
static VipsImage *mw_8bit(VipsImage *in) {
	VipsImage *out = NULL;
	VipsInterpretation to;

	if (mw_vips_image_get_format(in) == VIPS_FORMAT_UCHAR) {
		mw_g_object_ref(in);
		return in;
	}
	to = mw_vips_image_get_interpretation(in) == VIPS_INTERPRETATION_GREY16 ?
		VIPS_INTERPRETATION_B_W : VIPS_INTERPRETATION_sRGB;
	if (mw_vips_colourspace(in, &out, to, NULL))
		return NULL;
	return out;
}

// mw_jpeg encodes in as a baseline JPEG of quality q with optimised Huffman tables and no metadata
// (strip). JPEG has no alpha: transparent pixels are flattened onto white, which is what a
// transparent logo or cut-out is drawn on in most places (libvips' default background is black).
int mw_jpeg(VipsImage *in, int q, void **buf, size_t *len) {
	VipsImage *im, *flat = NULL;
	int rc;

	mw_vips_error_clear();
	if (!(im = mw_8bit(in)))
		return -1;
	if (mw_vips_image_hasalpha(im)) {
		VipsArrayDouble *white = mw_vips_array_double_newv(1, 255.0);

		rc = mw_vips_flatten(im, &flat, "background", white, NULL);
		mw_vips_area_unref((VipsArea *) white);
		mw_g_object_unref(im);
		if (rc)
			return -1;
		im = flat;
	}
	rc = mw_vips_jpegsave_buffer(im, buf, len,
		"Q", q,
		"optimize_coding", TRUE,
		"strip", TRUE,
		NULL);
	mw_g_object_unref(im);
	return rc;
}

// mw_png encodes in as a PNG (lossless; alpha kept; 16-bit kept) without metadata, at zlib level 6
// (libvips' default: levels above it cost several times the CPU for a percent or two).
int mw_png(VipsImage *in, void **buf, size_t *len) {
	mw_vips_error_clear();
	return mw_vips_pngsave_buffer(in, buf, len,
		"compression", 6,
		"strip", TRUE,
		NULL);
}

// mw_heif_fail records a libheif error in libvips' error buffer, where the Go side reads failures.
static int mw_heif_fail(const char *what, struct heif_error err) {
	mw_vips_error("avif", "%s: %s", what, err.message ? err.message : "libheif gave no reason");
	return -1;
}

typedef struct {
	char *data;
	size_t len;
	size_t cap;
} mw_growbuf;

static struct heif_error mw_heif_write(struct heif_context *ctx, const void *data, size_t size, void *userdata) {
	mw_growbuf *b = userdata;
	struct heif_error ok = { heif_error_Ok, heif_suberror_Unspecified, "" };

	if (b->len + size > b->cap) {
		size_t cap = b->cap ? b->cap : 64 * 1024;
		while (cap < b->len + size)
			cap *= 2;
		b->data = mw_g_realloc(b->data, cap); // aborts rather than return NULL
		b->cap = cap;
	}
	memcpy(b->data + b->len, data, size);
	b->len += size;
	return ok;
}

// mw_avif encodes in as a still AVIF (AV1 in HEIF, 8-bit 4:2:0 YCbCr, alpha kept) with libheif's AV1
// encoder (aom) at quality q (0-100), encoder speed (0 slowest to 9 fastest) and threads threads.
// Nothing but the picture is written: no EXIF, XMP or ICC profile (the pixels are sRGB). *buf is
// freed with g_free.
int mw_avif(VipsImage *in, int q, int speed, int threads, void **buf, size_t *len) {
	VipsImage *rgb = NULL, *im;
	struct heif_context *ctx = NULL;
	struct heif_encoder *enc = NULL;
	struct heif_image *img = NULL;
	struct heif_encoding_options *opts = NULL;
	struct heif_writer writer = { 1, mw_heif_write };
	struct heif_error err;
	mw_growbuf out = { NULL, 0, 0 };
	unsigned char *px, *plane;
	size_t n;
	int width, height, bands, stride, rc = -1;

	mw_vips_error_clear();
	if (mw_heif_missing) {
		mw_vips_error("avif", "%s", mw_heif_missing);
		return -1;
	}
	// libheif takes interleaved 8-bit RGB or RGBA.
	if (!(im = mw_8bit(in)))
		return -1;
	rc = mw_vips_colourspace(im, &rgb, VIPS_INTERPRETATION_sRGB, NULL);
	mw_g_object_unref(im);
	if (rc)
		return -1;
	rc = -1;
	width = mw_vips_image_get_width(rgb);
	height = mw_vips_image_get_height(rgb);
	bands = mw_vips_image_get_bands(rgb);
	if (mw_vips_image_get_format(rgb) != VIPS_FORMAT_UCHAR || (bands != 3 && bands != 4)) {
		mw_vips_error("avif", "cannot encode a %d-band image", bands);
		mw_g_object_unref(rgb);
		return -1;
	}
	px = mw_vips_image_write_to_memory(rgb, &n);
	mw_g_object_unref(rgb);
	if (!px)
		return -1;

	err = mw_heif_image_create(width, height, heif_colorspace_RGB,
		bands == 4 ? heif_chroma_interleaved_RGBA : heif_chroma_interleaved_RGB, &img);
	if (err.code) {
		mw_heif_fail("creating the image", err);
		goto done;
	}
	err = mw_heif_image_add_plane(img, heif_channel_interleaved, width, height, 8);
	if (err.code) {
		mw_heif_fail("creating the image", err);
		goto done;
	}
	plane = mw_heif_image_get_plane(img, heif_channel_interleaved, &stride);
	for (int y = 0; y < height; y++)
		memcpy(plane + (size_t) y * stride, px + (size_t) y * width * bands, (size_t) width * bands);

	ctx = mw_heif_context_alloc();
	err = mw_heif_context_get_encoder_for_format(ctx, heif_compression_AV1, &enc);
	if (err.code) {
		mw_heif_fail("finding an AV1 encoder", err);
		goto done;
	}
	err = mw_heif_encoder_set_lossy_quality(enc, q);
	if (!err.code)
		err = mw_heif_encoder_set_lossless(enc, 0);
	if (!err.code)
		err = mw_heif_encoder_set_parameter_string(enc, "chroma", "420");
	if (err.code) {
		mw_heif_fail("setting up the encoder", err);
		goto done;
	}
	// aom, rav1e and SVT-AV1 all know speed and threads; an encoder that does not is left as it is.
	err = mw_heif_encoder_set_parameter_integer(enc, "speed", speed);
	if (err.code && err.subcode != heif_suberror_Unsupported_parameter) {
		mw_heif_fail("setting the encoder's speed", err);
		goto done;
	}
	err = mw_heif_encoder_set_parameter_integer(enc, "threads", threads);
	if (err.code && err.subcode != heif_suberror_Unsupported_parameter) {
		mw_heif_fail("setting the encoder's threads", err);
		goto done;
	}
	opts = mw_heif_encoding_options_alloc();
	opts->save_alpha_channel = bands == 4;
	err = mw_heif_context_encode_image(ctx, img, enc, opts, NULL);
	if (err.code) {
		mw_heif_fail("encoding", err);
		goto done;
	}
	err = mw_heif_context_write(ctx, &writer, &out);
	if (err.code) {
		mw_heif_fail("writing", err);
		goto done;
	}
	*buf = out.data;
	*len = out.len;
	out.data = NULL;
	rc = 0;

done:
	mw_g_free(px);
	mw_g_free(out.data);
	if (opts)
		mw_heif_encoding_options_free(opts);
	if (enc)
		mw_heif_encoder_release(enc);
	if (img)
		mw_heif_image_release(img);
	if (ctx)
		mw_heif_context_free(ctx);
	return rc;
}

int mw_width(VipsImage *im) { return mw_vips_image_get_width(im); }
int mw_page_height(VipsImage *im) { return mw_vips_image_get_page_height(im); }
// mw_frames is the number of frames held: the image's height over its page height. n-pages is the
// file's count, also when only the first page was loaded.
int mw_frames(VipsImage *im) {
	int ph = mw_vips_image_get_page_height(im);
	int h = mw_vips_image_get_height(im);
	return ph > 0 && h % ph == 0 ? h / ph : 1;
}
int mw_bands(VipsImage *im) { return mw_vips_image_get_bands(im); }
int mw_has_alpha(VipsImage *im) { return mw_vips_image_hasalpha(im); }
void mw_unref(VipsImage *im) { mw_g_object_unref(im); }
void mw_gfree(void *p) { mw_g_free(p); }
const char *mw_version_string(void) { return mw_vips_version_string(); }
void mw_error_clear(void) { mw_vips_error_clear(); }

// mw_rgba_small writes the first frame of in, shrunk to fit size x size (never enlarged), as 8-bit
// sRGB with alpha (RGBA, 4 bytes a pixel, rows packed) into a buffer the caller frees with mw_gfree:
// the one small copy the asset facts (placeholder, colours, perceptual hash) are computed from.
int mw_rgba_small(VipsImage *in, int size, void **buf, size_t *len, int *width, int *height) {
	VipsImage *page = NULL, *small = NULL, *srgb = NULL, *u8 = NULL, *rgba = NULL;
	int rc = -1;

	mw_vips_error_clear();
	if (mw_vips_extract_area(in, &page, 0, 0, mw_vips_image_get_width(in), mw_vips_image_get_page_height(in), NULL))
		goto out;
	// A box average (vips_shrink), not vips_thumbnail_image: the copy is for statistics, not for eyes,
	// and thumbnail_image's resampling of a 2048 px picture cost ~170 ms of CPU where this costs a few.
	// Each side shrinks by the long side's factor, but never below one pixel: a 1×65535 picture's
	// 1 px side shrunk by 655 would be 0 px wide, which vips_shrink refuses, and the picture got no
	// facts at all. It becomes 1×100, as the facts' own downscale would make it.
	{
		int w = mw_vips_image_get_width(page), h = mw_vips_image_get_height(page);
		double f = (double)(w > h ? w : h) / size;
		double hf = f < w ? f : w, vf = f < h ? f : h;
		if (f <= 1.0) {
			small = page;
			mw_g_object_ref(small);
		} else if (mw_vips_shrink(page, &small, hf, vf, NULL))
			goto out;
	}
	// Grey, 16-bit and CMYK pictures become 8-bit sRGB; the decode already applied any ICC profile.
	if (mw_vips_colourspace(small, &srgb, VIPS_INTERPRETATION_sRGB, NULL))
		goto out;
	if (mw_vips_cast(srgb, &u8, VIPS_FORMAT_UCHAR, NULL))
		goto out;
	if (mw_vips_image_get_bands(u8) == 3) {
		if (mw_vips_bandjoin_const1(u8, &rgba, 255.0, NULL))
			goto out;
	} else {
		rgba = u8;
		mw_g_object_ref(rgba);
	}
	if (mw_vips_image_get_bands(rgba) != 4) {
		mw_vips_error("mw_rgba_small", "%d bands after conversion to sRGB", mw_vips_image_get_bands(rgba));
		goto out;
	}
	*width = mw_vips_image_get_width(rgba);
	*height = mw_vips_image_get_height(rgba);
	*buf = mw_vips_image_write_to_memory(rgba, len);
	rc = *buf ? 0 : -1;
out:
	if (rgba)
		mw_g_object_unref(rgba);
	if (u8)
		mw_g_object_unref(u8);
	if (srgb)
		mw_g_object_unref(srgb);
	if (small)
		mw_g_object_unref(small);
	if (page)
		mw_g_object_unref(page);
	return rc;
}
