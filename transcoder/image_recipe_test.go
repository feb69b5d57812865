package transcoder_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/transcoder"
	"github.com/mediaworker/mediaworker/transcoder/vips"
)

// vipsNumber runs the vips CLI operation that prints one number (avg, max, ...) on path.
func vipsNumber(t *testing.T, op, path string) float64 {
	t.Helper()
	cmd := exec.Command("vips", op, path)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr // libvips' warnings ("heifload: ignoring nclx profile")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("vips %s %s: %v\n%s", op, path, err, stderr.Bytes())
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
	if err != nil {
		t.Fatalf("vips %s printed %q", op, out)
	}
	return f
}

// brightness is the mean of an image's pixels over every band, 0-255.
func brightness(t *testing.T, path string) float64 { return vipsNumber(t, "avg", path) }

// checkDecodes decodes path with libvips (every pixel) and with ffprobe and checks both see w×h, and
// that no metadata was written.
func checkDecodes(t *testing.T, path string, w, h int) {
	t.Helper()
	info := testenv.DecodeImage(t, path)
	if info.Width != w || info.Height != h {
		t.Errorf("%s: libvips decodes %dx%d, want %dx%d", filepath.Base(path), info.Width, info.Height, w, h)
	}
	for k := range info.Fields {
		if strings.HasPrefix(k, "exif") || k == "icc-profile-data" || k == "xmp-data" || k == "iptc-data" {
			t.Errorf("%s: metadata %q was written", filepath.Base(path), k)
		}
	}
	p := testenv.FFprobe(t, path)
	if s := p.Stream("video"); s == nil || s.Width != w || s.Height != h {
		t.Errorf("%s: ffprobe sees %+v, want %dx%d", filepath.Base(path), s, w, h)
	}
}

// makePortrait writes a 1200×600 JPEG of a dark, flat background (grey 24) with a bright, colourful
// subject (ffmpeg's testsrc2) 260×300 in its right third, at x 920-1180: a 256×256 centre crop of it
// (x 300-900 of the source) holds background only.
func makePortrait(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "portrait.jpg")
	graph := "color=c=0x181818:s=1200x600[bg];testsrc2=s=260x300[fg];[bg][fg]overlay=920:150[out0]"
	cmd := exec.Command("ffmpeg", "-nostdin", "-v", "error", "-y", "-f", "lavfi", "-i", graph,
		"-frames:v", "1", "-q:v", "2", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ffmpeg: %v\n%s", err, b)
	}
	return out
}

