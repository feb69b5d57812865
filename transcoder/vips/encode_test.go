package vips

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mediaworker/mediaworker/internal/testenv"
)

// TestEncodersWriteThePictureOnly: AVIF, JPEG and PNG of sources with an ICC profile, EXIF,
// alpha, grey and 16 bits decode at the picture's size with no metadata; AVIF and PNG keep alpha,
// JPEG flattens it onto white.
func TestEncodersWriteThePictureOnly(t *testing.T) {
	if err := Init(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	grey := filepath.Join(dir, "grey.png")
	ffmpeg(t, grey, "format=gray", "gray")
	// 16 bits a band, and fully transparent on the left half: flattened, that half is white.
	deep := filepath.Join(dir, "deep.png")
	ffmpeg(t, deep, "format=rgba,geq=r='r(X,Y)':g='g(X,Y)':b='b(X,Y)':a='if(lt(X,W/2),0,255)',format=rgba64be", "rgba64be")

	for name, tc := range map[string]struct {
		path  string
		alpha bool
	}{
		"display p3 jpeg": {testenv.MakeJPEGDisplayP3(t, dir, 320, 240), false},
		"exif jpeg":       {testenv.MakeJPEGOrientation(t, dir, 320, 240, 6), false},
		"rgba png":        {testenv.MakePNGAlpha(t, dir, 320, 240), true},
		"grey png":        {grey, false},
		"16-bit rgba png": {deep, true},
	} {
		t.Run(name, func(t *testing.T) {
			h, err := ReadHeader(tc.path)
			if err != nil {
				t.Fatal(err)
			}
			im, err := ThumbnailBox(tc.path, 200, 0, false, h.HasICC)
			if err != nil {
				t.Fatal(err)
			}
			defer im.Close()
			for _, enc := range []struct {
				format, loader string
				encode         func() ([]byte, error)
				alpha          bool
			}{
				{"avif", "heifload", func() ([]byte, error) { return im.AVIF(50, 8) }, tc.alpha},
				{"jpg", "jpegload", func() ([]byte, error) { return im.JPEG(80) }, false},
				{"png", "pngload", func() ([]byte, error) { return im.PNG() }, tc.alpha},
			} {
				data, err := enc.encode()
				if err != nil {
					t.Fatalf("%s: %v", enc.format, err)
				}
				path := filepath.Join(t.TempDir(), "out."+enc.format)
				if err := os.WriteFile(path, data, 0o644); err != nil {
					t.Fatal(err)
				}
				info := testenv.DecodeImage(t, path)
				if info.Loader != enc.loader || info.Width != im.Width() || info.Height != im.Height() {
					t.Errorf("%s: %s %dx%d, want %s %dx%d", enc.format, info.Loader, info.Width, info.Height, enc.loader, im.Width(), im.Height())
				}
				if hasAlpha := info.Bands == 2 || info.Bands == 4; hasAlpha != enc.alpha {
					t.Errorf("%s: %d bands, alpha wanted: %v", enc.format, info.Bands, enc.alpha)
				}
				for k := range info.Fields {
					if strings.HasPrefix(k, "exif") || k == "icc-profile-data" || k == "xmp-data" || k == "iptc-data" {
						t.Errorf("%s: metadata %q was written", enc.format, k)
					}
				}
				for _, marker := range []string{"Exif", "ICC_PROFILE", "http://ns.adobe.com/xap", "prof"} {
					if bytes.Contains(data, []byte(marker)) {
						t.Errorf("%s: the file carries %q", enc.format, marker)
					}
				}
				if name == "16-bit rgba png" && enc.format == "jpg" {
					if px := testenv.Pixel(t, path, 10, 100); len(px) != 3 || px[0] < 250 || px[1] < 250 || px[2] < 250 {
						t.Errorf("jpg: a transparent pixel is %v, want white", px)
					}
				}
			}
		})
	}
}

// ffmpeg writes one 300×200 frame of testsrc2 through the filters vf in the pixel format pixFmt.
func ffmpeg(t *testing.T, out, vf, pixFmt string) {
	t.Helper()
	cmd := exec.Command("ffmpeg", "-nostdin", "-v", "error", "-y", "-f", "lavfi", "-i", "testsrc2=s=300x200",
		"-vf", vf, "-pix_fmt", pixFmt, "-frames:v", "1", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ffmpeg: %v\n%s", err, b)
	}
}

// TestCoverIsExact: Cover gives exactly the box asked for, from a picture scaled to any size at
// least the box's, and FirstFrame a still image of the first frame.
func TestCoverIsExact(t *testing.T) {
	if err := Init(); err != nil {
		t.Fatal(err)
	}
	src := testenv.MakeJPEG(t, t.TempDir(), 997, 613)
	im, err := ThumbnailBox(src, 0, 0, false, false)
	if err != nil {
		t.Fatal(err)
	}
	defer im.Close()
	for _, c := range []struct{ rw, rh, w, h int }{
		{997, 613, 613, 613}, {997, 613, 997, 613}, {417, 257, 256, 256}, {256, 158, 256, 157}, {1000, 700, 999, 700},
	} {
		for _, how := range []Interesting{InterestingCentre, InterestingEntropy, InterestingAttention} {
			out, err := im.Cover(c.rw, c.rh, c.w, c.h, how)
			if err != nil {
				t.Fatalf("%+v: %v", c, err)
			}
			if out.Width() != c.w || out.Height() != c.h || out.Frames() != 1 {
				t.Errorf("%+v, %d: %dx%d, %d frames", c, how, out.Width(), out.Height(), out.Frames())
			}
			out.Close()
		}
	}
	if _, err := im.Cover(200, 200, 256, 256, InterestingCentre); err == nil {
		t.Error("a cover larger than its scaled picture was cut")
	}

	anim := testenv.MakeGIF(t, t.TempDir(), 64, 48, 3)
	frames, err := ThumbnailBox(anim, 32, 32, true, false)
	if err != nil {
		t.Fatal(err)
	}
	defer frames.Close()
	first, err := frames.FirstFrame()
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	if frames.Frames() != 3 || first.Frames() != 1 || first.Width() != 32 || first.Height() != 24 {
		t.Errorf("first frame of %d: %d frames of %dx%d, want 1 of 32x24", frames.Frames(), first.Frames(), first.Width(), first.Height())
	}
	data, err := first.WebP(75, 0)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(data, []byte("ANIM")) {
		t.Error("the first frame was written as an animation")
	}
}
