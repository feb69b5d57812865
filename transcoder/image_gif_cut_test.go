package transcoder_test

import (
	"bytes"
	"context"
	"fmt"
	"image/gif"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/transcoder"
)

// TestImageCutGIFIsTold: a GIF cut short keeps the frames it holds, as an APNG does, with an
// "animation incomplete" warning; a whole GIF, and a still missing only its trailer, get none; one
// cut inside its first frame is refused as truncated.
func TestImageCutGIFIsTold(t *testing.T) {
	im := newImages(t, transcoder.DefaultImageConfig())
	dir := t.TempDir()
	anim, err := os.ReadFile(testenv.MakeGIFFrames(t, dir, 64, 48, 10))
	if err != nil {
		t.Fatal(err)
	}
	still, err := os.ReadFile(testenv.MakeGIFFrames(t, t.TempDir(), 64, 48, 1))
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name, path, warning, err string
	}{
		{"whole", write("whole.gif", anim), "", ""},
		{"cut in its seventh frame", write("cut.gif", anim[:len(anim)*7/10]),
			"animation incomplete: the file ends inside frame 7, without the GIF's end (was the upload cut short?)", ""},
		{"without its trailer", write("notrailer.gif", anim[:len(anim)-1]),
			"animation incomplete: the file ends after frame 10, without the GIF's end (was the upload cut short?)", ""},
		{"a still without its trailer", write("still.gif", still[:len(still)-1]), "", ""},
		{"cut in its first frame", write("first.gif", anim[:len(anim)/10]), "",
			"reading image header: the GIF file is truncated: it ends before the image does (was the upload cut short?)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := im.Transform(context.Background(), tc.path, t.TempDir())
			if tc.err != "" {
				if !transcoder.IsBadInput(err) || err.Error() != tc.err {
					t.Fatalf("got %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Transform: %v", err)
			}
			var incomplete []string
			for _, w := range res.Warnings {
				if strings.HasPrefix(w, "animation incomplete") {
					incomplete = append(incomplete, w)
				}
			}
			switch {
			case tc.warning == "" && len(incomplete) > 0:
				t.Errorf("warnings %q, want none about the animation", incomplete)
			case tc.warning != "" && (len(incomplete) != 1 || incomplete[0] != tc.warning):
				t.Errorf("warnings %q, want %q", res.Warnings, tc.warning)
			}
			t.Logf("%d frames, warnings %q", res.Frames, res.Warnings)
		})
	}
}

// TestImageCutRealGIFs: GIFs other projects ship (govips' animations, a 100-frame terminal recording
// in urfave/cli's docs), whole and cut: a whole one keeps every frame with no warning; one cut half
// way keeps the frames it holds, the last as far as it goes, and names the frame it ends in; one
// missing only its trailer keeps every frame and says it ends after the last.
func TestImageCutRealGIFs(t *testing.T) {
	govips := testenv.ModuleDir(t, "github.com/davidbyttow/govips/v2", "v2.16.0")
	cli := testenv.ModuleDir(t, "github.com/urfave/cli/v2", "v2.27.7")
	im := newImages(t, transcoder.DefaultImageConfig())
	for _, src := range []string{
		filepath.Join(govips, "resources", "gif-animated.gif"),
		filepath.Join(govips, "resources", "gif-animated-2.gif"),
		filepath.Join(cli, "docs", "v2", "images", "default-bash-autocomplete.gif"),
	} {
		t.Run(filepath.Base(src), func(t *testing.T) {
			data, err := os.ReadFile(src)
			if err != nil {
				t.Fatal(err)
			}
			g, err := gif.DecodeAll(bytes.NewReader(data))
			if err != nil || len(g.Image) < 2 {
				t.Fatalf("control: Go's decoder: %v", err)
			}
			total := len(g.Image)
			transform := func(data []byte) (transcoder.ImageResult, []string) {
				t.Helper()
				p := filepath.Join(t.TempDir(), "in.gif")
				if err := os.WriteFile(p, data, 0o644); err != nil {
					t.Fatal(err)
				}
				res, err := im.Transform(context.Background(), p, t.TempDir())
				if err != nil {
					t.Fatalf("Transform of %d bytes: %v", len(data), err)
				}
				var incomplete []string
				for _, w := range res.Warnings {
					if strings.HasPrefix(w, "animation incomplete") {
						incomplete = append(incomplete, w)
					}
				}
				return res, incomplete
			}
			if res, w := transform(data); res.Frames != total || len(w) != 0 {
				t.Errorf("whole: %d frames, warnings %q; want %d frames, none", res.Frames, w, total)
			}
			res, w := transform(data[:len(data)/2])
			var inside int
			if len(w) != 1 {
				t.Fatalf("cut half way: warnings %q, want one", res.Warnings)
			}
			if _, err := fmt.Sscanf(w[0], "animation incomplete: the file ends inside frame %d,", &inside); err != nil ||
				inside < 2 || inside >= total || (res.Frames != inside && res.Frames != inside-1) {
				t.Errorf("cut half way: %d frames, warning %q; want it to name the frame kept last or the one after", res.Frames, w[0])
			}
			want := fmt.Sprintf("animation incomplete: the file ends after frame %d, without the GIF's end (was the upload cut short?)", total)
			if res, w := transform(data[:len(data)-1]); res.Frames != total || len(w) != 1 || w[0] != want {
				t.Errorf("without its trailer: %d frames, warnings %q; want %d frames, %q", res.Frames, w, total, want)
			}
		})
	}
}
