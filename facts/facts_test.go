package facts

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// photos are the real photographs in testdata (see testdata/README.md), unrelated to one another.
var photos = []string{"moon.jpg", "jet.jpg", "board.jpg", "talk.jpg"}

func loadPhoto(t *testing.T, name string) image.Image {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := jpeg.Decode(f)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return img
}

// resizeBilinear is a resampler unlike the package's box filter, so a "resized copy" in these tests is
// what another tool would have made, not what FromImage does anyway.
func resizeBilinear(src image.Image, w, h int) *image.RGBA {
	b := src.Bounds()
	out := image.NewRGBA(image.Rect(0, 0, w, h))
	sx, sy := float64(b.Dx())/float64(w), float64(b.Dy())/float64(h)
	at := func(x, y int) [4]float64 {
		x = min(max(x, 0), b.Dx()-1)
		y = min(max(y, 0), b.Dy()-1)
		r, g, bl, a := src.At(b.Min.X+x, b.Min.Y+y).RGBA()
		return [4]float64{float64(r), float64(g), float64(bl), float64(a)}
	}
	for y := 0; y < h; y++ {
		fy := (float64(y)+0.5)*sy - 0.5
		y0 := int(math.Floor(fy))
		ty := fy - float64(y0)
		for x := 0; x < w; x++ {
			fx := (float64(x)+0.5)*sx - 0.5
			x0 := int(math.Floor(fx))
			tx := fx - float64(x0)
			p00, p10, p01, p11 := at(x0, y0), at(x0+1, y0), at(x0, y0+1), at(x0+1, y0+1)
			o := out.PixOffset(x, y)
			for c := 0; c < 4; c++ {
				v := (p00[c]*(1-tx)+p10[c]*tx)*(1-ty) + (p01[c]*(1-tx)+p11[c]*tx)*ty
				out.Pix[o+c] = uint8(v/257 + 0.5)
			}
		}
	}
	return out
}

func reencodeJPEG(t *testing.T, img image.Image, quality int) image.Image {
	t.Helper()
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, img, &jpeg.Options{Quality: quality}); err != nil {
		t.Fatal(err)
	}
	out, err := jpeg.Decode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func mustFacts(t *testing.T, img image.Image) Facts {
	t.Helper()
	f, err := FromImage(img)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func mustDistance(t *testing.T, a, b string) int {
	t.Helper()
	d, err := PHashDistance(a, b)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// A user's check of a perceptual hash: the same photo resized by another tool, recompressed hard, or
// handed over as the small copy the worker really passes, is still "the same" (≤ 6 of 64 bits apart).
func TestPHashSurvivesResizeAndReencoding(t *testing.T) {
	for _, name := range photos {
		img := loadPhoto(t, name)
		b := img.Bounds()
		orig := mustFacts(t, img)
		if len(orig.PHash) != 16 {
			t.Fatalf("%s: phash %q is not 16 hex digits", name, orig.PHash)
		}
		copies := map[string]image.Image{
			"bilinear 61%":          resizeBilinear(img, b.Dx()*61/100, b.Dy()*61/100),
			"JPEG q30":              reencodeJPEG(t, img, 30),
			"96 px + JPEG q60":      reencodeJPEG(t, resizeBilinear(img, 96, max(1, b.Dy()*96/b.Dx())), 60),
			"grown 150% + JPEG q75": reencodeJPEG(t, resizeBilinear(img, b.Dx()*3/2, b.Dy()*3/2), 75),
		}
		for what, c := range copies {
			d := mustDistance(t, orig.PHash, mustFacts(t, c).PHash)
			t.Logf("%s: %s → distance %d", name, what, d)
			if d > 6 {
				t.Errorf("%s: %s is %d bits from the original; want ≤ 6", name, what, d)
			}
		}
	}
}

// …and different photos are far apart (≥ 20 bits), so a threshold between the two separates them.
func TestPHashTellsUnrelatedPhotosApart(t *testing.T) {
	hashes := map[string]string{}
	for _, name := range photos {
		hashes[name] = mustFacts(t, loadPhoto(t, name)).PHash
	}
	for i, a := range photos {
		for _, b := range photos[i+1:] {
			d := mustDistance(t, hashes[a], hashes[b])
			t.Logf("%s (%s) vs %s (%s): distance %d", a, hashes[a], b, hashes[b], d)
			if d < 20 {
				t.Errorf("%s and %s are only %d bits apart; want ≥ 20", a, b, d)
			}
		}
	}
}

func TestPHashDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"0000000000000000", "0000000000000000", 0},
		{"0000000000000000", "ffffffffffffffff", 64},
		{"8000000000000001", "0000000000000000", 2},
		{"ABCDEF0123456789", "abcdef0123456789", 0}, // case does not matter
	} {
		if got := mustDistance(t, c.a, c.b); got != c.want {
			t.Errorf("PHashDistance(%s, %s) = %d; want %d", c.a, c.b, got, c.want)
		}
	}
	for _, bad := range []string{"", "zzzzzzzzzzzzzzzz", "0x00000000000000", "+000000000000000", "000000000000000",
		"00000000000000000", "0000_00000000000", "00000000 0000000", "ffffffffffffffg"} {
		if d, err := PHashDistance(bad, "0000000000000000"); err == nil {
			t.Errorf("PHashDistance(%q, …) = %d, nil; want an error", bad, d)
		}
		if d, err := PHashDistance("0000000000000000", bad); err == nil {
			t.Errorf("PHashDistance(…, %q) = %d, nil; want an error", bad, d)
		}
	}
}

