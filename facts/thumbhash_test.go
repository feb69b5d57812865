package facts

import (
	"encoding/base64"
	"fmt"
	"image"
	"image/color"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mediaworker/mediaworker/internal/testenv"
)

// The ThumbHash tests judge the Go port by Evan Wallace's reference implementation, run under node from
// testdata/node (npm package "thumbhash", pinned by package-lock.json). A UI decodes our hashes with
// that code or a port of it, so it is the one whose answer counts.

// referenceThumbHash sends requests to testdata/node/reference.mjs and returns its answers, installing
// the pinned package first with `npm ci` when node_modules is missing (a fresh clone, CI).
func referenceThumbHash(t *testing.T, reqs []any, answers any) {
	t.Helper()
	dir := filepath.Join("testdata", "node")
	node := testenv.NPMPackages(t, dir, filepath.Join("thumbhash", "package.json"))

	testenv.NodeJSON(t, node, dir, "reference.mjs", reqs, answers)
}

type encodeReq struct {
	Encode struct {
		W    int    `json:"w"`
		H    int    `json:"h"`
		RGBA []byte `json:"rgba"` // encoding/json writes []byte as std base64, as reference.mjs reads it
	} `json:"encode"`
}

// withinOneStep checks that two ThumbHashes have the same layout (alpha, orientation, luminance grid,
// length) and that each quantised value (header fields, AC nibbles) differs by at most 1.
func withinOneStep(a, b string) error {
	x, err := base64.StdEncoding.DecodeString(a)
	if err != nil {
		return err
	}
	y, err := base64.StdEncoding.DecodeString(b)
	if err != nil {
		return err
	}
	if len(x) != len(y) || len(x) < 5 {
		return fmt.Errorf("lengths %d and %d", len(x), len(y))
	}
	type field struct {
		name        string
		shift, bits int
	}
	h24 := func(h []byte) int { return int(h[0]) | int(h[1])<<8 | int(h[2])<<16 }
	h16 := func(h []byte) int { return int(h[3]) | int(h[4])<<8 }
	get := func(v, shift, bits int) int { return v >> shift & (1<<bits - 1) }
	exact := []struct {
		name string
		a, b int
	}{
		{"hasAlpha", get(h24(x), 23, 1), get(h24(y), 23, 1)},
		{"isLandscape", get(h16(x), 15, 1), get(h16(y), 15, 1)},
		{"lx/ly", get(h16(x), 0, 3), get(h16(y), 0, 3)},
	}
	for _, e := range exact {
		if e.a != e.b {
			return fmt.Errorf("%s %d vs %d", e.name, e.a, e.b)
		}
	}
	for _, f := range []field{{"l_dc", 0, 6}, {"p_dc", 6, 6}, {"q_dc", 12, 6}, {"l_scale", 18, 5}} {
		if d := get(h24(x), f.shift, f.bits) - get(h24(y), f.shift, f.bits); d < -1 || d > 1 {
			return fmt.Errorf("%s %d vs %d", f.name, get(h24(x), f.shift, f.bits), get(h24(y), f.shift, f.bits))
		}
	}
	for _, f := range []field{{"p_scale", 3, 6}, {"q_scale", 9, 6}} {
		if d := get(h16(x), f.shift, f.bits) - get(h16(y), f.shift, f.bits); d < -1 || d > 1 {
			return fmt.Errorf("%s %d vs %d", f.name, get(h16(x), f.shift, f.bits), get(h16(y), f.shift, f.bits))
		}
	}
	for i := 5; i < len(x); i++ { // alpha byte and AC factors: two 4-bit values each
		for _, shift := range []int{0, 4} {
			if d := int(x[i]>>shift&15) - int(y[i]>>shift&15); d < -1 || d > 1 {
				return fmt.Errorf("byte %d nibble at bit %d: %d vs %d", i, shift, x[i]>>shift&15, y[i]>>shift&15)
			}
		}
	}
	return nil
}

type decodeAnswer struct {
	Avg   struct{ R, G, B, A float64 } `json:"avg"`
	Ratio float64                      `json:"ratio"`
	W     int                          `json:"w"`
	H     int                          `json:"h"`
	RGBA  []byte                       `json:"rgba"`
}

