package transcoder_test

import (
	"context"
	"fmt"
	"image"
	"image/jpeg"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"

	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/transcoder"
)

// The variants are checked against references made without libvips: the source decoded by Go's own
// image/jpeg, shrunk by averaging whole blocks of pixels (the sizes are chosen so every variant is an
// integer fraction of the source). A speed-up that made the pictures worse (a cheaper filter, a
// colour shift, a lower quality) shows as a lower PSNR or a shifted mean.

// rgbPlanes is an image as float RGB, row-major.
type rgbPlanes struct {
	w, h int
	px   [][3]float64
}

func planesOf(img image.Image) rgbPlanes {
	b := img.Bounds()
	p := rgbPlanes{w: b.Dx(), h: b.Dy(), px: make([][3]float64, b.Dx()*b.Dy())}
	for y := 0; y < p.h; y++ {
		for x := 0; x < p.w; x++ {
			r, g, bl, _ := img.At(b.Min.X+x, b.Min.Y+y).RGBA()
			p.px[y*p.w+x] = [3]float64{float64(r >> 8), float64(g >> 8), float64(bl >> 8)}
		}
	}
	return p
}

// boxShrink averages f×f blocks.
func (p rgbPlanes) boxShrink(f int) rgbPlanes {
	out := rgbPlanes{w: p.w / f, h: p.h / f}
	out.px = make([][3]float64, out.w*out.h)
	n := float64(f * f)
	for y := 0; y < out.h; y++ {
		for x := 0; x < out.w; x++ {
			var s [3]float64
			for dy := 0; dy < f; dy++ {
				row := (y*f + dy) * p.w
				for dx := 0; dx < f; dx++ {
					v := p.px[row+x*f+dx]
					s[0], s[1], s[2] = s[0]+v[0], s[1]+v[1], s[2]+v[2]
				}
			}
			out.px[y*out.w+x] = [3]float64{s[0] / n, s[1] / n, s[2] / n}
		}
	}
	return out
}

func (p rgbPlanes) means() [3]float64 {
	var s [3]float64
	for _, v := range p.px {
		s[0], s[1], s[2] = s[0]+v[0], s[1]+v[1], s[2]+v[2]
	}
	n := float64(len(p.px))
	return [3]float64{s[0] / n, s[1] / n, s[2] / n}
}

// psnr is the peak signal-to-noise ratio of b against the reference a, in dB.
func psnr(a, b rgbPlanes) float64 {
	var se float64
	for i := range a.px {
		for c := 0; c < 3; c++ {
			d := a.px[i][c] - b.px[i][c]
			se += d * d
		}
	}
	mse := se / float64(3*len(a.px))
	return 10 * math.Log10(255*255/mse)
}

func decodeJPEGFile(t *testing.T, path string) rgbPlanes {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := jpeg.Decode(f)
	if err != nil {
		t.Fatalf("decoding %s with image/jpeg: %v", path, err)
	}
	return planesOf(img)
}

// decodeWebPFile decodes a WebP through the vips CLI into a PNG (the standard library has no WebP
// decoder) and reads that with image/png.
func decodeWebPFile(t *testing.T, path string) rgbPlanes {
	t.Helper()
	pngPath := filepath.Join(t.TempDir(), filepath.Base(path)+".png")
	testenv.ConvertImage(t, path, pngPath)
	f, err := os.Open(pngPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("decoding %s: %v", pngPath, err)
	}
	return planesOf(img)
}

// checkAgainstReference compares each variant with the source shrunk by factors[i] in Go: PSNR at
// least minPSNR[i], and every band's mean within 1.5 of the source's. It returns the PSNRs.
func checkAgainstReference(t *testing.T, src rgbPlanes, res transcoder.ImageResult, factors [3]int, minPSNR [3]float64) [3]float64 {
	t.Helper()
	var psnrs [3]float64
	srcMeans := src.means()
	for i, v := range res.Variants {
		ref := src.boxShrink(factors[i])
		got := decodeWebPFile(t, v.Path)
		if got.w != ref.w || got.h != ref.h {
			t.Fatalf("%s: %dx%d, reference %dx%d", v.Quality, got.w, got.h, ref.w, ref.h)
		}
		p := psnr(ref, got)
		psnrs[i] = p
		m := got.means()
		t.Logf("%s %dx%d: PSNR %.1f dB against the box-shrunk source; mean RGB %.1f %.1f %.1f (source %.1f %.1f %.1f), %d bytes",
			v.Quality, got.w, got.h, p, m[0], m[1], m[2], srcMeans[0], srcMeans[1], srcMeans[2], v.Size)
		if p < minPSNR[i] {
			t.Errorf("%s: PSNR %.1f dB against the reference, want ≥ %.1f", v.Quality, p, minPSNR[i])
		}
		for c := 0; c < 3; c++ {
			if d := math.Abs(m[c] - srcMeans[c]); d > 1.5 {
				t.Errorf("%s: band %d mean %.1f, source %.1f: colours shifted by %.1f (> 1.5 of 255)",
					v.Quality, c, m[c], srcMeans[c], d)
			}
		}
	}
	return psnrs
}

