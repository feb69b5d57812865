package transcoder

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"github.com/mediaworker/mediaworker/internal/confine"
	"github.com/mediaworker/mediaworker/transcoder/vips"
)

// The render child: `mediaworker render-document` (cmd/mediaworker/render.go) runs
// RenderDocumentMain, started by Documents.Render through prlimit with ffmpeg's limits.
//
// Why a re-exec'd worker and not poppler-utils' pdftoppm and librsvg2-bin's rsvg-convert: libvips
// 8.14 already carries poppler (pdfload) and librsvg (svgload), so no package is added to the image
// or to CI; one child reads the page count, checks the page size and renders, where the tools would
// need pdfinfo + pdftoppm (two parses of a hostile file) and would render a 200-inch page before
// anyone could refuse it; and the confinement below is ours to set, the same for both formats.
//
// It runs in two stages, both in the job's scratch directory:
//  1. unconfined: lock the thread, confine it (internal/confine: Landlock and seccomp), and exec
//     itself with --confined from that thread, so that every thread of stage 2 is confined (Landlock
//     restricts only the thread that asks, and is inherited across execve);
//  2. confined: read the input, check the limits, render page 1 to a PNG, print the result as JSON.
//
// Exit codes tell the parent whose fault a failure is, because its stderr is read only for the
// operator: renderRefused (the document is over a limit; the public sentence is the answer's
// "refused", on stdout, which only this code writes: the libraries write their warnings to stderr),
// renderUndecodable (the loader could not read it), anything else internal; a signal is a crash.

const (
	renderRefused      = 3
	renderUndecodable  = 4
	renderConfinedFlag = "confined"
)

// documentResult is the child's answer on stdout.
type documentResult struct {
	Pages       int    `json:"pages"`
	Width       int    `json:"width"`  // of the PNG
	Height      int    `json:"height"` // of the PNG
	PageWidth   int    `json:"pageWidth"`
	PageHeight  int    `json:"pageHeight"`
	Confinement string `json:"confinement"`
	Missing     string `json:"missing,omitempty"` // confinement layers the kernel lacks
	// Refused is the sentence for the person who uploaded a document over a limit (exit status
	// renderRefused), made from numbers, never from the file's words.
	Refused string `json:"refused,omitempty"`
}

// RenderDocumentMain is the render child's main; args are its flags. It returns the exit code.
func RenderDocumentMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("render-document", flag.ContinueOnError)
	fs.SetOutput(stderr)
	in := fs.String("in", "", "the document, a path in the scratch directory")
	out := fs.String("out", "", "the PNG to write, a path in the scratch directory")
	format := fs.String("format", "", "pdf or svg")
	size := fs.Int("size", 0, "the long side of the PNG, in pixels")
	maxPixels := fs.Int64("max-pixels", 0, "refuse a first page larger than this at its own scale")
	scratch := fs.String("scratch", "", "the only directory the child may read and write")
	confined := fs.String(renderConfinedFlag, "", "set by stage 1: the confinement in force")
	missing := fs.String("missing", "", "set by stage 1: the layers the kernel lacks")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *in == "" || *out == "" || *scratch == "" || *size <= 0 || *maxPixels <= 0 || (*format != "pdf" && *format != "svg") {
		fmt.Fprintln(stderr, "render-document: --in, --out, --scratch, --format pdf|svg, --size and --max-pixels are required")
		return 2
	}
	if *confined == "" {
		return confineAndExec(args, *scratch, stderr)
	}
	res, code, err := renderDocument(*in, *out, *format, *size, *maxPixels)
	if code == renderRefused {
		res.Refused = err.Error()
		if jerr := json.NewEncoder(stdout).Encode(res); jerr != nil {
			fmt.Fprintf(stderr, "writing the result: %v\n", jerr)
			return 1
		}
		return code
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return code
	}
	res.Confinement, res.Missing = *confined, *missing
	if err := json.NewEncoder(stdout).Encode(res); err != nil {
		fmt.Fprintf(stderr, "writing the result: %v\n", err)
		return 1
	}
	return 0
}

