package console

import (
	"bytes"
	"encoding/base64"
	"image/png"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mediaworker/mediaworker/internal/testenv"
)

// ThumbHashes package facts made of its test photos (facts/testdata), as responses carry them.
var realThumbHashes = map[string]string{
	"board (landscape)":     "W5gFDYTvmZRnd3hpZYmJifSZC2s2",
	"board crop (portrait)": "F5gBBALdkHm2iaanp+XGnwymCA==",
	"talk":                  "mmkOLY5JZ3ZgjIaIdYmHc2h/hvaI",
	"moon (grey)":           "0fcRDYAGaYh4h4iFd4p3hvh2bH32",
	"jet (square)":          "LwgGBwCzlbhchKf+lUe2R0ilBgAAAAAA",
	"orange disc (alpha)":   "3+yCBIBG+Id4h36Gh4/H+Hh9gHeIN5iHBg==",
}

// referenceDecode runs Evan Wallace's reference decoder (npm "thumbhash" 0.1.1, pinned by package facts'
// test helper in facts/testdata/node, whose reference.mjs this reads and does not change) on reqs,
// installing the package there first if needed (testenv.NPMPackages, under a lock the facts tests
// share).
func referenceDecode(t *testing.T, reqs []any, answers any) {
	t.Helper()
	dir := filepath.Join("..", "facts", "testdata", "node")
	node := testenv.NPMPackages(t, dir, filepath.Join("thumbhash", "package.json"))
	testenv.NodeJSON(t, node, dir, "reference.mjs", reqs, answers)
}

// The port is faithful: for real hashes and for random bytes (every header, short hashes, hashes with
// no width) it draws the reference decoder's pixels — byte for byte on the JavaScript engine's own
// cosines, and within one step per channel on Go's — and fails exactly where the reference draws an
// empty image.
func TestConsoleThumbHashDecoderMatchesTheReference(t *testing.T) {
	var names []string
	var hashes [][]byte
	for name, s := range realThumbHashes {
		h, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			t.Fatal(err)
		}
		names, hashes = append(names, name), append(hashes, h)
	}
	rng := rand.New(rand.NewPCG(20, 4))
	for range 300 {
		h := make([]byte, 5+rng.IntN(36))
		for j := range h {
			h[j] = byte(rng.UintN(256))
		}
		names, hashes = append(names, "random "+base64.StdEncoding.EncodeToString(h)), append(hashes, h)
	}

	// Every cosine the port takes, so the reference's engine can supply its own.
	seen := map[float64]bool{}
	cos = func(x float64) float64 { seen[x] = true; return math.Cos(x) }
	for _, h := range hashes {
		_, _, _, _ = thumbHashToRGBA(h)
	}
	cos = math.Cos
	args := make([]float64, 0, len(seen))
	for x := range seen {
		args = append(args, x)
	}
	reqs := []any{map[string][]float64{"cos": args}}
	for _, h := range hashes {
		reqs = append(reqs, map[string]string{"decode": base64.StdEncoding.EncodeToString(h)})
	}
	var answers []struct {
		Cos  []float64
		W, H *float64 // null for the reference's NaN
		RGBA []byte
	}
	referenceDecode(t, reqs, &answers)
	jsCos := make(map[float64]float64, len(args))
	for i, x := range args {
		jsCos[x] = answers[0].Cos[i]
	}

	var drawn, empty, exactOnGo int
	for i, h := range hashes {
		name, want := names[i], answers[i+1]
		cos = func(x float64) float64 {
			c, ok := jsCos[x]
			if !ok {
				t.Fatalf("%s: cosine of %v not asked of the reference", name, x)
			}
			return c
		}
		w, hh, rgba, err := thumbHashToRGBA(h)
		cos = math.Cos
		if want.W == nil || want.H == nil || *want.W**want.H == 0 {
			if err == nil {
				t.Errorf("%s: the reference draws nothing, the port %d×%d", name, w, hh)
			}
			empty++
			continue
		}
		drawn++
		if err != nil {
			t.Errorf("%s: %v; the reference draws %v×%v", name, err, *want.W, *want.H)
			continue
		}
		if float64(w) != *want.W || float64(hh) != *want.H || !bytes.Equal(rgba, want.RGBA) {
			t.Errorf("%s: on node's cosines the port draws %d×%d unlike the reference's %v×%v (or other pixels)", name, w, hh, *want.W, *want.H)
			continue
		}
		_, _, onGo, _ := thumbHashToRGBA(h)
		if bytes.Equal(onGo, want.RGBA) {
			exactOnGo++
		}
		for j := range onGo {
			if d := int(onGo[j]) - int(want.RGBA[j]); d < -1 || d > 1 {
				t.Errorf("%s: on Go's cosines byte %d is %d, the reference's %d", name, j, onGo[j], want.RGBA[j])
				break
			}
		}
	}
	t.Logf("%d hashes drawn as the reference draws them (%d of them byte for byte on Go's cosines too), %d refused where the reference draws nothing",
		drawn, exactOnGo, empty)
	if drawn < len(realThumbHashes) || empty == 0 {
		t.Errorf("drawn %d, refused %d: the random hashes should take both ways", drawn, empty)
	}
}

