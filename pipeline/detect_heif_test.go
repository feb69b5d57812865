package pipeline

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/transcoder"
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

// Module versions whose zips ship real HEIF and AVIF files: libheif's own test data (ISO 23001-17
// uncompressed, deflate/zlib/brotli compressed, the 2025 mini form) and examples, and the HEIC/AVIF
// test files of gen2brain's decoders and govips.
const (
	libheifVersion = "v1.20.2"
	heicVersion    = "v0.4.5"
	avifVersion    = "v0.4.4"
	govipsVersion  = "v2.16.0"
)

// TestDetectHEIFRealFiles: every HEIF of libheif's test data coded in a way this libheif (1.15, HEVC
// and AV1 only) does not decode is refused at detecting with the "unsupported coding" words, and
// every real HEIC and AVIF it decodes (each checked with heif-convert 1.15 when this test was
// written) is still taken for an image and transformed.
func TestDetectHEIFRealFiles(t *testing.T) {
	libheif := testenv.ModuleDir(t, "github.com/strukturag/libheif", libheifVersion)
	notOurs, err := filepath.Glob(filepath.Join(libheif, "tests", "data", "*.heif"))
	if err != nil {
		t.Fatal(err)
	}
	minis, err := filepath.Glob(filepath.Join(libheif, "tests", "data", "*.avif")) // AVIF in the mini form
	if err != nil {
		t.Fatal(err)
	}
	notOurs = append(notOurs, minis...)
	if len(notOurs) < 85 {
		t.Fatalf("control: %d HEIF files in libheif's tests/data, want the 85 or more of %s", len(notOurs), libheifVersion)
	}
	const refusal = "detecting: HEIF image with an unsupported coding ("
	for _, p := range notOurs {
		mime, kind, err := Detect(p)
		if err == nil || !strings.HasPrefix(err.Error(), refusal) || !isPermanent(err) || kind != "" ||
			(mime != "image/heif" && mime != "image/heic" && mime != "image/avif") {
			t.Errorf("%s: Detect = %q %q %v, want a HEIF type refused with %q…", filepath.Base(p), mime, kind, err, refusal)
		}
	}

	heic := testenv.ModuleDir(t, "github.com/gen2brain/heic", heicVersion)
	avif := testenv.ModuleDir(t, "github.com/gen2brain/avif", avifVersion)
	govips := testenv.ModuleDir(t, "github.com/davidbyttow/govips/v2", govipsVersion)
	decodable := []string{
		filepath.Join(libheif, "examples", "example.heic"), // brand mif1
		filepath.Join(libheif, "examples", "example.avif"),
		filepath.Join(libheif, "fuzzing", "data", "corpus", "colors-no-alpha.heic"),
		filepath.Join(libheif, "fuzzing", "data", "corpus", "colors-with-alpha.heic"),
		filepath.Join(libheif, "fuzzing", "data", "corpus", "colors-with-alpha-thumbnail.heic"),
		filepath.Join(heic, "testdata", "test8.heic"),
		filepath.Join(heic, "testdata", "test12.heic"), // 12-bit
		filepath.Join(heic, "testdata", "gray.heic"),
		filepath.Join(avif, "testdata", "test8.avif"),
		filepath.Join(avif, "testdata", "test10.avif"), // 10-bit
		filepath.Join(govips, "resources", "heic-24bit.heic"),
		filepath.Join(govips, "resources", "heic-ftypmsf1.heic"), // brand msf1: an image sequence's
		filepath.Join(govips, "resources", "avif-8bit.avif"),
	}
	images, err := transcoder.NewImages(transcoder.DefaultImageConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range decodable {
		mime, kind, err := Detect(p)
		if err != nil || kind != Image {
			t.Errorf("%s: Detect = %q %q %v, want an image", p, mime, kind, err)
			continue
		}
		res, err := images.Transform(context.Background(), p, t.TempDir())
		if err != nil || len(res.Variants) == 0 || res.HDR != "" {
			t.Errorf("%s (%s): Transform: %v, %d variants, hdr %q; want SDR variants", p, mime, err, len(res.Variants), res.HDR)
		}
	}
}
