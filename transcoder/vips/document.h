// The document loaders of package vips (document.c): PDF through poppler and SVG through librsvg,
// for the render child only (see document.go).
#ifndef MW_DOCUMENT_H
#define MW_DOCUMENT_H

#include <stddef.h>
#include <vips/vips.h>

const char *mw_doc_load(void);
int mw_doc_header(const void *buf, size_t len, int pdf, int *width, int *height, int *pages);
VipsImage *mw_doc_render(const void *buf, size_t len, int pdf, double scale);

#endif
