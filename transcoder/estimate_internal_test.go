package transcoder

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/mediaworker/mediaworker/internal/testenv"
)

const mib = 1 << 20

// The estimator's arithmetic, on headers as libvips reports them: what shrinks on load costs the size
// of the decode box, whatever the source; what is decoded whole costs the source; animations cost
// their frames; videos cost ffmpeg's frames in flight.
func TestEstimateImageFollowsHowItIsDecoded(t *testing.T) {
	cfg := DefaultImageConfig()
	def := cfg.DefaultRecipe()
	est := func(in imageMemoryInput) int64 { return estimateImage(in, def, cfg) }

	jpeg24 := est(imageMemoryInput{format: "jpeg", width: 6000, height: 4000, pages: 1, bands: 3})
	jpeg6 := est(imageMemoryInput{format: "jpeg", width: 3000, height: 2000, pages: 1, bands: 3})
	// Both decode to 2048×1365 (shrink-on-load, then a streamed shrink): the same cost, about 45 MiB
	// (measured: 29 MiB above the idle process for the 24 MP one, encoded one variant at a time; the
	// smaller variants encoded beside the largest add up to bytesPerParallelEncodePixel).
	if jpeg24 != jpeg6 || jpeg24 < 28*mib || jpeg24 > 48*mib {
		t.Errorf("baseline JPEGs: 24 MP %d MiB, 6 MP %d MiB; want the same, 28–48 MiB", jpeg24/mib, jpeg6/mib)
	}
	// A progressive JPEG keeps its coefficients, 2 bytes a sample at full size: 69 MiB more at 4:2:0.
	prog := est(imageMemoryInput{format: "jpeg", width: 6000, height: 4000, pages: 1, bands: 3, progressive: true, samples: 1.5})
	if prog-jpeg24 != 6000*4000*3 {
		t.Errorf("progressive 24 MP 4:2:0 JPEG: %d MiB over the baseline one, want %d", (prog-jpeg24)/mib, 6000*4000*3/mib)
	}

	// A 16-bit PNG streams too, but its decoded picture is 16-bit until made sRGB; interlaced, it is
	// decoded whole at 2 bytes a sample.
	png16 := est(imageMemoryInput{format: "png", width: 4000, height: 3000, pages: 1, bands: 3, bytesPerBand: 2})
	png8 := est(imageMemoryInput{format: "png", width: 4000, height: 3000, pages: 1, bands: 3, bytesPerBand: 1})
	if png16-png8 != 2048*1536*3 {
		t.Errorf("16-bit PNG: %d bytes over the 8-bit one, want its 2048×1536 picture's second bytes", png16-png8)
	}
	png16i := est(imageMemoryInput{format: "png", width: 4000, height: 3000, pages: 1, bands: 3, bytesPerBand: 2, interlaced: true})
	if png16i-png16 != 4000*3000*3*2 {
		t.Errorf("interlaced 16-bit PNG: %d MiB over the plain one, want the whole picture's %d", (png16i-png16)/mib, 4000*3000*3*2/mib)
	}

	// libheif decodes the whole 24 MP picture: far more than the JPEG of the same size.
	heic := est(imageMemoryInput{format: "heif", width: 6000, height: 4000, pages: 1, bands: 3})
	if heic < jpeg24+100*mib {
		t.Errorf("24 MP HEIC %d MiB, 24 MP JPEG %d MiB: libheif's whole decode (measured 139 MiB) is missing", heic/mib, jpeg24/mib)
	}

	// An animated WebP kept as an animation holds its 12 frames; a recipe without an animated
	// variant, or one beyond the animation budget, holds the first.
	anim := imageMemoryInput{format: "webp", width: 1920, height: 1080, pages: 12, bands: 3}
	still := imageMemoryInput{format: "webp", width: 1920, height: 1080, pages: 1, bands: 3}
	// The animation's canvas beside; the still's smaller variants may be encoded in parallel, an
	// animation's never.
	frames := est(anim) - est(still) - int64(1920*1080*4) + int64(1920*1080*bytesPerParallelEncodePixel)
	if held := int64(1920*1080) * (12*bytesPerAnimationFrame + bytesPerAnimationPixel); frames != held {
		t.Errorf("12-frame WebP: %d MiB more than its still, want its 12 frames held and the encoder's canvases (%d MiB)", frames/mib, held/mib)
	}
	// With alpha, each frame's alpha plane goes through libwebp's lossless encoder too.
	anim.alpha, anim.bands = true, 4
	if withAlpha := est(anim) - est(still) - int64(1920*1080*4) + int64(1920*1080*bytesPerParallelEncodePixel); withAlpha <= frames {
		t.Errorf("12-frame WebP with alpha: %d MiB, no more than without (%d MiB)", withAlpha/mib, frames/mib)
	}
	anim.alpha, anim.bands = false, 3
	stillRecipe := []ImageVariantSpec{{Name: "card", Width: 1200, Format: FormatWebP}}
	if a, s := estimateImage(anim, stillRecipe, cfg), estimateImage(still, stillRecipe, cfg); a-s != 1920*1080*4 {
		t.Errorf("animated WebP for a still recipe: %d bytes over the still, want only the canvas", a-s)
	}
	long := anim
	long.pages = cfg.AnimationMaxFrames + 1
	if est(long)-est(still) != 1920*1080*4 {
		t.Errorf("an animation beyond the budget is its first frame: %d MiB over the still", (est(long)-est(still))/mib)
	}
}

