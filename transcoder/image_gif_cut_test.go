package transcoder_test

import (
	"context"
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
