package pipeline

import (
	"context"
	"path/filepath"

	"github.com/mediaworker/mediaworker/contracts"
	vocab "github.com/mediaworker/mediaworker/job"
	"github.com/mediaworker/mediaworker/transcoder"
)

// Document is the kind of PDFs and SVGs (job.Document): their first page becomes the recipe's image
// variants, when the recipe asks for documents (docs/documents.md).
const Document = vocab.Document

func init() {
	registerKind(Document, func(d Deps) kindHandler { return documentHandler{docs: d.Documents, images: d.Images} })
}

// DocumentRenderer renders a document's first page to a PNG in a confined child process
// (transcoder.Documents): poppler and librsvg never run in the worker.
type DocumentRenderer interface {
	// Render renders input, which lies in dir (the job's scratch directory: the child reads nothing
	// else), to a PNG in dir.
	Render(ctx context.Context, dir, input string, f transcoder.DocumentFormat) (transcoder.RenderedDocument, error)
	// EstimateMemory is the render child's expected peak.
	EstimateMemory() int64
}

// documentsRefused is the opt-in gate: a document is answered as it was before the document kind
// existed — scanned like every upload, then refused at detection as a type the worker does not
// transform, in the same words — unless the request's recipe asks for documents. Triage and the
// lane's detection, the two places that take detection's kind, both ask it; nil lets the kind through.
func documentsRefused(r Recipe, mime string, kind MediaKind) error {
	if kind != Document || r.Documents {
		return nil
	}
	return refuse("detecting", "unsupported media type: "+mime)
}

// documentHandler is the document kind: the renderer's child makes a PNG of the first page, and
// libvips, in this process, the recipe's image variants from it, so that an SVG is never stored or
// served as SVG.
type documentHandler struct {
	docs   DocumentRenderer // nil when no recipe asks for documents: the worker has no renderer
	images ImageTransformer
}

// downloaded does nothing: only the confined child may parse a document.
func (documentHandler) downloaded(context.Context, *job) {}

// check does nothing: the child checks the page size before it renders, and must be the one to parse
// the file.
func (documentHandler) check(context.Context, *job) error { return nil }

// watched is false: the render is bounded by its CPU limit (RLIMIT_CPU) and the variants after it are
// libvips calls, bounded by the render's size.
func (documentHandler) watched() bool { return false }

// estimateMemory is the render child's peak: it has exited before libvips reads its PNG, a picture
// of at most the render size whose decode and variants need less than the child's 16 bytes a pixel.
func (h documentHandler) estimateMemory(*job) int64 {
	if h.docs == nil {
		return defaultJobMemory
	}
	return h.docs.EstimateMemory()
}

func (h documentHandler) transform(ctx context.Context, j *job, outDir string) (made, error) {
	if h.docs == nil {
		// The gate let a document through for a recipe the worker was not built for: refused as
		// before rather than opened in this process.
		return made{}, refuse("transforming", "unsupported media type: "+j.mime)
	}
	format := transcoder.PDF
	if j.mime == "image/svg+xml" {
		format = transcoder.SVG
	}
	page, err := h.docs.Render(ctx, filepath.Dir(j.input), j.input, format)
	if err != nil {
		return made{}, err
	}
	res, err := h.images.TransformRecipe(ctx, page.Path, outDir, j.recipe.Images)
	if err != nil {
		return made{}, err
	}
	return imageMade(j, res, &contracts.Metadata{MIME: j.mime, Width: page.PageWidth, Height: page.PageHeight,
		HasAlpha: res.HasAlpha, Pages: page.Pages}), nil
}

// asks says whether the recipe turns on kind: documents are the one kind a recipe turns on.
func (r Recipe) asks(kind MediaKind) bool { return kind == Document && r.Documents }
