package transcoder_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/transcoder"
)

// The document renderer with real poppler and librsvg, in the real render child (this test binary
// re-executed as render-document: see TestMain), under the real limits and confinement.

// renderCtx bounds a render in a test: a renderer that stopped without using CPU time (so its CPU
// limit never comes) fails the test instead of hanging it.
func renderCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func newDocuments(t *testing.T, cfg transcoder.DocumentConfig) *transcoder.Documents {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, err := transcoder.NewDocuments(ctx, newVideos(t, transcoder.DefaultVideoConfig()), cfg)
	if err != nil {
		t.Fatalf("NewDocuments: %v", err)
	}
	return d
}

// makePDF is a PDF of w × h points, a page per colour.
func makePDF(w, h float64, fills ...color.RGBA) []byte {
	return testenv.MakePDF(testenv.PDFOpts{Width: w, Height: h, Fills: fills})
}

var (
	red   = color.RGBA{230, 20, 20, 255}
	green = color.RGBA{20, 200, 20, 255}
	blue  = color.RGBA{20, 20, 230, 255}
)

// writeInput writes data as the job's input in a fresh scratch directory.
func writeInput(t *testing.T, name string, data []byte) (dir, path string) {
	t.Helper()
	dir = t.TempDir()
	path = filepath.Join(dir, name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, path
}

func decodePNG(t *testing.T, path string) image.Image {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("decoding the rendered page: %v", err)
	}
	return img
}

// near reports whether c is within 40 of want in each channel.
func near(c color.Color, want color.RGBA) bool {
	r, g, b, _ := c.RGBA()
	d := func(x uint32, y uint8) bool { v := int(x>>8) - int(y); return v > -40 && v < 40 }
	return d(r, want.R) && d(g, want.G) && d(b, want.B)
}

func TestDocumentPDFRendersFirstPageAndCountsPages(t *testing.T) {
	d := newDocuments(t, transcoder.DocumentConfig{Size: 1024, MaxPixels: 100_000_000, MaxCPUTime: 30 * time.Second})
	dir, in := writeInput(t, "input", makePDF(595, 842, red, green, blue)) // A4, three pages
	res, err := d.Render(renderCtx(t), dir, in, transcoder.PDF)
	if err != nil {
		t.Fatalf("Render: %v", err)
	}
	if res.Pages != 3 {
		t.Errorf("pages = %d, want 3", res.Pages)
	}
	if res.PageWidth != 595 || res.PageHeight != 842 {
		t.Errorf("page = %d × %d points, want 595 × 842", res.PageWidth, res.PageHeight)
	}
	img := decodePNG(t, res.Path)
	if b := img.Bounds(); b.Dy() != 1024 || b.Dx() < 722 || b.Dx() > 725 || b.Dx() != res.Width || b.Dy() != res.Height {
		t.Errorf("PNG is %v, result says %d × %d; want about 724 × 1024", b, res.Width, res.Height)
	}
	if c := img.At(img.Bounds().Dx()/2, img.Bounds().Dy()/2); !near(c, red) {
		t.Errorf("the middle of the rendered page is %v, want page 1's red", c)
	}
	// The label "Page 1" (Helvetica 24 pt, 20 pt from the bottom left) is drawn: the fonts are within
	// the confinement's reach. At 1024/842 pixels a point it lies in about x 24-110, y 970-1000.
	dark := 0
	for y := 940; y < 1010; y++ {
		for x := 15; x < 140; x++ {
			if r, g, b, _ := img.At(x, y).RGBA(); r>>8 < 80 && g>>8 < 80 && b>>8 < 80 {
				dark++
			}
		}
	}
	if dark < 100 {
		t.Errorf("%d dark pixels where the label should be: the page's text was not drawn", dark)
	}
	if filepath.Dir(res.Path) != dir {
		t.Errorf("the page is at %s, outside the scratch directory %s", res.Path, dir)
	}
	// This project's machines and CI have every layer; a warning here would be a finding.
	if w := d.Degraded(); w != "" {
		t.Errorf("degraded: %s", w)
	}
	inForce, _ := d.Confinement()
	t.Logf("confinement: %s", inForce)
}

