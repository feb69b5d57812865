package main

import (
	"strings"
	"testing"
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
