package transcoder

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Documents turns the first page of a PDF, or an SVG, into a PNG in the job's scratch directory,
// which the image path then makes the recipe's variants from: an SVG is never stored or served as
// SVG. poppler and librsvg are untrusted loaders, so they never run in the worker: each render is a
// child process (the worker itself, `mediaworker render-document`, see document_child.go) started
// exactly like ffmpeg (toolRunner.run: prlimit's address-space, CPU-time, file-size and no-core limits,
// its own process group killed with the job's context, PATH as its only variable), which confines
// itself before it reads a byte (no network, no file outside the scratch directory but the system's
// libraries and fonts). A crash or a hang costs that child; the job fails in words.
type Documents struct {
	// tools is a copy of the runner that starts ffmpeg (Videos' toolRunner), with the renderer's own
	// address-space and file-size limits in its config: the same machinery, the renderer's numbers.
	tools *toolRunner
	cfg   DocumentConfig
	// confinement is what the check render at start reported: the layers in force, and the missing
	// ones (empty when none is).
	confinement, missing string
}

// DocumentConfig sets the renderer.
type DocumentConfig struct {
	// Command starts the render child: the program and its leading arguments, to which the flags
	// are appended. Default: this program with "render-document".
	Command []string
	// Size is the long side, in pixels, of the PNG a page is rendered to: the recipe's largest
	// variant, so that it is made by shrinking, never by enlarging.
	Size int
	// MaxPixels refuses a first page larger than this at the document's own scale: a PDF page at 72
	// dpi (a pixel per point: a 200-inch square page is 14400 × 14400, 207 megapixels), an SVG at its
	// declared size. The document is refused before anything is rendered.
	MaxPixels int64
	// MaxCPUTime is the CPU time one render may use (RLIMIT_CPU, whole seconds).
	MaxCPUTime time.Duration
	// MaxMemoryBytes is the render child's address-space limit (RLIMIT_AS); 0 takes ffmpeg's
	// (VideoConfig.MaxMemoryBytes, 2 GiB by default). It is at least minDocumentMemory.
	MaxMemoryBytes int64
}

// minDocumentMemory is the smallest address space the render child starts in: it is a Go program
// that maps libvips and its 130 libraries, and reserves about 1.8 GiB of address space before it
// reads the document (the Go runtime alone reserves about 600 MiB of page-allocator summaries up
// front; measured with prlimit --as: 1.6 GiB fails now and then, 1.8 GiB never). Below that every
// render would fail, so it is refused at start instead. Pixels are bounded by Size, so the render
// itself needs tens of MiB more, not the address space's worth.
const minDocumentMemory = 2 << 30

// DefaultDocumentConfig returns the defaults: a 2048-pixel long side, 100 megapixels, a minute of
// CPU time (an A4 page with text and images takes about 0.1 s).
func DefaultDocumentConfig() DocumentConfig {
	return DocumentConfig{Size: 2048, MaxPixels: 100_000_000, MaxCPUTime: time.Minute}
}

// Validate reports the first setting that is out of range.
func (c DocumentConfig) Validate() error {
	switch {
	case c.Size < 16 || int64(c.Size)*int64(c.Size) > c.MaxPixels:
		return fmt.Errorf("document render size must be at least 16 and its square within max pixels (%d), got %d", c.MaxPixels, c.Size)
	case c.MaxCPUTime < time.Second:
		return fmt.Errorf("document max cpu time must be at least 1s, got %s", c.MaxCPUTime)
	case c.MaxMemoryBytes != 0 && c.MaxMemoryBytes < minDocumentMemory:
		return fmt.Errorf("document max memory must be at least %d MiB (the render child reserves about 1.8 GiB of address space before it reads the document), got %d bytes",
			minDocumentMemory>>20, c.MaxMemoryBytes)
	}
	return nil
}

// DocumentFormat is what the upload was sniffed as.
type DocumentFormat string

const (
	PDF DocumentFormat = "pdf"
	SVG DocumentFormat = "svg"
)

// RenderedDocument is a rendered first page.
type RenderedDocument struct {
	Path          string // the PNG, in the scratch directory
	Width, Height int    // of the PNG
	Pages         int    // the document's page count (1 for an SVG), for the metadata's pages
	// PageWidth and PageHeight are the first page's size at the document's own scale (points for a
	// PDF, pixels for an SVG).
	PageWidth, PageHeight int
}