// countingListener accepts loopback connections and counts them.
func countingListener(t *testing.T) (url string, count *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	count = new(atomic.Int64)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			count.Add(1)
			c.Close()
		}
	}()
	return "http://" + ln.Addr().String() + "/x.png", count
}

// redPNG is a PNG that would show as red wherever an <image> loaded it.
func redPNG(t *testing.T) []byte {
	img := image.NewRGBA(image.Rect(0, 0, 8, 8))
	for i := range img.Pix {
		img.Pix[i] = []byte{255, 0, 0, 255}[i%4]
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestDocumentSVGLoadsNothingOutside(t *testing.T) {
	d := newDocuments(t, transcoder.DocumentConfig{Size: 400, MaxPixels: 100_000_000, MaxCPUTime: 30 * time.Second})
	url, conns := countingListener(t)
	secretDir := t.TempDir() // outside the scratch directory, like /etc/passwd
	secret := filepath.Join(secretDir, "passwd.png")
	if err := os.WriteFile(secret, redPNG(t), 0o644); err != nil {
		t.Fatal(err)
	}
	dir, in := writeInput(t, "input", testenv.HostileSVG(secret, url))
	res, err := d.Render(renderCtx(t), dir, in, transcoder.SVG)
	if err != nil {
		t.Fatalf("Render: %v", err)
	}
	if res.Pages != 1 || res.Width != 400 || res.Height != 200 {
		t.Errorf("result = %+v, want 1 page, 400 × 200", res)
	}
	img := decodePNG(t, res.Path)
	for y := 0; y < img.Bounds().Dy(); y += 5 {
		for x := 0; x < img.Bounds().Dx(); x += 5 {
			if c := img.At(x, y); !near(c, blue) {
				t.Fatalf("pixel (%d, %d) is %v, not the background: an external image was drawn", x, y, c)
			}
		}
	}
	if n := conns.Load(); n != 0 {
		t.Errorf("the renderer made %d connections to the loopback listener, want 0", n)
	}
}

// TestDocumentSVGTriesNothingOutside watches the render child with strace: not only is nothing
// loaded, nothing is tried (librsvg, given the SVG without a base URL, refuses every external
// reference before opening anything); the confinement is the second wall, tested in internal/confine.
func TestDocumentSVGTriesNothingOutside(t *testing.T) {
	strace := requireBinary(t, "strace")
	url, conns := countingListener(t)
	secret := filepath.Join(t.TempDir(), "passwd.png")
	if err := os.WriteFile(secret, redPNG(t), 0o644); err != nil {
		t.Fatal(err)
	}
	dir, in := writeInput(t, "input", testenv.HostileSVG(secret, url))
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	trace := filepath.Join(t.TempDir(), "trace")
	d := newDocuments(t, transcoder.DocumentConfig{
		Command: []string{strace, "-f", "-qq", "-e", "trace=%file,%network", "-o", trace, exe, "render-document"},
		Size:    400, MaxPixels: 100_000_000, MaxCPUTime: 30 * time.Second,
	})
	if _, err := d.Render(renderCtx(t), dir, in, transcoder.SVG); err != nil {
		t.Fatalf("Render under strace: %v", err)
	}
	log, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(log, []byte("render-document")) || !bytes.Contains(log, []byte(in)) {
		t.Fatalf("the trace does not show the child reading its input; strace saw nothing?\n%s", tail(log))
	}
	for _, line := range strings.Split(string(log), "\n") {
		if strings.Contains(line, filepath.Base(secret)) || strings.Contains(line, "connect(") ||
			strings.Contains(line, "AF_INET") {
			t.Errorf("the render child tried to reach outside: %s", line)
		}
	}
	if n := conns.Load(); n != 0 {
		t.Errorf("%d connections to the loopback listener, want 0", n)
	}
}

func tail(b []byte) string {
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(b)
}

func requireBinary(t *testing.T, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is needed (scripts/install-deps.sh installs it): %v", name, err)
	}
	return path
}

func TestDocumentOverPixelLimitRefusedInWords(t *testing.T) {
	d := newDocuments(t, transcoder.DefaultDocumentConfig())
	for _, tc := range []struct {
		name   string
		data   []byte
		format transcoder.DocumentFormat
		want   string
	}{
		{"svg viewport", []byte(`<svg xmlns="http://www.w3.org/2000/svg" width="100000" height="100000" viewBox="0 0 100000 100000"><rect width="100000" height="100000" fill="red"/></svg>`),
			transcoder.SVG, "the SVG's canvas is 100000 × 100000 pixels (10000 megapixels); the limit is 100 megapixels"},
		{"pdf 200-inch page", makePDF(200*72, 200*72, red), transcoder.PDF,
			"the PDF's first page is 200 × 200 inches (14400 × 14400 points), 207.4 megapixels at 72 dpi; the limit is 100 megapixels"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, in := writeInput(t, "input", tc.data)
			start := time.Now()
			_, err := d.Render(renderCtx(t), dir, in, tc.format)
			if err == nil {
				t.Fatal("rendered, want refused")
			}
			if !transcoder.IsBadInput(err) || err.Error() != tc.want {
				t.Errorf("error = %q (bad input: %v),\nwant %q", err, transcoder.IsBadInput(err), tc.want)
			}
			if _, serr := os.Stat(filepath.Join(dir, "page.png")); !errors.Is(serr, os.ErrNotExist) {
				t.Errorf("a page was written for a refused document (%v)", serr)
			}
			t.Logf("refused in %s", time.Since(start).Round(time.Millisecond))
		})
	}
}