// A placeholder is a PNG of the hash's shape in a data: URL; anything that is not standard base64 of a
// ThumbHash of at most 64 bytes gets none, and nothing panics.
func TestConsolePlaceholderURL(t *testing.T) {
	for name, s := range realThumbHashes {
		u := string(placeholderURL(s))
		b64, ok := strings.CutPrefix(u, "data:image/png;base64,")
		if !ok {
			t.Fatalf("%s: %q", name, u)
		}
		raw, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(bytes.NewReader(raw))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		b := img.Bounds()
		if max(b.Dx(), b.Dy()) != 32 || min(b.Dx(), b.Dy()) < 8 {
			t.Errorf("%s: placeholder %v", name, b)
		}
		if strings.Contains(name, "portrait") != (b.Dy() > b.Dx()) {
			t.Errorf("%s: placeholder %d×%d", name, b.Dx(), b.Dy())
		}
		_, _, _, a := img.At(0, 0).RGBA()
		if strings.Contains(name, "alpha") != (a < 0xffff) {
			t.Errorf("%s: corner alpha %d", name, a)
		}
		t.Logf("%s: %d×%d, %d bytes of data: URL", name, b.Dx(), b.Dy(), len(u))
	}
	long := base64.StdEncoding.EncodeToString(append(must64(t, realThumbHashes["talk"]), make([]byte, 64)...))
	for _, bad := range []string{"", "AAAA", "W5gFDYTvmZRnd3hpZYmJifSZC2s", "W5gF DYTvmZRn", "W5gF\nDYTvmZRnd3hpZYmJifSZC2s2",
		"W5gFDYTvmZRnd3hpZYmJifSZC2s2\"><script>", "javascript:alert(1)", long, "AAAAAAA=", "/////w=="} {
		if u := placeholderURL(bad); u != "" {
			t.Errorf("placeholder of %q: %.60q", bad, u)
		}
	}
	// Random bytes of every length decode or are refused; none panics.
	rng := rand.New(rand.NewPCG(1, 2))
	for range 500 {
		h := make([]byte, rng.IntN(70))
		for j := range h {
			h[j] = byte(rng.UintN(256))
		}
		if w, hh, rgba, err := thumbHashToRGBA(h); err == nil && (w < 1 || hh < 1 || w > 32 || hh > 32 || len(rgba) != w*hh*4) {
			t.Fatalf("%x: %d×%d with %d bytes", h, w, hh, len(rgba))
		}
	}
	if s := placeholderURL(realThumbHashes["talk"]); s != placeholderURL(realThumbHashes["talk"]) {
		t.Error("a placeholder drawn twice differs")
	}
}

func must64(t *testing.T, s string) []byte {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestConsoleSafeColor(t *testing.T) {
	for in, want := range map[string]string{"#4e8b66": "#4e8b66", "#000000": "#000000", "#4E8B66": "", "4e8b66": "",
		"#4e8b6": "", "#4e8b667": "", "red": "", "red;background:url(x)": "", "#4e8b66;background:url(x)": "",
		"#4e8b66\n": "", "": "", `#4e8b66" onload="x`: ""} {
		if got := safeColor(in); got != want {
			t.Errorf("safeColor(%q) = %q, want %q", in, got, want)
		}
	}
}
