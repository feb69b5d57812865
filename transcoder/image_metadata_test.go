package transcoder_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/transcoder"
)

// Images carrying far more metadata than a camera writes: refused from their structure, before any
// decoder holds the metadata in memory. See image_metadata.go.

// metadataRefusal is the message for an image over ImageConfig.MaxMetadataBytes at the default.
func metadataRefusal(carried string) string {
	return "image carries " + carried + " of metadata (EXIF, XMP, colour profiles, comments); at most 16 MiB is accepted: remove the metadata and upload it again"
}

func TestImageMetadataBombsAreRefused(t *testing.T) {
	im := newImages(t, transcoder.DefaultImageConfig())
	dir := t.TempDir()
	const mib = 1 << 20
	for _, tc := range []struct {
		name, path, carried string
	}{
		// The file: a 640×480 JPEG with 250 MB of APP1 (EXIF) segments.
		{"jpeg app1", testenv.MakeJPEGWithSegments(t, dir, "app1.jpg", 0xE1, 4000, 65533), "250 MiB"},
		{"jpeg icc app2", testenv.MakeJPEGWithSegments(t, dir, "app2.jpg", 0xE2, 300, 65533), "18.7 MiB"},
		{"jpeg comments", testenv.MakeJPEGWithSegments(t, dir, "com.jpg", 0xFE, 300, 65533), "18.7 MiB"},
		{"png tEXt", testenv.MakePNGWithChunk(t, dir, "text.png", "tEXt", 20*mib), "20.0 MiB"},
		{"png zTXt", testenv.MakePNGWithChunk(t, dir, "ztxt.png", "zTXt", 20*mib), "20.0 MiB"},
		{"webp exif", testenv.MakeWebPWithChunk(t, dir, "exif.webp", "EXIF", 250*mib), "250 MiB"},
		{"webp xmp", testenv.MakeWebPWithChunk(t, dir, "xmp.webp", "XMP ", 20*mib), "20 MiB"},
		{"gif comment", testenv.MakeGIFWithComment(t, dir, "comment.gif", 20*mib), "20 MiB"},
		{"avif exif item", testenv.MakeAVIFWithExif(t, dir, "exif.avif", 250*mib), "250 MiB"},
		{"tiff xmp tag", testenv.MakeTIFFWithXMP(t, dir, "xmp.tif", 250*mib), "250 MiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := t.TempDir()
			_, err := im.Transform(context.Background(), tc.path, out)
			if !transcoder.IsBadInput(err) {
				t.Fatalf("got %v, want a bad-input error", err)
			}
			if want := metadataRefusal(tc.carried); err.Error() != want {
				t.Errorf("error %q,\nwant      %q", err, want)
			}
			// The operator's log names the setting that decides.
			if d := transcoder.ErrorDetail(err); !strings.Contains(d, "transcoder.ImageConfig.MaxMetadataBytes (16777216)") {
				t.Errorf("detail %q does not name the limit's setting", d)
			}
			assertEmptyDir(t, out)
		})
	}
}

// TestImageMetadataSegmentsAreCounted: tens of thousands of empty APP1 segments are a few hundred KB,
// but libjpeg keeps them in a list it walks once per segment (65,536 of them cost 19 s of CPU per
// decode): refused by their number.
func TestImageMetadataSegmentsAreCounted(t *testing.T) {
	im := newImages(t, transcoder.DefaultImageConfig())
	src := testenv.MakeJPEGWithSegments(t, t.TempDir(), "many.jpg", 0xE1, 65536, 0)
	_, err := im.Transform(context.Background(), src, t.TempDir())
	if !transcoder.IsBadInput(err) {
		t.Fatalf("got %v, want a bad-input error", err)
	}
	// ffmpeg's JPEG carries a segment or two of its own (JFIF, a comment naming the encoder).
	var n int
	fmt.Sscanf(err.Error(), "image carries %d segments", &n)
	want := fmt.Sprintf("image carries %d segments of metadata (EXIF, XMP, colour profiles, comments); at most 1000 are accepted: remove the metadata and upload it again", n)
	if n < 65536 || n > 65540 || err.Error() != want {
		t.Errorf("got %q, want %q with 65536 to 65540 segments", err, want)
	}
}

// TestImageLargeMetadataWithinTheLimitIsStripped: metadata under the limit is read and dropped, never
// carried into the variants. libvips 8.14.1 rebuilt an EXIF chunk from the source's for the WebP
// encoder, which failed from 8 MiB on ("exif too large", an internal error retried for ever) and,
// on a HEIF's 1 MiB EXIF item, crashed the worker.
func TestImageLargeMetadataWithinTheLimitIsStripped(t *testing.T) {
	im := newImages(t, transcoder.DefaultImageConfig())
	dir := t.TempDir()
	for _, tc := range []struct {
		name, path string
		w, h       int
	}{
		{"avif 1 MiB exif item", testenv.MakeAVIFWithExif(t, dir, "exif1.avif", 1<<20), 64, 48},
		{"avif 12 MiB exif item", testenv.MakeAVIFWithExif(t, dir, "exif12.avif", 12<<20), 64, 48},
		{"webp 12 MiB exif", testenv.MakeWebPWithChunk(t, dir, "exif.webp", "EXIF", 12<<20), 640, 480},
		{"jpeg 12 MiB of app1", testenv.MakeJPEGWithSegments(t, dir, "app1.jpg", 0xE1, 190, 65533), 640, 480},
		{"tiff 12 MiB xmp tag", testenv.MakeTIFFWithXMP(t, dir, "xmp.tif", 12<<20), 640, 480},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := t.TempDir()
			res, err := im.Transform(context.Background(), tc.path, out)
			if err != nil {
				t.Fatalf("Transform: %v", err)
			}
			// checkVariants fails on any EXIF, XMP or ICC field left in a variant.
			w, h := tc.w, tc.h
			checkVariants(t, res, out, [3][2]int{{w, h}, {w, h}, {min(w, 480), min(h, 360)}})
		})
	}
}

