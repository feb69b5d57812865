package facts

import (
	"fmt"
	"image"
	"sort"
)

// Dominant colour and palette: a coarse histogram merged into clusters, chosen over k-means because it
// is deterministic without a seed, needs no iteration count, and its answer for a flat colour is that
// colour exactly (a cluster's colour is the mean of its pixels, not a bin centre).
const (
	binBits       = 4    // bits kept per channel: 16 levels, 4096 bins
	mergeDistance = 48.0 // bins whose mean is this close (0–255 RGB, Euclidean) to a cluster's seed join it
	paletteSize   = 5
	paletteShare  = 0.01 // a cluster below this share of the weight is noise, not a palette colour
)

type colorSum struct {
	w, r, g, b float64    // weight and weighted sums of 0–255 channels
	seed       [3]float64 // a cluster's first (heaviest) bin's mean
}

func (c *colorSum) add(o colorSum) {
	c.w += o.w
	c.r += o.r
	c.g += o.g
	c.b += o.b
}

func (c colorSum) mean() [3]float64 { return [3]float64{c.r / c.w, c.g / c.w, c.b / c.w} }

func (c colorSum) hex() string {
	m := c.mean()
	return fmt.Sprintf("#%02x%02x%02x", round8(m[0]), round8(m[1]), round8(m[2]))
}

func round8(v float64) uint8 {
	if v <= 0 {
		return 0
	}
	if v >= 255 {
		return 255
	}
	return uint8(v + 0.5)
}

// dominantColors returns the dominant colour and the palette (most common first) of img, whose pixels
// are weighted by their alpha so a half-transparent fringe counts for half and a fully transparent area
// (whatever RGB it stores) not at all. Both are empty when no pixel is visible.
func dominantColors(img *image.NRGBA) (string, []string) {
	const levels = 1 << binBits
	bins := make([]colorSum, levels*levels*levels)
	w, h := img.Rect.Dx(), img.Rect.Dy()
	for y := 0; y < h; y++ {
		row := img.Pix[y*img.Stride : y*img.Stride+w*4]
		for x := 0; x < w; x++ {
			p := row[x*4 : x*4+4]
			if p[3] == 0 {
				continue
			}
			wt := float64(p[3]) / 255
			k := int(p[0]>>(8-binBits))<<(2*binBits) | int(p[1]>>(8-binBits))<<binBits | int(p[2]>>(8-binBits))
			bins[k].w += wt
			bins[k].r += wt * float64(p[0])
			bins[k].g += wt * float64(p[1])
			bins[k].b += wt * float64(p[2])
		}
	}
	var used []colorSum
	total := 0.0
	for _, b := range bins {
		if b.w > 0 {
			used = append(used, b)
			total += b.w
		}
	}
	if len(used) == 0 {
		return "", nil
	}
	// Stable sorts: equal weights keep bin order (and clusters their creation order), so the answer
	// never depends on the sort's internals.
	sort.SliceStable(used, func(i, j int) bool { return used[i].w > used[j].w })

	// Greedy merge, heaviest bin first: a bin joins the nearest cluster whose seed (its first, heaviest
	// bin's mean) is within mergeDistance, else it seeds a new cluster. Measuring against the seed, not
	// the drifting mean, keeps a cluster's spread bounded and the result independent of float drift.
	var clusters []colorSum
	for _, b := range used {
		m := b.mean()
		best, bestD := -1, 0.0
		for i, c := range clusters {
			d := dist2(m, c.seed)
			if d <= mergeDistance*mergeDistance && (best < 0 || d < bestD) {
				best, bestD = i, d
			}
		}
		if best < 0 {
			b.seed = m
			clusters = append(clusters, b)
			continue
		}
		clusters[best].add(b)
	}
	sort.SliceStable(clusters, func(i, j int) bool { return clusters[i].w > clusters[j].w })

	var palette []string
	for _, c := range clusters {
		// The dominant colour is always the palette's first, however flat the histogram.
		if len(palette) == paletteSize || (len(palette) > 0 && c.w < paletteShare*total) {
			break
		}
		palette = append(palette, c.hex())
	}
	return clusters[0].hex(), palette
}

func dist2(a, b [3]float64) float64 {
	dr, dg, db := a[0]-b[0], a[1]-b[1], a[2]-b[2]
	return dr*dr + dg*dg + db*db
}
