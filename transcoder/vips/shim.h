// The C side of package vips (shim.c), as the Go files see it. Only plain C and opaque libvips types
// cross: no libvips function is called from Go directly (see vips.go for why).
#ifndef MW_SHIM_H
#define MW_SHIM_H

#include <malloc.h>
#include <stddef.h>
#include <stdlib.h>
#include <vips/vips.h>
#include <libheif/heif.h>

// MW_LIBVIPS is the library's soname for the ABI the headers describe (8.x: libvips.so.42).
#define MW_LIBVIPS "libvips.so.42"
// MW_LIBHEIF is libheif's soname (1.x), for the AVIF encoder.
#define MW_LIBHEIF "libheif.so.1"

typedef struct {
	int width;
	int height;
	int pages;
	int bands;
	int has_alpha;
	int orientation;
	int has_icc;
	char loader[64];
} mw_header;

const char *mw_load(void);
int mw_init(int concurrency);
void mw_concurrency_set(int n);
int mw_concurrency_get(void);
char *mw_error(void);
void mw_error_clear(void);
int mw_read_header(const char *path, mw_header *h);
VipsImage *mw_thumbnail_file(const char *path, int width, int height, int all_pages, int has_icc);
VipsImage *mw_thumbnail_image(VipsImage *in, int width, int height);
VipsImage *mw_hdr_open(const char *path, double *peak);
VipsImage *mw_hdr_thumbnail(VipsImage *in, const float *lut, const double *matrix, const unsigned char *oetf,
	int width, int height);
VipsImage *mw_first_frame(VipsImage *in);
int mw_rgba_small(VipsImage *in, int size, void **buf, size_t *len, int *width, int *height);
VipsImage *mw_cover(VipsImage *in, int rw, int rh, int width, int height, int interesting);
int mw_webp(VipsImage *in, int q, int effort, void **buf, size_t *len);
int mw_jpeg(VipsImage *in, int q, void **buf, size_t *len);
int mw_png(VipsImage *in, void **buf, size_t *len);
int mw_avif(VipsImage *in, int q, int speed, int threads, void **buf, size_t *len);
int mw_width(VipsImage *im);
int mw_page_height(VipsImage *im);
int mw_frames(VipsImage *im);
int mw_bands(VipsImage *im);
int mw_has_alpha(VipsImage *im);
void mw_unref(VipsImage *im);
void mw_gfree(void *p);
const char *mw_version_string(void);

#endif