// TestRecipeAvatarFindsTheSubject: a 256×256 cover avatar cut with attention, in AVIF and in JPEG,
// is exactly 256×256 to libvips and to ffprobe and holds the bright subject off to the side of a
// dark picture; the centre crop of the same picture holds background only, so it is attention that
// found it.
func TestRecipeAvatarFindsTheSubject(t *testing.T) {
	im := newImages(t, transcoder.DefaultImageConfig())
	src := makePortrait(t)
	out := t.TempDir()
	specs := []transcoder.ImageVariantSpec{
		{Name: "avatar", Width: 256, Height: 256, Fit: transcoder.FitCover, Crop: transcoder.CropAttention, Format: transcoder.FormatAVIF},
		{Name: "avatar-jpeg", Width: 256, Height: 256, Fit: transcoder.FitCover, Format: transcoder.FormatJPEG, Quality: 85},
		{Name: "centre", Width: 256, Height: 256, Fit: transcoder.FitCover, Crop: transcoder.CropCentre, Format: transcoder.FormatJPEG, Quality: 85},
	}
	res, err := im.TransformRecipe(context.Background(), src, out, specs)
	if err != nil {
		t.Fatalf("TransformRecipe: %v", err)
	}
	if len(res.Variants) != 3 || res.Width != 1200 || res.Height != 600 || len(res.Warnings) != 0 {
		t.Fatalf("result %+v", res)
	}
	background := 24.0
	for i, want := range []struct {
		path   string
		format transcoder.ImageFormat
	}{{"avatar.avif", transcoder.FormatAVIF}, {"avatar-jpeg.jpg", transcoder.FormatJPEG}, {"centre.jpg", transcoder.FormatJPEG}} {
		v := res.Variants[i]
		if v.Quality != specs[i].Name || v.Format != want.format || v.Path != filepath.Join(out, want.path) || v.Width != 256 || v.Height != 256 || v.Frames != 1 {
			t.Errorf("variant %d: %+v", i, v)
		}
		checkDecodes(t, v.Path, 256, 256)
		b := brightness(t, v.Path)
		t.Logf("%s: mean brightness %.1f (background %.0f)", v.Quality, b, background)
		if v.Quality == "centre" {
			if b > background+5 {
				t.Errorf("the centre crop has brightness %.1f: the subject was meant to be outside it", b)
			}
		} else if b < background+12 { // the whole subject in view: about background+22
			t.Errorf("%s: brightness %.1f, near the background's: the attention crop missed the subject", v.Quality, b)
		} else if max := vipsNumber(t, "max", v.Path); max < 200 {
			t.Errorf("%s: the brightest value is %.0f: the subject's bright parts are not in it", v.Quality, max)
		}
	}
	if max := vipsNumber(t, "max", res.Variants[2].Path); max > 60 {
		t.Errorf("the centre crop's brightest value is %.0f: it holds some of the subject", max)
	}
}

// TestRecipeCardAndFriends: one recipe from a 4000×3000 photo, decoded once at the size of its
// largest variant: a 1200×630 cover card in WebP, an inside-fit 2048 px WebP, a width-only JPEG, a
// 64×64 PNG icon; each at its exact size.
func TestRecipeCardAndFriends(t *testing.T) {
	im := newImages(t, transcoder.DefaultImageConfig())
	src := testenv.MakeJPEG(t, t.TempDir(), 4000, 3000)
	out := t.TempDir()
	specs := []transcoder.ImageVariantSpec{
		{Name: "card", Width: 1200, Height: 630, Fit: transcoder.FitCover},
		{Name: "large", Width: 2048, Height: 2048, Quality: 80},
		{Name: "thumb", Width: 320, Format: transcoder.FormatJPEG},
		{Name: "icon", Width: 64, Height: 64, Fit: transcoder.FitCover, Crop: transcoder.CropEntropy, Format: transcoder.FormatPNG},
	}
	res, err := im.TransformRecipe(context.Background(), src, out, specs)
	if err != nil {
		t.Fatalf("TransformRecipe: %v", err)
	}
	want := []struct {
		file string
		w, h int
	}{{"card.webp", 1200, 630}, {"large.webp", 2048, 1536}, {"thumb.jpg", 320, 240}, {"icon.png", 64, 64}}
	if len(res.Variants) != len(want) {
		t.Fatalf("%d variants, want %d", len(res.Variants), len(want))
	}
	for i, w := range want {
		v := res.Variants[i]
		if v.Path != filepath.Join(out, w.file) || v.Width != w.w || v.Height != w.h {
			t.Errorf("%s: %s %dx%d, want %s %dx%d", v.Quality, filepath.Base(v.Path), v.Width, v.Height, w.file, w.w, w.h)
		}
		checkDecodes(t, v.Path, w.w, w.h)
		if st, err := os.Stat(v.Path); err != nil || st.Size() != v.Size {
			t.Errorf("%s: result says %d bytes, file: %v %v", v.Quality, v.Size, st, err)
		}
	}
}

