// The document loaders (PDF via poppler, SVG via librsvg), reached through their own dlopen'd
// pointers like the rest of the shim (shim.c). mw_init blocks both loaders in every process; only
// the render child, confined and under resource limits, unblocks them (mw_doc_load).

#define G_DISABLE_CAST_CHECKS
#include <dlfcn.h>
#include <vips/vips.h>

#include "shim.h"
#include "document.h"

#define MW_DOC_SYMBOLS(X) \
	X(vips_pdfload_buffer) X(vips_svgload_buffer) X(vips_operation_block_set) \
	X(vips_image_get_width) X(vips_image_get_height) X(vips_image_get_typeof) X(vips_image_get_int) \
	X(vips_error_clear) X(g_object_unref)

#define MW_DOC_DECLARE(name) static __typeof__(name) *mwd_##name;
MW_DOC_SYMBOLS(MW_DOC_DECLARE)

// mw_doc_load fills the pointers (libvips is already mapped by mw_load: dlopen only takes a
// reference) and unblocks the PDF and SVG loaders in this process. NULL on success, else what failed.
const char *mw_doc_load(void) {
	void *h = dlopen(MW_LIBVIPS, RTLD_NOW | RTLD_LOCAL);
	if (!h)
		return dlerror();
#define MW_DOC_LOAD(name) if (!(mwd_##name = dlsym(h, #name))) return "libvips lacks " #name;
	MW_DOC_SYMBOLS(MW_DOC_LOAD)
	mwd_vips_operation_block_set("VipsForeignLoadPdf", FALSE);
	mwd_vips_operation_block_set("VipsForeignLoadSvg", FALSE);
	return NULL;
}

// mw_doc_open opens buf lazily (nothing is rendered before pixels are asked for) with the PDF or SVG
// loader at scale (1: a PDF at 72 dpi, so a pixel per point; an SVG at its own size in pixels). Only
// the first page of a PDF is opened. An SVG is loaded from memory, so librsvg has no base URL and
// refuses every external reference (file:, http:, ...); only data: URLs inside the file load, and
// librsvg's XML limits stay on (unlimited is FALSE).
static VipsImage *mw_doc_open(const void *buf, size_t len, int pdf, double scale) {
	VipsImage *im = NULL;
	int rc;

	mwd_vips_error_clear();
	if (pdf)
		rc = mwd_vips_pdfload_buffer((void *) buf, len, &im,
			"page", 0, "n", 1, "scale", scale,
			"access", VIPS_ACCESS_SEQUENTIAL, "fail_on", VIPS_FAIL_ON_ERROR, NULL);
	else
		rc = mwd_vips_svgload_buffer((void *) buf, len, &im,
			"scale", scale, "unlimited", FALSE,
			"access", VIPS_ACCESS_SEQUENTIAL, "fail_on", VIPS_FAIL_ON_ERROR, NULL);
	return rc ? NULL : im;
}

// mw_doc_header reads the size at scale 1 and, for a PDF, the page count. 0 on success.
int mw_doc_header(const void *buf, size_t len, int pdf, int *width, int *height, int *pages) {
	VipsImage *im = mw_doc_open(buf, len, pdf, 1.0);
	int n = 1;

	if (!im)
		return -1;
	*width = mwd_vips_image_get_width(im);
	*height = mwd_vips_image_get_height(im);
	// n-pages as the loader read it from the document's page tree (only the first page is opened).
	if (mwd_vips_image_get_typeof(im, VIPS_META_N_PAGES) &&
		mwd_vips_image_get_int(im, VIPS_META_N_PAGES, &n))
		n = 1;
	*pages = n;
	mwd_g_object_unref(im);
	return 0;
}

// mw_doc_render opens the first page at scale, lazily: encoding the result renders it.
VipsImage *mw_doc_render(const void *buf, size_t len, int pdf, double scale) {
	return mw_doc_open(buf, len, pdf, scale);
}
