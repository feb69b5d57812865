package vips

// #include <stdlib.h>
// #include "document.h"
import "C"

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"
)

// Documents: PDF (poppler) and SVG (librsvg) are loaders libvips itself marks untrusted, and Init
// blocks them. Only the render child (`mediaworker render-document`, see transcoder/document_child.go)
// calls InitDocuments, inside its sandbox and resource limits; the worker process never opens a
// document, so a loader crash or hang costs a child, never the worker.

var (
	docOnce sync.Once
	docErr  error
)

// InitDocuments is Init plus the PDF and SVG loaders, for the render child only.
func InitDocuments() error {
	docOnce.Do(func() {
		if docErr = Init(); docErr != nil {
			return
		}
		if msg := C.mw_doc_load(); msg != nil {
			docErr = fmt.Errorf("loading libvips' document loaders: %s", C.GoString(msg))
		}
	})
	return docErr
}

// Document is a PDF or an SVG held in C memory (the loaders keep reading the buffer while they
// render). Close frees it; Close is idempotent.
type Document struct {
	buf unsafe.Pointer
	n   C.size_t
	pdf C.int
}

// OpenDocument copies data (a PDF when pdf, else an SVG) for the loaders. Nothing is parsed yet.
func OpenDocument(data []byte, pdf bool) (*Document, error) {
	if err := InitDocuments(); err != nil {
		return nil, err
	}
	if len(data) == 0 {
		return nil, &Error{Op: "reading the document", Msg: "the file is empty"}
	}
	d := &Document{buf: C.CBytes(data), n: C.size_t(len(data))}
	if pdf {
		d.pdf = 1
	}
	runtime.SetFinalizer(d, (*Document).Close)
	return d, nil
}

// Header returns the first page's size at scale 1 (a PDF in points, 72 to the inch; an SVG in its
// own pixels) and the page count (1 for an SVG).
func (d *Document) Header() (width, height, pages int, err error) {
	var w, h, n C.int
	err = run("reading the document", "", func() bool {
		return C.mw_doc_header(d.buf, d.n, d.pdf, &w, &h, &n) == 0
	})
	runtime.KeepAlive(d)
	return int(w), int(h), int(n), err
}

// Render returns the first page at scale, still lazy: encoding it (PNG) renders it. The Document
// must stay open until then.
func (d *Document) Render(scale float64) (*Image, error) {
	var p *C.VipsImage
	err := run("rendering the document", "", func() bool {
		p = C.mw_doc_render(d.buf, d.n, d.pdf, C.double(scale))
		return p != nil
	})
	runtime.KeepAlive(d)
	if err != nil {
		return nil, err
	}
	return newImage(p), nil
}

// Close frees the document's bytes.
func (d *Document) Close() {
	if d.buf != nil {
		C.free(d.buf)
		d.buf = nil
	}
}