// TestRecipeNeverEnlarges: a 300×200 source keeps its size in inside-fit variants larger than it,
// and a cover variant larger than it is cut to the box's aspect ratio at the source's resolution.
func TestRecipeNeverEnlarges(t *testing.T) {
	im := newImages(t, transcoder.DefaultImageConfig())
	src := testenv.MakeJPEG(t, t.TempDir(), 300, 200)
	res, err := im.TransformRecipe(context.Background(), src, t.TempDir(), []transcoder.ImageVariantSpec{
		{Name: "big", Width: 2048, Height: 2048},
		{Name: "wide", Width: 1000, Format: transcoder.FormatAVIF},
		{Name: "tall", Height: 900, Format: transcoder.FormatJPEG},
		{Name: "card", Width: 1200, Height: 630, Fit: transcoder.FitCover},
		{Name: "square", Width: 500, Height: 500, Fit: transcoder.FitCover, Format: transcoder.FormatPNG},
	})
	if err != nil {
		t.Fatalf("TransformRecipe: %v", err)
	}
	// 1200×630 scaled by min(300/1200, 200/630) = 1/4: 300×157.5.
	want := [][2]int{{300, 200}, {300, 200}, {300, 200}, {300, 158}, {200, 200}}
	for i, v := range res.Variants {
		if v.Width != want[i][0] || v.Height != want[i][1] {
			t.Errorf("%s: %dx%d, want %dx%d", v.Quality, v.Width, v.Height, want[i][0], want[i][1])
		}
		checkDecodes(t, v.Path, want[i][0], want[i][1])
	}
}

// TestRecipeRotatedSource: boxes are of the upright picture: an EXIF-rotated (orientation 6)
// 1200×800 JPEG is 800×1200 upright.
func TestRecipeRotatedSource(t *testing.T) {
	im := newImages(t, transcoder.DefaultImageConfig())
	src := testenv.MakeJPEGOrientation(t, t.TempDir(), 1200, 800, 6)
	res, err := im.TransformRecipe(context.Background(), src, t.TempDir(), []transcoder.ImageVariantSpec{
		{Name: "banner", Width: 400, Height: 200, Fit: transcoder.FitCover, Crop: transcoder.CropCentre},
		{Name: "narrow", Width: 300},
	})
	if err != nil {
		t.Fatalf("TransformRecipe: %v", err)
	}
	for i, want := range [][2]int{{400, 200}, {300, 450}} {
		if v := res.Variants[i]; v.Width != want[0] || v.Height != want[1] {
			t.Errorf("%s: %dx%d, want %dx%d", v.Quality, v.Width, v.Height, want[0], want[1])
		}
	}
}