// TestImageVariantsMatchReference: a noisy, detailed photo-sized JPEG without a colour profile (as
// most cameras and editors write them) keeps its colours and its detail in every variant. The sizes
// make every variant an exact fraction of the source, so the reference is a plain block average. The
// bar is what users get from the plain script: one `vips thumbnail` per variant from the original
// (libvips' defaults, the same qualities); ours may be at most 0.5 dB below it.
func TestImageVariantsMatchReference(t *testing.T) {
	cfg := transcoder.DefaultImageConfig()
	cfg.High, cfg.Medium, cfg.Low = 2048, 1024, 512
	im := newImages(t, cfg)
	src := filepath.Join(t.TempDir(), "noisy.jpg")
	testenv.MakeNoisyJPEG(t, src, 4096, 3072, 1)
	out := t.TempDir()
	res, err := im.Transform(context.Background(), src, out)
	if err != nil {
		t.Fatalf("Transform: %v", err)
	}
	checkVariants(t, res, out, [3][2]int{{2048, 1536}, {1024, 768}, {512, 384}})
	ref := decodeJPEGFile(t, src)
	var naive transcoder.ImageResult
	for _, v := range []struct {
		quality string
		size, q int
	}{{"high", cfg.High, cfg.QualityHigh}, {"medium", cfg.Medium, cfg.QualityMedium}, {"low", cfg.Low, cfg.QualityLow}} {
		path := filepath.Join(t.TempDir(), v.quality+".webp")
		testenv.RunVips(t, "thumbnail", src, fmt.Sprintf("%s[Q=%d]", path, v.q), strconv.Itoa(v.size),
			"--height", strconv.Itoa(v.size), "--size", "down")
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		naive.Variants = append(naive.Variants, transcoder.ImageVariant{Quality: "naive " + v.quality, Path: path, Size: st.Size()})
	}
	bar := checkAgainstReference(t, ref, naive, [3]int{2, 4, 8}, [3]float64{})
	for i := range bar {
		bar[i] -= 0.5
	}
	checkAgainstReference(t, ref, res, [3]int{2, 4, 8}, bar)
}

// TestImageGoTestdataKeepsColours: Go's own JPEG test images (4:2:0, 4:4:4, progressive, RGB,
// restart markers, greyscale), smaller than every variant so they are re-encoded at their own size:
// nothing but the WebP encode may change them. (Go's CMYK decoding converts without a colour profile and
// RGB-transform JPEGs it reads differently from libjpeg, so neither is a reference for those.)
func TestImageGoTestdataKeepsColours(t *testing.T) {
	im := newImages(t, transcoder.DefaultImageConfig())
	dir := filepath.Join(runtime.GOROOT(), "src", "image", "testdata")
	for _, name := range []string{"video-001.jpeg", "video-001.q50.444.jpeg", "video-001.progressive.jpeg",
		"video-001.restart2.jpeg", "video-005.gray.jpeg"} {
		t.Run(name, func(t *testing.T) {
			src := filepath.Join(dir, name)
			out := t.TempDir()
			res, err := im.Transform(context.Background(), src, out)
			if err != nil {
				t.Fatalf("Transform: %v", err)
			}
			ref := decodeJPEGFile(t, src)
			want := [3][2]int{{ref.w, ref.h}, {ref.w, ref.h}, {ref.w, ref.h}}
			checkVariants(t, res, out, want)
			checkAgainstReference(t, ref, res, [3]int{1, 1, 1}, [3]float64{31, 31, 31})
		})
	}
}
