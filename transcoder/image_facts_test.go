package transcoder_test

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/mediaworker/mediaworker/facts"
	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/transcoder"
)

// Issue 20's judged facts, as the worker computes them (libvips' decode, the recipe's smallest
// picture, a box shrink): a photo and two re-encodings of it (another size; another JPEG quality)
// have perceptual hashes within 6 bits of each other, unrelated photos at least 20 apart; a mostly
// blue picture's dominant colour is blue. The photos are other projects' (facts/testdata/README.md).
func TestImageFactsSurviveReencoding(t *testing.T) {
	im := newImages(t, transcoder.DefaultImageConfig())
	dir := t.TempDir()
	hash := func(src string) *facts.Facts {
		t.Helper()
		out := t.TempDir()
		res, err := im.Transform(context.Background(), src, out)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		if res.Facts == nil || len(res.Facts.PHash) != 16 || res.Facts.ThumbHash == "" {
			t.Fatalf("%s: facts %+v", src, res.Facts)
		}
		return res.Facts
	}
	vips := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("vips", args...).CombinedOutput(); err != nil {
			t.Fatalf("vips %v: %v\n%s", args, err, out)
		}
	}
	photos := []string{"board", "jet", "moon", "talk"}
	originals := map[string]*facts.Facts{}
	for _, p := range photos {
		src := filepath.Join("..", "facts", "testdata", p+".jpg")
		smaller := filepath.Join(dir, p+"-small.jpg")
		rougher := filepath.Join(dir, p+"-q30.jpg")
		vips("resize", src, smaller+"[Q=85]", "0.6")
		vips("copy", src, rougher+"[Q=30]")
		orig := hash(src)
		originals[p] = orig
		for _, re := range []string{smaller, rougher} {
			d, err := facts.PHashDistance(orig.PHash, hash(re).PHash)
			if err != nil || d > 6 {
				t.Errorf("%s and its re-encoding %s: phash distance %d (%v), want ≤ 6", p, filepath.Base(re), d, err)
			}
		}
	}
	for i, a := range photos {
		for _, b := range photos[i+1:] {
			if d, _ := facts.PHashDistance(originals[a].PHash, originals[b].PHash); d < 20 {
				t.Errorf("unrelated photos %s and %s: phash distance %d, want ≥ 20", a, b, d)
			}
		}
	}

	// A mostly blue picture: a blue field with a small white and red patch.
	blue := filepath.Join(dir, "blue.png")
	if out, err := exec.Command("ffmpeg", "-v", "error", "-f", "lavfi", "-i", "color=c=0x1e5ac8:s=640x480",
		"-vf", "drawbox=x=40:y=40:w=80:h=60:color=white:t=fill,drawbox=x=500:y=380:w=60:h=40:color=red:t=fill",
		"-frames:v", "1", "-y", blue).CombinedOutput(); err != nil {
		t.Fatalf("ffmpeg: %v\n%s", err, out)
	}
	f := hash(blue)
	var r, g, b int
	if _, err := fmt.Sscanf(f.DominantColor, "#%02x%02x%02x", &r, &g, &b); err != nil {
		t.Fatalf("dominant colour %q: %v", f.DominantColor, err)
	}
	if abs(r-0x1e)+abs(g-0x5a)+abs(b-0xc8) > 24 {
		t.Errorf("a mostly blue picture's dominant colour is %s, want near #1e5ac8", f.DominantColor)
	}
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// TestImageFactsOfExtremeAspectRatios: issue 31. A 1×65535 or 65535×1 picture (the most PNG and
// libvips take on a side) got its variants but no facts: the facts' small copy shrank both sides by
// the long side's factor, and a 1 px side by 655 is 0 px, which libvips refuses. Now the short side
// stays 1 px and the facts are those of a 1×100 or 100×1 stripe.
func TestImageFactsOfExtremeAspectRatios(t *testing.T) {
	im := newImages(t, transcoder.DefaultImageConfig())
	dir := t.TempDir()
	for _, wh := range [][2]int{{1, 65535}, {65535, 1}, {2, 30000}} {
		name := fmt.Sprintf("%dx%d.png", wh[0], wh[1])
		t.Run(name, func(t *testing.T) {
			res, err := im.Transform(context.Background(), testenv.MakeStripePNG(t, dir, name, wh[0], wh[1]), t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			f := res.Facts
			if f == nil {
				t.Fatal("no facts")
			}
			if len(f.PHash) != 16 || f.ThumbHash == "" || f.DominantColor != "#ff0000" || len(f.Palette) != 2 || f.Palette[1] != "#0000ff" {
				t.Errorf("facts %+v, want a phash, a thumbhash, dominant red and a palette of red and blue", *f)
			}
		})
	}
}