func TestEstimateVideoFollowsFramesInFlight(t *testing.T) {
	hd := estimateVideo(1920, 1080, false, 2, false)
	sd := estimateVideo(1280, 720, false, 2, false)
	// Measured peak RSS of ffmpeg's encode with 2 threads: 275–290 MiB at 1080p, 160 MiB at 720p.
	if hd < 240*mib || hd > 300*mib || sd < 130*mib || sd > 180*mib {
		t.Errorf("1080p %d MiB, 720p %d MiB; want about 265 and 155", hd/mib, sd/mib)
	}
	if more := estimateVideo(1920, 1080, false, 4, false); more <= hd {
		t.Errorf("4 threads (%d MiB) must hold more frames than 2 (%d MiB)", more/mib, hd/mib)
	}
	if hdr := estimateVideo(1920, 1080, true, 2, false); hdr <= hd {
		t.Errorf("10-bit HDR (%d MiB) must cost more than 8-bit (%d MiB)", hdr/mib, hd/mib)
	}
	if remux := estimateVideo(1920, 1080, false, 2, true); remux >= hd/2 {
		t.Errorf("a remux (%d MiB) decodes only the poster's frames; the encode is %d MiB", remux/mib, hd/mib)
	}
}

// On real files the header tells what the estimate needs: a progressive JPEG, a 16-bit and an
// interlaced PNG, a 16-bit TIFF are read as such, and the estimates order as the decodes do.
func TestEstimateMemoryReadsTheFile(t *testing.T) {
	im, err := NewImages(DefaultImageConfig())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	vips := testenv.RequireBinary(t, "vips")
	jpeg := testenv.MakeJPEG(t, dir, 3000, 2000)
	convert := func(name, options, op string, extra ...string) string {
		t.Helper()
		out := filepath.Join(dir, name)
		args := append([]string{op, jpeg, out + options}, extra...)
		if b, err := exec.Command(vips, args...).CombinedOutput(); err != nil {
			t.Fatalf("vips %v: %v\n%s", args, err, b)
		}
		return out
	}
	prog := convert("prog.jpg", "[interlace]", "copy")
	png16 := convert("deep.png", "", "colourspace", "rgb16") // 16-bit, not interlaced
	pngI := convert("interlaced.png", "[interlace]", "copy")
	tif16 := convert("deep.tif", "", "cast", "ushort")
	for _, tc := range []struct {
		path, format string
		bpb          int
		progressive  bool
		interlaced   bool
		samples      float64
	}{
		{jpeg, "JPEG", 1, false, false, 1.5}, // ffmpeg's JPEGs are 4:2:0
		{prog, "JPEG", 1, true, false, 1.5},  // vips keeps 4:2:0 below Q 90
		{png16, "PNG", 2, false, false, 0},
		{pngI, "PNG", 1, false, true, 0},
		{tif16, "TIFF", 2, false, false, 0},
		// 8-bit HEIF and AVIF, read from their hvcC and av1C (a 10-bit one decodes to 16 bits a sample).
		{filepath.Join("testdata", "camera", "iphonexs-gps-p3.heic"), "HEIF", 1, false, false, 0},
		{testenv.MakeAVIF(t, dir, 320, 240), "AVIF", 1, false, false, 0},
		{jpeg, "HEIF", 2, false, false, 0}, // no boxes to read: the worst case
	} {
		bpb, p, i, s := fileDepth(tc.path, tc.format)
		if bpb != tc.bpb || p != tc.progressive || i != tc.interlaced || s != tc.samples {
			t.Errorf("%s: %d bytes a sample, progressive %v, interlaced %v, %g samples a pixel; want %d, %v, %v, %g",
				filepath.Base(tc.path), bpb, p, i, s, tc.bpb, tc.progressive, tc.interlaced, tc.samples)
		}
	}
	base, progressive := im.EstimateMemory(jpeg, nil), im.EstimateMemory(prog, nil)
	if progressive-base != 3000*2000*3 {
		t.Errorf("the progressive 4:2:0 JPEG costs %d MiB more than the baseline one, want its coefficients' %d",
			(progressive-base)/mib, 3000*2000*3/mib)
	}
	if e := im.EstimateMemory(filepath.Join(dir, "missing.jpg"), nil); e != imageJobBytes {
		t.Errorf("a file that cannot be read: %d bytes, want the least a job holds (the transform refuses it)", e)
	}
	junk := filepath.Join(dir, "junk.png")
	if err := os.WriteFile(junk, []byte("\x89PNG\r\n\x1a\nnot a png at all"), 0o600); err != nil {
		t.Fatal(err)
	}
	if e := im.EstimateMemory(junk, nil); e != imageJobBytes {
		t.Errorf("a broken header: %d bytes, want the least a job holds", e)
	}
}