// confineAndExec is stage 1: confine this thread and exec stage 2 from it.
func confineAndExec(args []string, scratch string, stderr io.Writer) int {
	exes, err := confine.Executables()
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	scratch, err = filepath.Abs(scratch)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	runtime.LockOSThread() // never unlocked: the thread becomes stage 2 or the process exits
	rep, err := confine.Restrict(confine.Paths{
		ReadWrite: []string{scratch},
		ReadOnly:  confine.SystemReadOnly(),
		Exec:      exes,
	})
	if err != nil {
		fmt.Fprintf(stderr, "confining the renderer: %v\n", err)
		return 1
	}
	exe := exes[0]
	next := append([]string{exe, "render-document"}, args...)
	next = append(next, "--"+renderConfinedFlag+"="+rep.String(), "--missing="+strings.Join(rep.Unsupported, "; "))
	// Only what the loaders need: GIO's local file system (no GVfs daemons, which it would reach over
	// D-Bus), and the scratch directory for any temporary file. GOTRACEBACK=crash: a loader's segfault
	// (which the Go runtime catches, as any signal in cgo code) ends the child by a signal, SIGABRT,
	// rather than by exit status 2 after pages of goroutine stacks, so the parent sees a crash
	// without reading stderr (Documents.classify).
	env := []string{"PATH=" + os.Getenv("PATH"), "GIO_USE_VFS=local", "TMPDIR=" + scratch, "HOME=" + scratch,
		"GOTRACEBACK=crash", "MALLOC_ARENA_MAX=2"}
	err = syscall.Exec(exe, next, env)
	fmt.Fprintf(stderr, "starting the confined renderer: %v\n", err)
	return 1
}

// renderDocument is stage 2. The size limit applies at the document's own scale (a PDF at 72 dpi, a
// pixel per point; an SVG at its own pixel size), before anything is rendered: that is the size the
// document declares, whatever size the PNG is then rendered at.
func renderDocument(in, out, format string, size int, maxPixels int64) (documentResult, int, error) {
	var res documentResult
	data, err := os.ReadFile(in)
	if err != nil {
		return res, 1, fmt.Errorf("reading the document: %w", err)
	}
	doc, err := vips.OpenDocument(data, format == "pdf")
	if err != nil {
		return res, undecodableCode(err), err
	}
	defer doc.Close()
	w, h, pages, err := doc.Header()
	if err != nil {
		return res, undecodableCode(err), err
	}
	res.Pages, res.PageWidth, res.PageHeight = pages, w, h
	if w <= 0 || h <= 0 {
		return res, renderRefused, fmt.Errorf("the %s's first page has no area (%d × %d)", strings.ToUpper(format), w, h)
	}
	if px := int64(w) * int64(h); px > maxPixels {
		return res, renderRefused, errors.New(documentTooLarge(format, w, h, maxPixels))
	}
	scale := float64(size) / float64(max(w, h))
	img, err := doc.Render(scale)
	if err != nil {
		return res, undecodableCode(err), err
	}
	defer img.Close()
	png, err := img.PNG()
	if err != nil {
		return res, undecodableCode(err), err
	}
	res.Width, res.Height = img.Width(), img.Height()
	if err := os.WriteFile(out, png, 0o600); err != nil {
		return res, 1, fmt.Errorf("writing the page: %w", err)
	}
	return res, 0, nil
}

// documentTooLarge is the public sentence for a first page over the pixel limit.
func documentTooLarge(format string, w, h int, maxPixels int64) string {
	mp := func(px float64) string { return oneDecimal(px/1e6) + " megapixels" }
	if format == "pdf" {
		return fmt.Sprintf("the PDF's first page is %s × %s inches (%d × %d points), %s at 72 dpi; the limit is %s",
			inches(w), inches(h), w, h, mp(float64(w)*float64(h)), mp(float64(maxPixels)))
	}
	return fmt.Sprintf("the SVG's canvas is %d × %d pixels (%s); the limit is %s",
		w, h, mp(float64(w)*float64(h)), mp(float64(maxPixels)))
}

func inches(points int) string { return oneDecimal(float64(points) / 72) }

// oneDecimal is x to one decimal, without a trailing ".0".
func oneDecimal(x float64) string {
	return strings.TrimSuffix(strconv.FormatFloat(x, 'f', 1, 64), ".0")
}

// undecodableCode tells a loader that refused the document (libvips' words) from a failure of ours.
func undecodableCode(err error) int {
	var ve *vips.Error
	if errors.As(err, &ve) {
		return renderUndecodable
	}
	return 1
}
