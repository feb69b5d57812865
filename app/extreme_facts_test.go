package app_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/app"
	"github.com/mediaworker/mediaworker/facts"
	"github.com/mediaworker/mediaworker/internal/testenv"
)

// TestExtremeAspectRatiosGetFacts: issue 31 item 11. A 1×65535 or 65535×1 picture succeeded with no
// asset facts and no warning, though the contract promises them on every success (docs/contract.md,
// "Asset facts"). Now it gets them, from a 1×100 (100×1) copy: a placeholder, its colours (three
// quarters red, then blue) and a perceptual hash. Every answer is checked against the response
// schema as it arrives (world.listen).
func TestExtremeAspectRatiosGetFacts(t *testing.T) {
	w := startWorld(t, app.StorageNATS, testenv.StartClamd(t), nil)
	dir := t.TempDir()
	for _, wh := range [][2]int{{1, 65535}, {65535, 1}} {
		name := fmt.Sprintf("%dx%d.png", wh[0], wh[1])
		t.Run(name, func(t *testing.T) {
			r := w.await(w.request(w.upload(testenv.MakeStripePNG(t, dir, name, wh[0], wh[1]), "thin/"+name)), time.Minute)
			if !r.Success || len(r.Processed) != 3 {
				t.Fatalf("want a success with 3 variants, got %+v", r)
			}
			md := r.Metadata
			if md == nil || md.Width != wh[0] || md.Height != wh[1] {
				t.Fatalf("metadata %+v, want %d×%d", md, wh[0], wh[1])
			}
			if md.ThumbHash == "" || len(md.PHash) != 16 || md.DominantColor != "#ff0000" ||
				len(md.Palette) != 2 || md.Palette[1] != "#0000ff" || md.FactsAlgorithm != facts.Version || len(md.SHA256) != 64 {
				t.Errorf("asset facts: thumbhash %q phash %q dominant %q palette %v algorithm %q sha256 %q; want all of them, red then blue",
					md.ThumbHash, md.PHash, md.DominantColor, md.Palette, md.FactsAlgorithm, md.SHA256)
			}
			if len(r.Warnings) != 0 {
				t.Errorf("warnings %q, want none", r.Warnings)
			}
		})
	}
}