// heavySVG takes minutes of CPU time to render (turbulence and a wide blur over 4 megapixels,
// three times): a document made to hang the renderer.
func heavySVG() []byte {
	rects := strings.Repeat(`<rect width="2000" height="2000" filter="url(#f)" opacity="0.5"/>`, 3)
	return []byte(`<svg xmlns="http://www.w3.org/2000/svg" width="2000" height="2000"><filter id="f">` +
		`<feTurbulence baseFrequency="0.01" numOctaves="10"/><feGaussianBlur stdDeviation="50"/></filter>` + rects + `</svg>`)
}

func TestDocumentHangStoppedAtCPULimit(t *testing.T) {
	d := newDocuments(t, transcoder.DocumentConfig{Size: 2048, MaxPixels: 100_000_000, MaxCPUTime: time.Second})
	dir, in := writeInput(t, "input", heavySVG())
	_, err := d.Render(renderCtx(t), dir, in, transcoder.SVG)
	want := "the SVG needs more CPU time than the limit of 1s to render"
	if err == nil || !transcoder.IsBadInput(err) || err.Error() != want {
		t.Fatalf("error = %v (bad input: %v), want %q", err, transcoder.IsBadInput(err), want)
	}
	t.Logf("detail: %s", transcoder.ErrorDetail(err))
}

