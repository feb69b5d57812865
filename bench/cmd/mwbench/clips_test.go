package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mediaworker/mediaworker/internal/testenv"
)

func TestKeepClips(t *testing.T) {
	all := []Clip{{Name: "720p-h264.mp4"}, {Name: "720p-hevc.mov"}, {Name: "1080p-h264.mp4"}}
	got, err := keepClips(all, []string{"1080p-h264.mp4", "720p-h264.mp4"})
	if err != nil || len(got) != 2 || got[0].Name != "720p-h264.mp4" || got[1].Name != "1080p-h264.mp4" {
		t.Fatalf("got %v, %v; want the two H.264 clips in the corpus's order", got, err)
	}
	if _, err := keepClips(all, []string{"1080p-h264.mp4", "4k.mp4"}); err == nil ||
		!strings.Contains(err.Error(), `no clip "4k.mp4"`) || !strings.Contains(err.Error(), "720p-hevc.mov") {
		t.Fatalf("an unknown clip must be named with the ones there are, got %v", err)
	}
}

// Issue 37 judges videos on clips of at least 10 s: every clip of the corpus is made that long, and
// clipDuration reads what ffprobe reads (the compare phase refuses shorter clips with it).
func TestClipsLastLongEnough(t *testing.T) {
	for _, c := range corpusSpec(t.TempDir(), 1).Clips {
		if c.Opts.Seconds < minClipSeconds {
			t.Errorf("clip %s is made %.0f s long, want at least %d s", c.Name, c.Opts.Seconds, minClipSeconds)
		}
	}
	clip := testenv.MakeVideo(t, t.TempDir(), "short.mp4", testenv.VideoOpts{Seconds: 2, FPS: 10, Container: "mp4"})
	d, err := clipDuration(context.Background(), clip)
	if err != nil || d < 1.9 || d > 2.2 {
		t.Fatalf("clipDuration of a 2 s clip = %.3f s, %v", d, err)
	}
	if _, err := clipDuration(context.Background(), filepath.Join(t.TempDir(), "none.mp4")); err == nil {
		t.Fatal("clipDuration of a missing file must fail")
	}
}
