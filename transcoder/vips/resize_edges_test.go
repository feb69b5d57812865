package vips

import (
	"bytes"
	"fmt"
	"image"
	"image/png"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// greyPNG writes a w×h 8-bit grey PNG of noise.
func greyPNG(t *testing.T, w, h int) string {
	t.Helper()
	img := image.NewGray(image.Rect(0, 0, w, h))
	r := rand.New(rand.NewSource(3))
	for i := range img.Pix {
		img.Pix[i] = uint8(r.Intn(256))
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "grey.png")
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestResizeEdgesAreLibvipsExact: the exact resize at the sizes where its kernel's taps reach past
// the picture's edges on both sides at once (1, 2, 3 pixels across), odd and prime sizes, a strip as
// wide as a WebP may be, shrinks just above 1 and just under 4, a grey PNG, and every EXIF
// orientation that turns the picture by a quarter into a box that is not square: sample for sample
// libvips' own exact thumbnail (and, under valgrind or ASan, no read or write outside a buffer).
func TestResizeEdgesAreLibvipsExact(t *testing.T) {
	if err := Init(); err != nil {
		t.Fatal(err)
	}
	type tc struct {
		w, h, bw, bh int
		format       string
	}
	cases := []tc{
		{1, 1, 1, 1, "png"},
		{2, 2, 1, 1, "png"},
		{3, 5, 2, 2, "png"},
		{3, 5, 2, 2, "jpeg"},
		{1, 7, 4, 4, "png"},
		{7, 1, 4, 4, "png"},
		{2, 9, 3, 3, "jpeg"},
		{9, 2, 3, 3, "jpeg"},
		{3, 3, 1, 1, "png"},
		{5, 3, 2, 2, "png"},
		{17, 4093, 2048, 2048, "png"},
		{4093, 17, 2048, 2048, "jpeg"},
		{16383, 3, 8192, 8192, "png"},
		{3, 16383, 8192, 8192, "png"},
		{1001, 13, 1000, 1000, "png"}, // shrink 1.001
		{399, 302, 100, 100, "png"},   // shrink 3.99
		{401, 303, 101, 101, "jpeg"},  // shrink 3.97
		// A side shorter than the factor: libjpeg's shrink-on-load must not take it to 0 rows
		// (libvips 8.14's jpegload then aborts the process).
		{33, 65, 17, 22, "grey"},
		{999, 777, 300, 300, "grey"},
	}
	for _, c := range cases {
		name := fmt.Sprintf("%s %dx%d into %dx%d", c.format, c.w, c.h, c.bw, c.bh)
		var src string
		if c.format == "grey" {
			src = greyPNG(t, c.w, c.h)
		} else {
			src = noisyPhoto(t, c.w, c.h, c.format)
		}
		im, err := ThumbnailBox(src, c.bw, c.bh, false, false)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		sameImage(t, name, pixelsOf(t, im), exactThumbnail(t, src, c.bw, c.bh))
		im.Close()
	}
	// A side shorter than the JPEG's shrink-on-load factor: it must not load 0 rows high (libvips
	// 8.14's jpegload then fails an assertion and aborts the process). Shrinks of 4 and more are
	// vips_thumbnail's own (vectorised) resize: the size is what is compared.
	for _, c := range []tc{{26, 2, 2, 1, "jpeg"}, {2, 26, 1, 2, "jpeg"}, {9000, 1, 2048, 2048, "jpeg"}, {1, 9000, 300, 2048, "jpeg"}} {
		src := noisyPhoto(t, c.w, c.h, c.format)
		im, err := ThumbnailBox(src, c.bw, c.bh, false, false)
		if err != nil {
			t.Fatalf("%dx%d into %dx%d: %v", c.w, c.h, c.bw, c.bh, err)
		}
		if got, want := pixelsOf(t, im).Bounds(), exactThumbnail(t, src, c.bw, c.bh).Bounds(); got != want {
			t.Errorf("%dx%d into %dx%d: %v, want %v", c.w, c.h, c.bw, c.bh, got, want)
		}
		im.Close()
	}
	for o := 5; o <= 8; o++ {
		src := noisyPhoto(t, 301, 203, "jpeg")
		if b, err := exec.Command("exiftool", "-Orientation#="+strconv.Itoa(o), "-overwrite_original", src).CombinedOutput(); err != nil {
			t.Fatalf("exiftool: %v\n%s", err, b)
		}
		im, err := ThumbnailBox(src, 97, 160, false, false)
		if err != nil {
			t.Fatal(err)
		}
		sameImage(t, "orientation "+strconv.Itoa(o)+" into 97x160", pixelsOf(t, im), exactThumbnail(t, src, 97, 160))
		im.Close()
	}
}