// TestRecipeAnimations: an animated GIF keeps its animation in inside-fit WebP variants that ask
// for it; AVIF, cover and still variants show the first frame, and the warnings say which and why.
// Through ffmpeg (an APNG) the same.
func TestRecipeAnimations(t *testing.T) {
	cfg := transcoder.DefaultImageConfig()
	im := newImages(t, cfg)
	withFFmpeg := newImages(t, cfg)
	withFFmpeg.UseFFmpeg(newVideos(t, transcoder.DefaultVideoConfig()))
	specs := []transcoder.ImageVariantSpec{
		{Name: "anim", Width: 400, Height: 400, Animated: true},
		{Name: "poster", Width: 400, Height: 400, Format: transcoder.FormatAVIF, Animated: true},
		{Name: "square", Width: 100, Height: 100, Fit: transcoder.FitCover, Animated: true},
		{Name: "still", Width: 200, Height: 200},
	}
	for name, tc := range map[string]struct {
		im     *transcoder.Images
		src    string
		frames int
	}{
		"gif":  {im, testenv.MakeGIF(t, t.TempDir(), 800, 400, 5), 5},
		"apng": {withFFmpeg, testenv.MakeAPNG(t, t.TempDir(), 800, 400, 6), 6},
	} {
		t.Run(name, func(t *testing.T) {
			out := t.TempDir()
			res, err := tc.im.TransformRecipe(context.Background(), tc.src, out, specs)
			if err != nil {
				t.Fatalf("TransformRecipe: %v", err)
			}
			want := []struct{ w, h, frames int }{{400, 200, tc.frames}, {400, 200, 1}, {100, 100, 1}, {200, 100, 1}}
			for i, v := range res.Variants {
				if v.Width != want[i].w || v.Height != want[i].h || v.Frames != want[i].frames {
					t.Errorf("%s: %dx%d, %d frames; want %dx%d, %d", v.Quality, v.Width, v.Height, v.Frames, want[i].w, want[i].h, want[i].frames)
				}
			}
			if info := testenv.DecodeImage(t, res.Variants[0].Path); info.Fields["n-pages"] != strconv.Itoa(tc.frames) {
				t.Errorf("anim: n-pages %q, want %d", info.Fields["n-pages"], tc.frames)
			}
			checkDecodes(t, res.Variants[1].Path, 400, 200)
			if name == "gif" { // red, green, blue, ...
				checkAnimated(t, res.Variants[0].Path, tc.frames, "1000")
				if px := testenv.Pixel(t, res.Variants[1].Path, 200, 100); len(px) < 3 || px[0] < 200 || px[1] > 60 || px[2] > 60 {
					t.Errorf("the AVIF's pixel is %v, want the first frame's red", px)
				}
			}
			wantWarnings := []string{
				"animation not kept in variant poster: AVIF variants are still images; it shows the first frame",
				"animation not kept in variant square: a cover crop is cut from the first frame; it shows the first frame",
				"animation not kept in variant still: the recipe asks for a still image; it shows the first frame",
			}
			if fmt.Sprint(res.Warnings) != fmt.Sprint(wantWarnings) || res.Frames != tc.frames {
				t.Errorf("%d frames, warnings:\n%q\nwant %d frames and\n%q", res.Frames, res.Warnings, tc.frames, wantWarnings)
			}
		})
	}

	// No variant keeps the animation: ffmpeg decodes the first frame only, and every variant says so.
	res, err := withFFmpeg.TransformRecipe(context.Background(), testenv.MakeAVIFSequence(t, t.TempDir(), 320, 240, 10), t.TempDir(),
		[]transcoder.ImageVariantSpec{{Name: "a", Width: 100, Height: 100, Fit: transcoder.FitCover, Format: transcoder.FormatJPEG}, {Name: "b", Width: 50}})
	if err != nil {
		t.Fatalf("AVIF sequence: %v", err)
	}
	if res.Frames != 1 || fmt.Sprint(res.Warnings) != "[animation not kept in variants a, b: the recipe asks for a still image; they show the first frame]" ||
		res.Variants[0].Width != 100 || res.Variants[1].Height != 38 {
		t.Errorf("AVIF sequence: %d frames, warnings %q, variants %+v", res.Frames, res.Warnings, res.Variants)
	}
}

