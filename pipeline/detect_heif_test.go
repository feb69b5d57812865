package pipeline

import (
	"os"
	"testing"

	"github.com/mediaworker/mediaworker/internal/testenv"
)

// HEIF images that are not ours to decode, in the shapes of libheif's own test files and of files
// with brands nothing maps: refused at detecting, naming what was found, where they were probed as
// video ("not a supported video") or refused by the decoder as having "no primary picture". The
// HEIF and AVIF images libvips opens are still taken.
func TestDetectHEIFNotOurs(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, path, mime string
		kind             MediaKind
		want             string
	}{
		{"iso 23001-17 uncompressed", testenv.MakeHEIFVariant(t, dir, "unci.heif", "unci"), "image/heic", "",
			"detecting: HEIF image with an unsupported coding (uncompressed, ISO/IEC 23001-17)"},
		{"jpeg 2000", testenv.MakeHEIFVariant(t, dir, "j2k.heif", "j2k1"), "image/heic", "",
			"detecting: HEIF image with an unsupported coding (JPEG 2000)"},
		{"deflate or brotli compressed", testenv.MakeHEIFVariant(t, dir, "cmpc.heif", "compressed"), "image/heic", "",
			"detecting: HEIF image with an unsupported coding (compressed with deflate, zlib or brotli)"},
		{"2025 mini box", testenv.MakeHEIFVariant(t, dir, "mini.heif", "mini"), "image/heif", "",
			"detecting: HEIF image with an unsupported coding (the low-overhead 'mini' form of HEIF, 2025)"},
		{"unmapped brand", testenv.MakeHEIFVariant(t, dir, "mif2.heif", "brand"), "image/heif", "",
			`detecting: HEIF image with an unsupported brand ("mif2"; heic, mif1, avif and the other common brands are supported)`},
		{"heic", testenv.MakeHEIC(t, dir, 64, 48), "image/heic", Image, ""},
		{"avif", testenv.MakeAVIF(t, dir, 64, 48), "image/avif", Image, ""},
		{"avif sequence", testenv.MakeAVIFSequence(t, dir, 64, 48, 3), "image/avif", Image, ""},
		{"mp4", testenv.MakeVideo(t, dir, "clip.mp4", testenv.VideoOpts{Container: "mp4"}), "video/mp4", Video, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mime, kind, err := Detect(tc.path)
			if tc.want == "" {
				if err != nil || kind != tc.kind || mime != tc.mime {
					t.Fatalf("Detect = %q %q %v, want %s %s", mime, kind, err, tc.mime, tc.kind)
				}
				return
			}
			if err == nil || err.Error() != tc.want || !isPermanent(err) || kind != "" || mime != tc.mime {
				t.Fatalf("Detect = %q %q %v, want %s refused: %q", mime, kind, err, tc.mime, tc.want)
			}
			head, rerr := os.ReadFile(tc.path)
			if rerr != nil {
				t.Fatal(rerr)
			}
			if _, _, err := DetectBytes(head[:min(len(head), SniffBytes)]); err == nil || err.Error() != tc.want {
				t.Errorf("DetectBytes: %v, want %q", err, tc.want)
			}
		})
	}
}