// The port is faithful: for the same pixels it writes the same bytes as the reference encoder — on the
// photos' small copies and on images that take the other branches (alpha, portrait, 1 px, a line,
// nothing visible).
func TestThumbHashMatchesTheReferenceEncoder(t *testing.T) {
	inputs := map[string]*image.NRGBA{}
	for _, name := range photos {
		inputs[name] = downscale(loadPhoto(t, name), maxSide)
	}
	synth := func(w, h int, px func(x, y int) color.NRGBA) *image.NRGBA {
		img := image.NewNRGBA(image.Rect(0, 0, w, h))
		for y := 0; y < h; y++ {
			for x := 0; x < w; x++ {
				img.SetNRGBA(x, y, px(x, y))
			}
		}
		return img
	}
	inputs["alpha gradient 100×40"] = synth(100, 40, func(x, y int) color.NRGBA {
		return color.NRGBA{uint8(x * 2), uint8(y * 6), 200, uint8(255 - x*2)}
	})
	inputs["alpha disc 64×64"] = synth(64, 64, func(x, y int) color.NRGBA {
		if (x-32)*(x-32)+(y-32)*(y-32) < 400 {
			return color.NRGBA{240, 120, 20, 255}
		}
		return color.NRGBA{0, 0, 0, 0}
	})
	inputs["portrait 30×100"] = synth(30, 100, func(x, y int) color.NRGBA {
		return color.NRGBA{uint8(y * 2), uint8(255 - y*2), uint8(x * 8), 255}
	})
	inputs["1×1"] = synth(1, 1, func(x, y int) color.NRGBA { return color.NRGBA{12, 34, 56, 255} })
	inputs["line 100×1"] = synth(100, 1, func(x, y int) color.NRGBA { return color.NRGBA{uint8(x), 0, 255, 255} })
	inputs["invisible 10×10"] = synth(10, 10, func(x, y int) color.NRGBA { return color.NRGBA{} })

	// Every cosine the port takes for these inputs, so the reference's engine can supply its own.
	seen := map[float64]bool{}
	cos = func(x float64) float64 { seen[x] = true; return math.Cos(x) }
	for _, img := range inputs {
		if _, err := rgbaToThumbHash(img.Rect.Dx(), img.Rect.Dy(), img.Pix); err != nil {
			t.Fatal(err)
		}
	}
	cos = math.Cos
	var args []float64
	for x := range seen {
		args = append(args, x)
	}

	var names []string
	reqs := []any{map[string][]float64{"cos": args}}
	for name, img := range inputs {
		var r encodeReq
		r.Encode.W, r.Encode.H, r.Encode.RGBA = img.Rect.Dx(), img.Rect.Dy(), img.Pix
		names = append(names, name)
		reqs = append(reqs, r)
	}
	var answers []struct {
		Hash string
		Cos  []float64
	}
	referenceThumbHash(t, reqs, &answers)
	jsCos := map[float64]float64{}
	differ := 0
	for i, x := range args {
		jsCos[x] = answers[0].Cos[i]
		if answers[0].Cos[i] != math.Cos(x) {
			differ++
		}
	}
	t.Logf("%d of the %d cosines differ between node's Math.cos and Go's math.Cos", differ, len(args))

	exact := 0
	for i, name := range names {
		img, want := inputs[name], answers[i+1].Hash
		enc := func() string {
			h, err := rgbaToThumbHash(img.Rect.Dx(), img.Rect.Dy(), img.Pix)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			return base64.StdEncoding.EncodeToString(h)
		}
		// On the engine's cosines: the reference's bytes, exactly.
		cos = func(x float64) float64 {
			c, ok := jsCos[x]
			if !ok {
				t.Fatalf("%s: cosine of %v not asked of the reference", name, x)
			}
			return c
		}
		onJS := enc()
		cos = math.Cos
		if onJS != want {
			t.Errorf("%s: on node's cosines the port gives %s, the reference %s", name, onJS, want)
		}
		// On Go's cosines (what FromImage uses): the same layout, no value more than one step off.
		got := enc()
		if got == want {
			exact++
		} else if err := withinOneStep(got, want); err != nil {
			t.Errorf("%s: Go port %s, reference %s: %v", name, got, want, err)
		} else {
			t.Logf("%s: Go port %s, reference %s: one quantisation step apart", name, got, want)
		}
	}
	t.Logf("on Go's cosines %d of %d hashes are byte for byte the reference's", exact, len(names))

	// withinOneStep itself tells a two-step difference from a one-step one.
	h, _ := base64.StdEncoding.DecodeString(answers[1].Hash)
	h[len(h)-1] ^= 0x20 // bit 1 of the high nibble: ±2
	if withinOneStep(base64.StdEncoding.EncodeToString(h), answers[1].Hash) == nil {
		t.Error("withinOneStep accepts a nibble two steps off")
	}

	if _, err := rgbaToThumbHash(101, 10, make([]byte, 101*10*4)); err == nil {
		t.Error("101×10: no error; the reference refuses it")
	}
}