// NewDocuments checks cfg and renders a tiny SVG once, so a renderer that cannot start under the
// limits (or cannot confine itself) shows at start, not as failed jobs.
func NewDocuments(ctx context.Context, v *Videos, cfg DocumentConfig) (*Documents, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("validating document config: %w", err)
	}
	if len(cfg.Command) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("finding the render child: %w", err)
		}
		cfg.Command = []string{exe, "render-document"}
	}
	tools := *v.tools
	if cfg.MaxMemoryBytes == 0 {
		if v.cfg.MaxMemoryBytes < minDocumentMemory {
			return nil, fmt.Errorf("validating document config: the video max memory of %d MiB, which the document renderer takes when its own max memory is 0, is below its minimum of %d MiB (the render child reserves about 1.8 GiB of address space before it reads the document): set the document max memory",
				v.cfg.MaxMemoryBytes>>20, minDocumentMemory>>20)
		}
		cfg.MaxMemoryBytes = v.cfg.MaxMemoryBytes
	}
	tools.cfg.MaxMemoryBytes = cfg.MaxMemoryBytes
	// The PNG is at most Size² pixels of 16-bit RGBA: a file larger than that (plus run's margin) is
	// not a page.
	tools.cfg.MaxOutputBytes = 8 * int64(cfg.Size) * int64(cfg.Size)
	d := &Documents{tools: &tools, cfg: cfg}
	dir, err := os.MkdirTemp("", "mediaworker-render-check-")
	if err != nil {
		return nil, fmt.Errorf("checking the document renderer: %w", err)
	}
	defer os.RemoveAll(dir)
	in := filepath.Join(dir, "check.svg")
	svg := `<svg xmlns="http://www.w3.org/2000/svg" width="4" height="4"><rect width="4" height="4" fill="#0a0"/></svg>`
	if err := os.WriteFile(in, []byte(svg), 0o600); err != nil {
		return nil, fmt.Errorf("checking the document renderer: %w", err)
	}
	_, res, err := d.render(ctx, dir, in, SVG)
	if err != nil {
		return nil, fmt.Errorf("checking that the document renderer runs under its limits (%d MiB of address space): %w",
			cfg.MaxMemoryBytes>>20, err)
	}
	// Set once, here: Render runs concurrently and only reads them.
	d.confinement, d.missing = res.Confinement, res.Missing
	return d, nil
}

// Confinement says which confinement layers the renderer runs under and which ones the kernel
// lacks (empty when none is missing), for the worker's start-up log.
func (d *Documents) Confinement() (inForce, missing string) { return d.confinement, d.missing }

// Degraded is the warning for the worker's start-up log when the kernel lacks a confinement layer,
// "" when every layer is in force. Documents are rendered all the same: the child still runs under
// the resource limits, and librsvg, given no base URL, loads no external reference by itself.
func (d *Documents) Degraded() string {
	if d.missing == "" {
		return ""
	}
	return fmt.Sprintf("the document renderer runs without %s (in force: %s): a kernel with Landlock "+
		"(5.13, network rules 6.7; lsm=landlock) and seccomp, not refused by the container runtime, shuts it "+
		"off from the network and from files outside the job's scratch directory", d.missing, d.confinement)
}

// Render renders the first page of the document at input (in dir, the job's scratch directory) to
// dir/page.png. A document over a limit, one the loader cannot read, and one that crashes the loader
// or runs it out of CPU time or memory are bad input, in words; the child's own messages are Detail.
func (d *Documents) Render(ctx context.Context, dir, input string, format DocumentFormat) (RenderedDocument, error) {
	out, _, err := d.render(ctx, dir, input, format)
	return out, err
}

// render is Render, also returning the child's whole answer.
func (d *Documents) render(ctx context.Context, dir, input string, format DocumentFormat) (RenderedDocument, documentResult, error) {
	const step = "rendering the document"
	var res documentResult
	if format != PDF && format != SVG {
		return RenderedDocument{}, res, internal(step, fmt.Errorf("unknown document format %q", format))
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return RenderedDocument{}, res, internal(step, err)
	}
	if input, err = filepath.Abs(input); err != nil {
		return RenderedDocument{}, res, internal(step, err)
	}
	// The child can read nothing outside dir: an input elsewhere is a caller's mistake, said as one
	// rather than as the child's "permission denied".
	if rel, err := filepath.Rel(dir, input); err != nil || rel == "." || strings.HasPrefix(rel, "..") {
		return RenderedDocument{}, res, internal(step, fmt.Errorf("the document %s is not in the scratch directory %s", input, dir))
	}
	out := filepath.Join(dir, "page.png")
	args := append(append([]string{}, d.cfg.Command[1:]...),
		"--in="+input, "--out="+out, "--scratch="+dir, "--format="+string(format),
		"--size="+strconv.Itoa(d.cfg.Size), "--max-pixels="+strconv.FormatInt(d.cfg.MaxPixels, 10))
	stdout := &limitedBuffer{max: 64 << 10}
	err = d.tools.run(ctx, dir, d.cfg.Command[0], args, stdout, d.cfg.MaxCPUTime)
	if err != nil {
		var te *toolError
		if errors.As(err, &te) && te.exitCode == renderRefused && ctx.Err() == nil {
			if jerr := json.Unmarshal(stdout.Bytes(), &res); jerr == nil && res.Refused != "" {
				return RenderedDocument{}, res, &Error{BadInput: true, Msg: res.Refused}
			}
		}
		return RenderedDocument{}, res, d.classify(ctx, step, format, err)
	}
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		return RenderedDocument{}, res, internal(step, fmt.Errorf("reading the renderer's answer: %w", err))
	}
	return RenderedDocument{Path: out, Width: res.Width, Height: res.Height, Pages: res.Pages,
		PageWidth: res.PageWidth, PageHeight: res.PageHeight}, res, nil
}