// TestDefaultRecipeIsTodaysOutput: Transform is the default recipe, and the default recipe writes
// byte for byte what the transformer wrote before recipes: the source decoded once to fit the high
// size and each smaller variant resized from the one before (high → medium → low), every one a WebP
// at its quality and the configured effort. The reference below is that code, step for step, on
// libvips directly.
func TestDefaultRecipeIsTodaysOutput(t *testing.T) {
	cfg := transcoder.DefaultImageConfig()
	im := newImages(t, cfg)
	dir := t.TempDir()
	for name, tc := range map[string]struct {
		path    string
		animate bool
	}{
		"noisy 12 MP jpeg":   {testenv.MakeNoisyJPEG(t, filepath.Join(dir, "noisy.jpg"), 4000, 3000, 3), false},
		"rotated jpeg":       {testenv.MakeJPEGOrientation(t, dir, 1200, 800, 6), false},
		"display p3 jpeg":    {testenv.MakeJPEGDisplayP3(t, dir, 1600, 1200), false},
		"png with alpha":     {testenv.MakePNGAlpha(t, dir, 900, 600), false},
		"small jpeg":         {testenv.MakeJPEG(t, dir, 300, 200), false},
		"animated gif":       {testenv.MakeGIF(t, dir, 800, 400, 5), true},
		"tall heic":          {testenv.MakeHEIC(t, dir, 700, 2500), false},
		"wide tiff":          {testenv.MakeTIFF(t, dir, 3000, 900), false},
		"animated webp (5f)": {testenv.MakeAnimatedWebP(t, dir, 640, 480, 5), true},
	} {
		t.Run(name, func(t *testing.T) {
			h, err := vips.ReadHeader(tc.path)
			if err != nil {
				t.Fatal(err)
			}
			var want [][]byte
			cur, err := vips.Thumbnail(tc.path, cfg.High, tc.animate, h.HasICC)
			if err != nil {
				t.Fatal(err)
			}
			for i, step := range []struct{ size, q int }{{cfg.High, cfg.QualityHigh}, {cfg.Medium, cfg.QualityMedium}, {cfg.Low, cfg.QualityLow}} {
				if i > 0 {
					next, err := cur.Thumbnail(step.size)
					if err != nil {
						t.Fatal(err)
					}
					cur.Close()
					cur = next
				}
				data, err := cur.WebP(step.q, cfg.Effort)
				if err != nil {
					t.Fatal(err)
				}
				want = append(want, data)
			}
			cur.Close()

			for _, run := range []struct {
				name string
				do   func(out string) (transcoder.ImageResult, error)
			}{
				{"Transform", func(out string) (transcoder.ImageResult, error) {
					return im.Transform(context.Background(), tc.path, out)
				}},
				{"TransformRecipe(DefaultRecipe)", func(out string) (transcoder.ImageResult, error) {
					return im.TransformRecipe(context.Background(), tc.path, out, cfg.DefaultRecipe())
				}},
				{"TransformRecipe(nil)", func(out string) (transcoder.ImageResult, error) {
					return im.TransformRecipe(context.Background(), tc.path, out, nil)
				}},
			} {
				out := t.TempDir()
				res, err := run.do(out)
				if err != nil {
					t.Fatalf("%s: %v", run.name, err)
				}
				if len(res.Variants) != 3 {
					t.Fatalf("%s: %d variants", run.name, len(res.Variants))
				}
				for i, q := range []string{"high", "medium", "low"} {
					v := res.Variants[i]
					got, err := os.ReadFile(v.Path)
					if err != nil {
						t.Fatal(err)
					}
					if v.Quality != q || v.Format != transcoder.FormatWebP || v.Path != filepath.Join(out, q+".webp") || !bytes.Equal(got, want[i]) {
						t.Errorf("%s: %s at %s (%s), %d bytes: not the %d bytes of the code before recipes", run.name, v.Quality, v.Path, v.Format, len(got), len(want[i]))
					}
				}
			}
		})
	}
}