// What a user sees: the reference decoder turns Facts.ThumbHash back into a placeholder whose average
// colour is the photo's (within 10/255), whose shape is the photo's (within ThumbHash's quantisation),
// and whose regions have the photo's colours.
func TestThumbHashDecodesToThePhoto(t *testing.T) {
	var reqs []any
	imgs := map[string]image.Image{}
	var names []string
	for _, name := range photos {
		img := loadPhoto(t, name)
		imgs[name] = img
		names = append(names, name)
		reqs = append(reqs, map[string]string{"decode": mustFacts(t, img).ThumbHash})
	}
	// A portrait: a crop of the board photo.
	portrait := imgs["board.jpg"].(interface {
		SubImage(image.Rectangle) image.Image
	}).SubImage(image.Rect(200, 0, 330, 238))
	imgs["board.jpg portrait crop"] = portrait
	names = append(names, "board.jpg portrait crop")
	reqs = append(reqs, map[string]string{"decode": mustFacts(t, portrait).ThumbHash})

	var answers []decodeAnswer
	referenceThumbHash(t, reqs, &answers)
	placeholders := map[string]*image.NRGBA{}
	for i, name := range names {
		img, ans := imgs[name], answers[i]
		b := img.Bounds()
		mean := regionMean(img, b)
		avg := [3]float64{ans.Avg.R * 255, ans.Avg.G * 255, ans.Avg.B * 255}
		ratio := float64(b.Dx()) / float64(b.Dy())
		t.Logf("%s: mean %.1f, ThumbHash average %.1f; ratio %.3f, ThumbHash %.3f (%+.1f%%); placeholder %d×%d",
			name, mean, avg, ratio, ans.Ratio, 100*(ans.Ratio/ratio-1), ans.W, ans.H)
		for c := 0; c < 3; c++ {
			if math.Abs(avg[c]-mean[c]) > 10 {
				t.Errorf("%s: ThumbHash average %.1f is more than 10/255 from the mean %.1f", name, avg, mean)
				break
			}
		}
		if ans.Avg.A != 1 {
			t.Errorf("%s: an opaque photo decodes with alpha %v", name, ans.Avg.A)
		}
		// The format keeps the short side in sevenths of the long one: that rounding, plus the 100 px
		// copy's own, is all the shape may lose.
		short, dshort := math.Min(ratio, 1/ratio), math.Min(ans.Ratio, 1/ans.Ratio)
		if math.Abs(short-dshort) > 0.5/7+0.01 || (ratio > 1) != (ans.Ratio > 1) && ratio != 1 {
			t.Errorf("%s: ratio %.3f decodes as %.3f", name, ratio, ans.Ratio)
		}
		if name != "board.jpg portrait crop" && math.Abs(ans.Ratio/ratio-1) > 0.10 {
			t.Errorf("%s: ratio %.3f decodes as %.3f, more than 10%% off", name, ratio, ans.Ratio)
		}
		if len(ans.RGBA) != ans.W*ans.H*4 {
			t.Fatalf("%s: placeholder %d×%d with %d bytes", name, ans.W, ans.H, len(ans.RGBA))
		}
		placeholders[name] = &image.NRGBA{Pix: ans.RGBA, Stride: ans.W * 4, Rect: image.Rect(0, 0, ans.W, ans.H)}
	}

	// Region by region (3×3), each placeholder has its photo's colours — a blur of it, not a guess: its
	// regions are nearer to its own photo's than to any other photo's.
	for _, name := range names {
		own, ownWorst := regionError(placeholders[name], imgs[name])
		t.Logf("%s: placeholder's 3×3 regions are %.1f (mean RGB distance; worst %.1f) from the photo's", name, own, ownWorst)
		// 8–12 for most photos; talk.jpg's saturated orange wall beside black shirts and white signs
		// (28) is what 3×3 chroma terms and the decoder's 1.25× saturation boost can do.
		if own > 35 {
			t.Errorf("%s: placeholder regions are %.1f from the photo's on average; want ≤ 35", name, own)
		}
		for _, other := range names {
			if other == name || strings.HasPrefix(other, name) || strings.HasPrefix(name, other) {
				continue // the portrait crop is part of board.jpg
			}
			if d, _ := regionError(placeholders[name], imgs[other]); d <= own {
				t.Errorf("%s: placeholder is nearer to %s (%.1f) than to its own photo (%.1f)", name, other, d, own)
			}
		}
	}
}

// regionError compares the mean colours of a 3×3 grid over the placeholder and over the photo: the
// mean and the worst RGB distance of the nine.
func regionError(ph *image.NRGBA, img image.Image) (mean, worst float64) {
	b, w, h := img.Bounds(), ph.Rect.Dx(), ph.Rect.Dy()
	for gy := 0; gy < 3; gy++ {
		for gx := 0; gx < 3; gx++ {
			want := regionMean(img, image.Rect(b.Min.X+b.Dx()*gx/3, b.Min.Y+b.Dy()*gy/3,
				b.Min.X+b.Dx()*(gx+1)/3, b.Min.Y+b.Dy()*(gy+1)/3))
			got := regionMean(ph, image.Rect(w*gx/3, h*gy/3, w*(gx+1)/3, h*(gy+1)/3))
			d := math.Sqrt(dist2(got, want))
			mean += d / 9
			worst = math.Max(worst, d)
		}
	}
	return mean, worst
}

// regionMean is the mean colour (0–255) of r in img, which is opaque here.
func regionMean(img image.Image, r image.Rectangle) [3]float64 {
	var s [3]float64
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			cr, cg, cb, _ := img.At(x, y).RGBA()
			s[0] += float64(cr) / 257
			s[1] += float64(cg) / 257
			s[2] += float64(cb) / 257
		}
	}
	n := float64(r.Dx() * r.Dy())
	return [3]float64{s[0] / n, s[1] / n, s[2] / n}
}
