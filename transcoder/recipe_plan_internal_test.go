package transcoder

import (
	"math/rand/v2"
	"testing"
)

// TestCoverGeometry: for any source and box, the cover box never asks for more pixels than the
// source has and keeps the box's aspect ratio to within rounding; the scaled size covers it with one
// side exact and the source's aspect ratio kept to within a pixel; and the decode box lets the
// decoded picture cover it without enlarging.
func TestCoverGeometry(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		srcW, srcH := 1+r.IntN(6000), 1+r.IntN(6000)
		s := ImageVariantSpec{Name: "v", Width: 1 + r.IntN(3000), Height: 1 + r.IntN(3000), Fit: FitCover}
		cw, ch := coverBox(s, srcW, srcH)
		if cw > srcW || ch > srcH || cw > s.Width || ch > s.Height || cw < 1 || ch < 1 {
			t.Fatalf("%dx%d source, %dx%d box: cover %dx%d", srcW, srcH, s.Width, s.Height, cw, ch)
		}
		if cw != s.Width || ch != s.Height { // shrunk: one side is the source's, the ratio the box's
			if cw != srcW && ch != srcH {
				t.Fatalf("%dx%d source, %dx%d box: cover %dx%d fills neither side", srcW, srcH, s.Width, s.Height, cw, ch)
			}
			if d := float64(cw)*float64(s.Height) - float64(ch)*float64(s.Width); d > float64(max(s.Width, s.Height)) || -d > float64(max(s.Width, s.Height)) {
				t.Fatalf("%dx%d source, %dx%d box: cover %dx%d bends the ratio", srcW, srcH, s.Width, s.Height, cw, ch)
			}
		}

		b := decodeBox([]ImageVariantSpec{s}, srcW, srcH)
		dw, dh := fitWithinBox(srcW, srcH, b)
		if dw < cw-1 || dh < ch-1 {
			t.Fatalf("%dx%d source, %dx%d box: decoded at %dx%d (box %+v), short of the cover %dx%d", srcW, srcH, s.Width, s.Height, dw, dh, b, cw, ch)
		}
		rw, rh := coverScale(dw, dh, cw, ch)
		if rw < cw || rh < ch || (rw != cw && rh != ch) {
			t.Fatalf("%dx%d decoded, cover %dx%d: scaled to %dx%d", dw, dh, cw, ch, rw, rh)
		}
		if d := float64(rw)*float64(dh) - float64(rh)*float64(dw); d > float64(max(dw, dh)) || -d > float64(max(dw, dh)) {
			t.Fatalf("%dx%d decoded, cover %dx%d: scaled to %dx%d bends the ratio", dw, dh, cw, ch, rw, rh)
		}
	}
}

// TestDecodeBox: the default recipe decodes to fit its high box, as before recipes; a recipe
// decodes for the variant needing the most pixels, a cover variant bounding one side only.
func TestDecodeBox(t *testing.T) {
	cfg := DefaultImageConfig()
	for _, src := range [][2]int{{4000, 3000}, {300, 200}, {700, 5000}} {
		if b := decodeBox(cfg.DefaultRecipe(), src[0], src[1]); b != (bounds{cfg.High, cfg.High}) {
			t.Errorf("%v: default recipe decodes to %+v", src, b)
		}
	}
	recipe := []ImageVariantSpec{
		{Name: "thumb", Width: 320},
		{Name: "card", Width: 1200, Height: 630, Fit: FitCover},
	}
	if b := decodeBox(recipe, 4000, 3000); b != (bounds{w: 1200}) {
		t.Errorf("card from 4000x3000: %+v, want width 1200", b)
	}
	if b := decodeBox(recipe, 1000, 3000); b != (bounds{w: 1000}) {
		t.Errorf("card from 1000x3000: %+v, want width 1000 (the source's: never enlarged)", b)
	}
	if b := decodeBox(recipe, 4000, 1000); b != (bounds{h: 630}) {
		t.Errorf("card from 4000x1000: %+v, want height 630", b)
	}
	if !(bounds{2048, 2048}).contains(bounds{1024, 1024}) || (bounds{1024, 0}).contains(bounds{0, 500}) || !unbounded.contains(bounds{0, 5}) {
		t.Error("contains")
	}
}
