package job

// Document is the kind of PDFs and SVGs, whose first page becomes a recipe's image variants when the
// recipe asks for documents (docs/documents.md).
const Document Kind = "document"

// The document kind: a confined child process renders the first page (poppler, librsvg), libvips in
// the worker's process makes the variants from its PNG.
func init() {
	Register(Spec{
		Kind:  Document,
		Order: 30,
		Work:  "renders",
		// One at a time: a render takes ~0.3 s, and one child leaves the cores to the other lanes
		// however many hostile documents arrive (each may spend its CPU limit).
		Lane: LaneDefaults{Slots: func(int) int { return 1 }, SlotsRule: "1"},
		// The variants are made from the rendered page by libvips in this process: its budget bounds
		// this heap.
		InProcess: true,
		// Only recipes that say documents: true turn it on; without one a document is answered as
		// unsupported, as before the kind existed.
		OptIn:      true,
		Recognises: isDocument,
		// No preview of its own: its variants are images, which the image kind's Preview picks.
	})
}

// isDocument reports whether mime is a document's: a PDF or an SVG.
func isDocument(mime string) bool { return mime == "application/pdf" || mime == "image/svg+xml" }