// TestValidateImageRecipe: every bad field is named as a recipe spells it, never as a flag.
func TestValidateImageRecipe(t *testing.T) {
	ok := transcoder.ImageVariantSpec{Name: "avatar", Width: 256, Height: 256, Fit: transcoder.FitCover, Format: transcoder.FormatAVIF}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid spec refused: %v", err)
	}
	if err := transcoder.ValidateImageRecipe(transcoder.DefaultImageConfig().DefaultRecipe()); err != nil {
		t.Fatalf("the default recipe is refused: %v", err)
	}
	with := func(f func(*transcoder.ImageVariantSpec)) transcoder.ImageVariantSpec {
		s := ok
		f(&s)
		return s
	}
	for _, c := range []struct {
		spec transcoder.ImageVariantSpec
		want string
	}{
		{with(func(s *transcoder.ImageVariantSpec) { s.Name = "" }), "name"},
		{with(func(s *transcoder.ImageVariantSpec) { s.Name = "Avatar" }), "name"},
		{with(func(s *transcoder.ImageVariantSpec) { s.Name = "-x" }), "name"},
		{with(func(s *transcoder.ImageVariantSpec) { s.Name = "a.b" }), "name"},
		{with(func(s *transcoder.ImageVariantSpec) { s.Name = strings.Repeat("a", 33) }), "name"},
		{with(func(s *transcoder.ImageVariantSpec) { s.Width = -1 }), "width"},
		{with(func(s *transcoder.ImageVariantSpec) { s.Width = 16384 }), "width"},
		{with(func(s *transcoder.ImageVariantSpec) { s.Height = 20000 }), "height"},
		{with(func(s *transcoder.ImageVariantSpec) { s.Width, s.Height, s.Fit = 0, 0, "" }), "width and height"},
		{with(func(s *transcoder.ImageVariantSpec) { s.Height = 0 }), "fit \"cover\" needs both width and height"},
		{with(func(s *transcoder.ImageVariantSpec) { s.Fit = "contain" }), "fit"},
		{with(func(s *transcoder.ImageVariantSpec) { s.Crop = "faces" }), "crop"},
		{with(func(s *transcoder.ImageVariantSpec) { s.Fit, s.Crop = transcoder.FitInside, transcoder.CropCentre }), "crop"},
		{with(func(s *transcoder.ImageVariantSpec) { s.Format = "gif" }), "format"},
		{with(func(s *transcoder.ImageVariantSpec) { s.Quality = 101 }), "quality"},
		{with(func(s *transcoder.ImageVariantSpec) { s.Quality = -1 }), "quality"},
		{with(func(s *transcoder.ImageVariantSpec) { s.Format, s.Quality = transcoder.FormatPNG, 90 }), "quality"},
	} {
		err := c.spec.Validate()
		if err == nil {
			t.Errorf("%+v: accepted", c.spec)
			continue
		}
		if !strings.HasPrefix(err.Error(), c.want) || strings.Contains(err.Error(), "--") {
			t.Errorf("%+v: %q, want it to start with %q (and name no flag)", c.spec, err, c.want)
		}
		if err := transcoder.ValidateImageRecipe([]transcoder.ImageVariantSpec{ok, c.spec}); err == nil || !strings.Contains(err.Error(), "variant 2") {
			t.Errorf("%+v in a recipe: %v", c.spec, err)
		}
	}

	many := make([]transcoder.ImageVariantSpec, 17)
	for i := range many {
		many[i] = with(func(s *transcoder.ImageVariantSpec) { s.Name = fmt.Sprintf("v%d", i) })
	}
	for name, c := range map[string]struct {
		specs []transcoder.ImageVariantSpec
		want  string
	}{
		"empty":     {nil, "no variants"},
		"too many":  {many, "17 variants, at most 16"},
		"same name": {[]transcoder.ImageVariantSpec{ok, with(func(s *transcoder.ImageVariantSpec) { s.Format = transcoder.FormatJPEG })}, `name "avatar" is also variant 1's`},
	} {
		if err := transcoder.ValidateImageRecipe(c.specs); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
	if err := transcoder.ValidateImageRecipe(many[:16]); err != nil {
		t.Errorf("16 variants refused: %v", err)
	}

	// A bad recipe given to the transformer is the configuration's fault, not the upload's.
	_, err := newImages(t, transcoder.DefaultImageConfig()).TransformRecipe(context.Background(), testenv.MakeJPEG(t, t.TempDir(), 64, 64), t.TempDir(),
		[]transcoder.ImageVariantSpec{with(func(s *transcoder.ImageVariantSpec) { s.Quality = 500 })})
	if err == nil || transcoder.IsBadInput(err) || !strings.Contains(err.Error(), "quality") {
		t.Errorf("bad recipe: %v (bad input: %v)", err, transcoder.IsBadInput(err))
	}
}