// classify turns a failed render into an error whose message is for the person who uploaded the
// document.
func (d *Documents) classify(ctx context.Context, step string, format DocumentFormat, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%s: %w", step, ctx.Err())
	}
	var te *toolError
	if !errors.As(err, &te) {
		return internal(step, err)
	}
	name := strings.ToUpper(string(format))
	switch {
	case te.outOfMemory() || outOfAddressSpace(te.stderr):
		// Before the loader's own failure: poppler and cairo report an allocation the limit refused
		// as a document they could not read.
		return badInputSaid(fmt.Sprintf("the %s needs more memory than the limit of %d MiB to render", name, d.cfg.MaxMemoryBytes>>20), te)
	case te.exitCode == renderUndecodable:
		return badInputSaid(fmt.Sprintf("the %s could not be read (damaged, cut off or not a %s)", name, name), te)
	case te.hitCPULimit():
		return badInputSaid(fmt.Sprintf("the %s needs more CPU time than the limit of %s to render", name, te.cpuLimit), te)
	case te.signal == syscall.SIGXFSZ:
		return badInputSaid(fmt.Sprintf("the %s's rendered page would be larger than the limit of %d MiB",
			name, (d.tools.cfg.MaxOutputBytes+fileSizeMargin)>>20), te)
	case te.systemFailure() != "":
		e := internal(step, err)
		e.Words = te.systemFailure() // the machine's failure shows only in the child's stderr: said here
		return e
	case crashSignal(te.signal):
		// The loader crashed on the file: the child died, the worker did not, and the same file would
		// crash it again. (A SIGKILL that is not the CPU limit is the OOM killer's: the machine's.)
		return badInputSaid(fmt.Sprintf("the %s crashed the renderer (it is damaged or made to attack it)", name), te)
	}
	return internal(step, err)
}

// outOfAddressSpace reports whether stderr shows the render child running into its address-space
// limit where outOfMemory's words do not: librsvg's NoMemory, GLib failing to start a thread (its
// stack is an mmap), the Go runtime failing to reserve its heap.
func outOfAddressSpace(stderr string) bool {
	for _, msg := range []string{"rendering error: NoMemory", "Error creating thread", "runtime: out of memory",
		"cannot allocate memory", "failed to reserve page summary memory"} {
		if strings.Contains(stderr, msg) {
			return true
		}
	}
	return false
}

// crashSignal reports whether sig is a crash: a fault, an abort (glib's g_error, a failed assertion,
// and the Go runtime's own end after it caught a fault: the child runs with GOTRACEBACK=crash), or
// the seccomp filter's kill.
func crashSignal(sig syscall.Signal) bool {
	switch sig {
	case syscall.SIGSEGV, syscall.SIGBUS, syscall.SIGILL, syscall.SIGFPE, syscall.SIGABRT, syscall.SIGTRAP, syscall.SIGSYS:
		return true
	}
	return false
}

// Measured peak RSS of the render child (two Go starts, libvips with poppler and librsvg mapped, the
// page in cairo's RGBA surface and libvips' copy, the PNG): 88 MiB at 2048 pixels and 123 MiB at
// 4096 for an A4 page of text (Debian 12, libvips 8.14, poppler 22.02, librsvg 2.54), so about
// 60 MiB plus 16 bytes a pixel.
const (
	renderBaseMemory    = 64 << 20
	renderBytesPerPixel = 16
)

// EstimateMemory is the render child's expected peak, for the memory budget: the child runs before
// the image path reads its PNG, so a document job's peak is the larger of this and the image
// estimate of a Size × Size picture.
func (d *Documents) EstimateMemory() int64 {
	return renderBaseMemory + renderBytesPerPixel*int64(d.cfg.Size)*int64(d.cfg.Size)
}
