package transcoder_test

import (
	"context"
	"fmt"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/transcoder"
)

// HDR stills (10-bit HEIC and AVIF tagged BT.2020 PQ or HLG) look like the SDR picture they were
// made from: within 0.75 of its colourfulness and contrast, where libvips alone made them flat and
// grey (0.3–0.5). The metadata names the transfer, and the facts are the tone-mapped picture's.
func TestImageHDRStillsAreToneMapped(t *testing.T) {
	im := newImages(t, transcoder.DefaultImageConfig())
	dir := t.TempDir()
	sdr := testenv.SDRPattern(192, 128)
	want := planesOf(sdr)
	wantC, wantK := colourfulness(want), rmsContrast(want)
	// The SDR picture's facts, as the worker makes them from it.
	sdrPath := filepath.Join(dir, "sdr.png")
	f, err := os.Create(sdrPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := png.Encode(f, sdr); err != nil {
		t.Fatal(err)
	}
	f.Close()
	sdrRes, err := im.Transform(context.Background(), sdrPath, t.TempDir())
	if err != nil || sdrRes.Facts == nil || sdrRes.HDR != "" {
		t.Fatalf("control: the SDR picture: %v, facts %v, HDR %q", err, sdrRes.Facts, sdrRes.HDR)
	}
	wantFacts := sdrRes.Facts
	for _, tc := range []struct {
		format, transfer string
		white            float64 // cd/m² given to SDR white
	}{
		{"avif", "pq", 203},
		{"heic", "pq", 203},
		{"avif", "pq", 100}, // SDR white at zimg's nominal peak, as some exports write it
		{"avif", "hlg", 203},
		{"heic", "hlg", 203},
	} {
		name := fmt.Sprintf("%s-%s-%.0f", tc.transfer, tc.format, tc.white)
		t.Run(name, func(t *testing.T) {
			path := testenv.MakeHDRStill(t, dir, name+"."+tc.format, tc.format, tc.transfer, tc.white, sdr)
			res, err := im.Transform(context.Background(), path, t.TempDir())
			if err != nil {
				t.Fatalf("Transform: %v", err)
			}
			if res.HDR != tc.transfer {
				t.Errorf("HDR %q, want %q", res.HDR, tc.transfer)
			}
			got := decodeWebPFile(t, res.Variants[0].Path)
			c, k := colourfulness(got)/wantC, rmsContrast(got)/wantK
			t.Logf("colourfulness %.2f, contrast %.2f of the SDR picture's", c, k)
			if c < 0.75 || c > 1/0.75 || k < 0.75 || k > 1/0.75 {
				t.Errorf("colourfulness %.2f and contrast %.2f of the SDR picture's, want both within 0.75–1.33", c, k)
			}
			if res.Facts == nil {
				t.Fatal("no facts")
			}
			// The facts are the tone-mapped picture's: its palette is the SDR picture's.
			t.Logf("palette %v, the SDR picture's %v", res.Facts.Palette, wantFacts.Palette)
			if d := hexDistance(t, res.Facts.DominantColor, wantFacts.DominantColor); d > 16 {
				t.Errorf("dominant colour %s, the SDR picture's %s (%.0f apart)", res.Facts.DominantColor, wantFacts.DominantColor, d)
			}
		})
	}
}

// colourfulness is Hasler and Süsstrunk's measure on 8-bit sRGB.
func colourfulness(p rgbPlanes) float64 {
	var srg, syb, srg2, syb2 float64
	for _, v := range p.px {
		rg := v[0] - v[1]
		yb := 0.5*(v[0]+v[1]) - v[2]
		srg, syb, srg2, syb2 = srg+rg, syb+yb, srg2+rg*rg, syb2+yb*yb
	}
	n := float64(len(p.px))
	mrg, myb := srg/n, syb/n
	vrg, vyb := srg2/n-mrg*mrg, syb2/n-myb*myb
	return math.Sqrt(vrg+vyb) + 0.3*math.Sqrt(mrg*mrg+myb*myb)
}

// rmsContrast is the standard deviation of luma (BT.709 weights on the 8-bit values).
func rmsContrast(p rgbPlanes) float64 {
	var s, s2 float64
	for _, v := range p.px {
		y := 0.2126*v[0] + 0.7152*v[1] + 0.0722*v[2]
		s, s2 = s+y, s2+y*y
	}
	n := float64(len(p.px))
	m := s / n
	return math.Sqrt(s2/n - m*m)
}

// hexDistance is the Euclidean distance of two "#rrggbb" colours, in 8-bit steps.
func hexDistance(t *testing.T, a, b string) float64 {
	t.Helper()
	var ar, ag, ab, br, bg, bb int
	if _, err := fmt.Sscanf(a+" "+b, "#%02x%02x%02x #%02x%02x%02x", &ar, &ag, &ab, &br, &bg, &bb); err != nil {
		t.Fatalf("reading colours %q and %q: %v", a, b, err)
	}
	return math.Sqrt(float64((ar-br)*(ar-br) + (ag-bg)*(ag-bg) + (ab-bb)*(ab-bb)))
}
