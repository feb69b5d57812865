package transcoder

import (
	"math"
	"testing"
)

// pqCode is the 16-bit code value of light in cd/m² (inverse of pqEOTF, by bisection).
func pqCode(nits float64) uint16 {
	lo, hi := 0.0, 1.0
	for range 60 {
		mid := (lo + hi) / 2
		if 10000*pqEOTF(mid) < nits {
			lo = mid
		} else {
			hi = mid
		}
	}
	return uint16(math.Round(lo * 65535))
}

// The tone curve: SDR white comes out at 1 whatever white the file gave it (100 or 203 cd/m²), a
// picture with highlights keeps diffuse white (203 cd/m²) below 1 and its peak at 1, and the curve
// never decreases.
func TestToneCurve(t *testing.T) {
	pq := cicp{primaries: cicpBT2020, transfer: cicpPQ}
	for _, c := range []struct {
		name         string
		peak, at     float64 // cd/m²
		want, within float64
	}{
		{"SDR white at 203", 203, 203, 1, 0.01},
		{"SDR white at 100", 100, 100, 1, 0.01},
		{"mid grey of SDR at 203", 203, 203 * 0.18, 0.18, 0.01},
		{"peak of a 1000 cd/m² picture", 1000, 1000, 1, 0.01},
		{"diffuse white under a 1000 cd/m² peak", 1000, 203, 0.87, 0.06},
		{"shadows under a 1000 cd/m² peak", 1000, 20, 20.0 / 203, 0.01},
	} {
		lut, _, _ := pq.toneCurve()(pqCode(c.peak))
		if got := float64(lut[pqCode(c.at)]); math.Abs(got-c.want) > c.within {
			t.Errorf("%s: %.3f, want %.3f ± %.2f", c.name, got, c.want, c.within)
		}
	}
	lut, _, oetf := pq.toneCurve()(pqCode(4000))
	for v := 1; v < len(lut); v++ {
		if lut[v] < lut[v-1] {
			t.Fatalf("the curve decreases at code %d: %v after %v", v, lut[v], lut[v-1])
		}
	}
	if oetf[0] != 0 || oetf[65535] != 255 || oetf[14143] != 128 {
		t.Errorf("sRGB table: %d %d %d, want 0, 255 and 128 for 21.58 %% light", oetf[0], oetf[65535], oetf[14143])
	}
	hlg := cicp{primaries: cicpBT2020, transfer: cicpHLG}
	// HLG's reference white (75 % signal) is 203 cd/m² on a 1000 cd/m² display.
	if got := hlg.displayLight(0.75); math.Abs(got-203) > 2 {
		t.Errorf("HLG 75 %% is %.1f cd/m², want 203", got)
	}
}