func rgbDistance(hexColor string, want [3]float64) (float64, error) {
	if len(hexColor) != 7 || hexColor[0] != '#' {
		return 0, fmt.Errorf("%q is not #rrggbb", hexColor)
	}
	v, err := strconv.ParseUint(hexColor[1:], 16, 32)
	if err != nil {
		return 0, err
	}
	got := [3]float64{float64(v >> 16), float64(v >> 8 & 255), float64(v & 255)}
	return math.Sqrt(dist2(got, want)), nil
}

// A mostly-blue picture (70%, with sensor-like noise) with a white block and a red disc: the dominant
// colour is its blue, and the palette lists blue, then white, then red. 160×120, so the downscale runs.
func TestDominantColorOfAMostlyBlueImage(t *testing.T) {
	blue := [3]float64{30, 90, 200}
	img := image.NewRGBA(image.Rect(0, 0, 160, 120))
	rng := rand.New(rand.NewPCG(7, 7))
	noise := func(v float64) uint8 { return uint8(min(255, max(0, v+float64(rng.IntN(21)-10)))) }
	for y := 0; y < 120; y++ {
		for x := 0; x < 160; x++ {
			c := blue
			switch {
			case x >= 110 && y < 60: // white block, 50×60 = 15.6%
				c = [3]float64{245, 245, 240}
			case (x-40)*(x-40)+(y-85)*(y-85) <= 22*22: // red disc, ≈ 7.9%
				c = [3]float64{210, 30, 40}
			}
			img.Set(x, y, color.RGBA{noise(c[0]), noise(c[1]), noise(c[2]), 255})
		}
	}
	f := mustFacts(t, img)
	t.Logf("dominant %s, palette %v", f.DominantColor, f.Palette)
	if d, err := rgbDistance(f.DominantColor, blue); err != nil || d > 8 {
		t.Errorf("dominant colour %s is %.1f from the blue %v (%v); want ≤ 8", f.DominantColor, d, blue, err)
	}
	if len(f.Palette) < 3 || f.Palette[0] != f.DominantColor {
		t.Fatalf("palette %v: want the dominant colour first and at least blue, white, red", f.Palette)
	}
	if d, _ := rgbDistance(f.Palette[1], [3]float64{245, 245, 240}); d > 12 {
		t.Errorf("second palette colour %s is %.1f from the white; want ≤ 12", f.Palette[1], d)
	}
	if d, _ := rgbDistance(f.Palette[2], [3]float64{210, 30, 40}); d > 12 {
		t.Errorf("third palette colour %s is %.1f from the red; want ≤ 12", f.Palette[2], d)
	}
}