// TestImageTruncatedChunkIsNotAMetadataBomb: only the bytes a file holds count, so a PNG cut off in a
// text chunk that claims 20 MiB is reported as what it is.
func TestImageTruncatedChunkIsNotAMetadataBomb(t *testing.T) {
	im := newImages(t, transcoder.DefaultImageConfig())
	src := testenv.MakePNGWithChunk(t, t.TempDir(), "text.png", "tEXt", 20<<20)
	cut := testenv.MakeTruncated(t, src, t.TempDir(), "cut.png", 1<<20)
	_, err := im.Transform(context.Background(), cut, t.TempDir())
	if !transcoder.IsBadInput(err) || !strings.Contains(err.Error(), "truncated") {
		t.Errorf("got %v, want the PNG reported truncated", err)
	}
}

// peakChildEnv, when set ("path limit"), makes TestImageMetadataBombPeakMemory the child that
// transforms path with that metadata limit and reports its peak memory.
const peakChildEnv = "MW_METADATA_PEAK_CHILD"

// TestImageMetadataBombPeakMemory measures what the issue measured, in a process of its own (a test
// binary's peak memory holds every earlier test's): the worker's peak resident memory while it takes
// the 250 MB APP1 JPEG. Refused, it stays where it was; the control, a 48 MiB one let through by a
// raised limit, shows what the decoder would have held.
func TestImageMetadataBombPeakMemory(t *testing.T) {
	if spec := os.Getenv(peakChildEnv); spec != "" {
		peakChild(t, spec)
		return
	}
	dir := t.TempDir()
	bomb := testenv.MakeJPEGWithSegments(t, dir, "bomb.jpg", 0xE1, 4000, 65533)
	control := testenv.MakeJPEGWithSegments(t, dir, "control.jpg", 0xE1, 768, 65533)

	rise, msg := peakRise(t, bomb, transcoder.DefaultImageConfig().MaxMetadataBytes)
	if msg != metadataRefusal("250 MiB") {
		t.Errorf("bomb: got %q, want the metadata refusal", msg)
	}
	if rise > 16<<20 {
		t.Errorf("bomb: peak memory rose by %d MiB while refusing it, want under 16 MiB", rise>>20)
	}
	t.Logf("bomb: peak memory rose by %d KiB", rise>>10)
	rise, msg = peakRise(t, control, 1<<30)
	if msg != "" {
		t.Fatalf("control: %s", msg)
	}
	if rise < 48<<20 {
		t.Errorf("control: peak memory rose by only %d MiB decoding 48 MiB of APP1: the measurement sees nothing", rise>>20)
	}
	t.Logf("control: peak memory rose by %d MiB", rise>>20)
}

// peakRise runs this test binary as the child on path and returns by how much its peak resident
// memory (VmHWM) rose during the transform, and the transform's error ("" for none).
func peakRise(t *testing.T, path string, limit int64) (int64, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestImageMetadataBombPeakMemory$", "-test.count=1")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d", peakChildEnv, path, limit))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "PEAK "); ok {
			before, rest, _ := strings.Cut(rest, " ")
			after, msg, _ := strings.Cut(rest, " ")
			b, _ := strconv.ParseInt(before, 10, 64)
			a, _ := strconv.ParseInt(after, 10, 64)
			unq, err := strconv.Unquote(msg)
			if err != nil {
				t.Fatalf("child's line %q: %v", sc.Text(), err)
			}
			return (a - b) << 10, unq
		}
	}
	t.Fatalf("child reported nothing:\n%s", out)
	return 0, ""
}

// peakChild is the child's side: libvips loaded first (its libraries are not the image's cost), then
// one transform between two readings of VmHWM.
func peakChild(t *testing.T, spec string) {
	path, limit, _ := strings.Cut(spec, " ")
	cfg := transcoder.DefaultImageConfig()
	cfg.MaxMetadataBytes, _ = strconv.ParseInt(limit, 10, 64)
	im := newImages(t, cfg)
	if err := im.Preload(); err != nil {
		t.Fatal(err)
	}
	before := vmHWM(t)
	_, err := im.Transform(context.Background(), path, t.TempDir())
	after := vmHWM(t)
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	fmt.Printf("PEAK %d %d %q\n", before, after, msg)
}

// vmHWM is this process's peak resident memory in KiB.
func vmHWM(t *testing.T) int64 {
	t.Helper()
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb
		}
	}
	t.Fatal("no VmHWM in /proc/self/status")
	return 0
}