// TestDocumentCrashIsTheChildsNotTheWorkers crashes the render child in the middle of a render, as
// a loader's segfault would, and expects a failure in words (this test process being the worker).
func TestDocumentCrashIsTheChildsNotTheWorkers(t *testing.T) {
	d := newDocuments(t, transcoder.DocumentConfig{Size: 2048, MaxPixels: 100_000_000, MaxCPUTime: time.Minute})
	dir, in := writeInput(t, "input", heavySVG())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	killed := make(chan int, 1)
	go func() {
		// The confined stage's command line names this job's scratch directory and --confined.
		for ctx.Err() == nil {
			if pid := findProcess("--scratch="+dir, "--confined="); pid > 0 {
				if err := syscall.Kill(pid, syscall.SIGSEGV); err == nil {
					killed <- pid
					return
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	_, err := d.Render(ctx, dir, in, transcoder.SVG)
	select {
	case <-killed:
	default:
		t.Fatalf("the child was never found to crash it; Render returned %v", err)
	}
	want := "the SVG crashed the renderer (it is damaged or made to attack it)"
	if err == nil || !transcoder.IsBadInput(err) || err.Error() != want {
		t.Fatalf("error = %v (bad input: %v), want %q", err, transcoder.IsBadInput(err), want)
	}
	t.Logf("detail: %s", transcoder.ErrorDetail(err))
	// The worker goes on: the next document renders.
	dir, in = writeInput(t, "input", makePDF(100, 100, green))
	if _, err := d.Render(renderCtx(t), dir, in, transcoder.PDF); err != nil {
		t.Fatalf("the next render: %v", err)
	}
}

// findProcess returns the pid of a process whose command line contains every one of parts, or 0.
func findProcess(parts ...string) int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		all := true
		for _, p := range parts {
			all = all && bytes.Contains(cmdline, []byte(p))
		}
		if all {
			return pid
		}
	}
	return 0
}

// TestDocumentFuzzedPDFsFailInWords renders damaged copies of a clean PDF (bytes flipped, runs
// overwritten with garbage, cut off): each renders or fails as bad input in words that name no
// scratch path, and the worker lives through all of them.
func TestDocumentFuzzedPDFsFailInWords(t *testing.T) {
	d := newDocuments(t, transcoder.DocumentConfig{Size: 512, MaxPixels: 100_000_000, MaxCPUTime: 10 * time.Second})
	clean := makePDF(595, 842, red, green, blue)
	rng := rand.New(rand.NewPCG(32, 6))
	var rendered, refused int
	for i := range 16 {
		data := bytes.Clone(clean)
		switch i % 3 {
		case 0: // bytes flipped
			for range 1 + rng.IntN(20) {
				data[rng.IntN(len(data))] ^= byte(1 + rng.IntN(255))
			}
		case 1: // a run overwritten with garbage
			at := rng.IntN(len(data) - 64)
			for j := range 64 {
				data[at+j] = byte(rng.IntN(256))
			}
		case 2: // cut off
			data = data[:16+rng.IntN(len(data)-16)]
		}
		dir, in := writeInput(t, "input", data)
		_, err := d.Render(renderCtx(t), dir, in, transcoder.PDF)
		if err == nil {
			rendered++
			continue
		}
		refused++
		words := map[string]bool{
			"the PDF could not be read (damaged, cut off or not a PDF)":         true,
			"the PDF crashed the renderer (it is damaged or made to attack it)": true,
			"the PDF needs more CPU time than the limit of 10s to render":       true,
		}
		// A damaged MediaBox may also make the page too large or empty: refused by its size.
		if !transcoder.IsBadInput(err) || !words[err.Error()] && !strings.HasPrefix(err.Error(), "the PDF's first page ") {
			t.Errorf("mutation %d: error = %q (bad input: %v), want bad input in one of the renderer's sentences", i, err, transcoder.IsBadInput(err))
		}
	}
	t.Logf("%d rendered, %d refused", rendered, refused)
}

// TestDocumentOverMemoryRefusedInWords renders an SVG whose filter keeps 150 page-sized intermediate
// results (2.4 GB at 2048 pixels) under the smallest address space the renderer takes.
func TestDocumentOverMemoryRefusedInWords(t *testing.T) {
	d := newDocuments(t, transcoder.DocumentConfig{Size: 2048, MaxPixels: 100_000_000, MaxCPUTime: 30 * time.Second,
		MaxMemoryBytes: 2 << 30})
	var prims, merge strings.Builder
	for i := range 150 {
		fmt.Fprintf(&prims, `<feFlood flood-color="#%02x0000" result="r%d"/>`, i, i)
		fmt.Fprintf(&merge, `<feMergeNode in="r%d"/>`, i)
	}
	svg := `<svg xmlns="http://www.w3.org/2000/svg" width="2048" height="2048"><filter id="f" x="0" y="0" width="1" height="1">` +
		prims.String() + `<feMerge>` + merge.String() + `</feMerge></filter><rect width="2048" height="2048" filter="url(#f)"/></svg>`
	dir, in := writeInput(t, "input", []byte(svg))
	_, err := d.Render(renderCtx(t), dir, in, transcoder.SVG)
	want := "the SVG needs more memory than the limit of 2048 MiB to render"
	if err == nil || !transcoder.IsBadInput(err) || err.Error() != want {
		t.Fatalf("error = %v (bad input: %v), want %q", err, transcoder.IsBadInput(err), want)
	}
	t.Logf("detail: %s", transcoder.ErrorDetail(err))
}

func TestDocumentConfigRefusesAnAddressSpaceTheChildCannotStartIn(t *testing.T) {
	cfg := transcoder.DefaultDocumentConfig()
	cfg.MaxMemoryBytes = 1 << 30
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "document max memory must be at least 2048 MiB") {
		t.Errorf("Validate = %v, want the minimum named", err)
	}
	vcfg := transcoder.DefaultVideoConfig()
	vcfg.MaxMemoryBytes = 1 << 30 // enough for ffmpeg, not for the render child
	_, err := transcoder.NewDocuments(context.Background(), newVideos(t, vcfg), transcoder.DefaultDocumentConfig())
	if err == nil || !strings.Contains(err.Error(), "set the document max memory") {
		t.Errorf("NewDocuments = %v, want a refusal saying to set the document max memory", err)
	}
}

// TestDocumentEICARFixtureIsAPDF: the infected case of the document kind's tests is a real PDF (it
// renders) that carries the EICAR string clamd looks for anywhere in the bytes.
func TestDocumentEICARFixtureIsAPDF(t *testing.T) {
	d := newDocuments(t, transcoder.DocumentConfig{Size: 256, MaxPixels: 100_000_000, MaxCPUTime: 10 * time.Second})
	data := testenv.MakePDF(testenv.PDFOpts{Width: 595, Height: 842, Fills: []color.RGBA{red}, Comment: testenv.EICAR})
	if !bytes.Contains(data, []byte(testenv.EICAR)) || !bytes.HasPrefix(data, []byte("%PDF-")) {
		t.Fatal("the fixture does not carry EICAR in a PDF")
	}
	dir, in := writeInput(t, "input", data)
	res, err := d.Render(renderCtx(t), dir, in, transcoder.PDF)
	if err != nil || res.Pages != 1 {
		t.Fatalf("Render = %+v, %v; want one page rendered", res, err)
	}
}

// TestDocumentRendersDegradedWithoutLandlock: on a kernel without Landlock (simulated) the renderer
// still starts and renders, says what is missing for the start-up log, and a hostile SVG still loads
// nothing (librsvg has no base URL; seccomp still refuses sockets).
func TestDocumentRendersDegradedWithoutLandlock(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	d := newDocuments(t, transcoder.DocumentConfig{Command: []string{exe, "render-document-without-landlock"},
		Size: 400, MaxPixels: 100_000_000, MaxCPUTime: 30 * time.Second})
	w := d.Degraded()
	if !strings.Contains(w, "without landlock (function not implemented)") || !strings.Contains(w, "in force: seccomp-no-sockets") {
		t.Errorf("Degraded = %q, want Landlock named missing and seccomp in force", w)
	}
	t.Logf("warning: %s", w)
	url, conns := countingListener(t)
	secret := filepath.Join(t.TempDir(), "passwd.png")
	if err := os.WriteFile(secret, redPNG(t), 0o644); err != nil {
		t.Fatal(err)
	}
	dir, in := writeInput(t, "input", testenv.HostileSVG(secret, url))
	res, err := d.Render(renderCtx(t), dir, in, transcoder.SVG)
	if err != nil {
		t.Fatalf("Render: %v", err)
	}
	img := decodePNG(t, res.Path)
	for y := 0; y < img.Bounds().Dy(); y += 5 {
		for x := 0; x < img.Bounds().Dx(); x += 5 {
			if c := img.At(x, y); !near(c, blue) {
				t.Fatalf("pixel (%d, %d) is %v, not the background: an external image was drawn", x, y, c)
			}
		}
	}
	if n := conns.Load(); n != 0 {
		t.Errorf("%d connections to the loopback listener, want 0", n)
	}
}