// Fully transparent pixels carry whatever RGB the encoder left in them; they must not colour the
// result. Here 60% of the pixels are transparent red and 40% opaque green.
func TestDominantColorIgnoresTransparentPixels(t *testing.T) {
	img := image.NewNRGBA(image.Rect(0, 0, 50, 50))
	for y := 0; y < 50; y++ {
		for x := 0; x < 50; x++ {
			if y < 30 {
				img.SetNRGBA(x, y, color.NRGBA{255, 0, 0, 0})
			} else {
				img.SetNRGBA(x, y, color.NRGBA{20, 160, 60, 255})
			}
		}
	}
	f := mustFacts(t, img)
	if f.DominantColor != "#14a03c" || len(f.Palette) != 1 {
		t.Errorf("dominant %s, palette %v; want #14a03c alone", f.DominantColor, f.Palette)
	}

	invisible := image.NewNRGBA(image.Rect(0, 0, 8, 8)) // nothing visible at all
	if f := mustFacts(t, invisible); f.DominantColor != "" || f.Palette != nil || f.ThumbHash == "" || f.PHash == "" {
		t.Errorf("fully transparent image: %+v; want no colours but both hashes", f)
	}
}

// The board photo is green to anyone who looks at it, and the talk photo's wall is orange: the
// dominant colour's hue says so and it is no grey.
func TestDominantColorOfPhotos(t *testing.T) {
	for _, c := range []struct {
		photo          string
		hueFrom, hueTo float64
	}{
		{"board.jpg", 90, 160},
		{"talk.jpg", 10, 40},
	} {
		f := mustFacts(t, loadPhoto(t, c.photo))
		v, err := strconv.ParseUint(f.DominantColor[1:], 16, 32)
		if err != nil {
			t.Fatalf("%s: dominant %q", c.photo, f.DominantColor)
		}
		hue, sat := hueSat(float64(v>>16), float64(v>>8&255), float64(v&255))
		t.Logf("%s: dominant %s (hue %.0f°, saturation %.2f), palette %v", c.photo, f.DominantColor, hue, sat, f.Palette)
		if hue < c.hueFrom || hue > c.hueTo || sat < 0.3 {
			t.Errorf("%s: dominant %s has hue %.0f° and saturation %.2f; want hue %.0f–%.0f°, saturation ≥ 0.3",
				c.photo, f.DominantColor, hue, sat, c.hueFrom, c.hueTo)
		}
	}
}

// hueSat is HSV's hue (degrees) and saturation.
func hueSat(r, g, b float64) (float64, float64) {
	hi, lo := max(r, g, b), min(r, g, b)
	if hi == 0 || hi == lo {
		return 0, 0
	}
	var h float64
	switch hi {
	case r:
		h = math.Mod((g-b)/(hi-lo)*60+360, 360)
	case g:
		h = (b-r)/(hi-lo)*60 + 120
	default:
		h = (r-g)/(hi-lo)*60 + 240
	}
	return h, (hi - lo) / hi
}

func TestFromImage(t *testing.T) {
	if _, err := FromImage(nil); err == nil {
		t.Error("FromImage(nil): no error")
	}
	if _, err := FromImage(image.NewRGBA(image.Rect(3, 3, 3, 10))); err == nil {
		t.Error("FromImage(0×7): no error")
	}
	// Deterministic, and a sub-image (bounds not at 0,0) is read where it lies.
	img := loadPhoto(t, "talk.jpg")
	a, b := mustFacts(t, img), mustFacts(t, img)
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Errorf("two runs differ: %+v vs %+v", a, b)
	}
	sub := img.(interface {
		SubImage(image.Rectangle) image.Image
	}).SubImage(image.Rect(40, 20, 140, 100))
	copied := image.NewRGBA64(image.Rect(0, 0, 100, 80)) // 16 bits a channel: the copy loses nothing
	for y := 0; y < 80; y++ {
		for x := 0; x < 100; x++ {
			copied.Set(x, y, sub.At(40+x, 20+y))
		}
	}
	if s, c := mustFacts(t, sub), mustFacts(t, copied); fmt.Sprint(s) != fmt.Sprint(c) {
		t.Errorf("sub-image %+v differs from its copy %+v", s, c)
	}
}
