package transcoder_test

import (
	"context"
	"math"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/transcoder"
)

// An upload that already is H.264/AAC in MP4 is remuxed, not re-encoded: same streams, fast start,
// metadata dropped; anything else is encoded.
func TestRemuxFastPath(t *testing.T) {
	dir := t.TempDir()
	ready := testenv.MakeVideo(t, dir, "ready.mp4", testenv.VideoOpts{Width: 1280, Height: 720, Seconds: 4, FPS: 25, ACodec: "aac", Container: "mp4"})
	hevc := testenv.MakeVideo(t, dir, "hevc.mov", testenv.VideoOpts{Width: 640, Height: 360, Seconds: 2, FPS: 25, VCodec: "hevc", ACodec: "aac"})

	v := newVideos(t, transcoder.DefaultVideoConfig())
	start := time.Now()
	res, err := v.Transform(context.Background(), ready, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if !res.Remuxed {
		t.Fatal("an H.264/AAC MP4 within the caps was re-encoded")
	}
	p := testenv.FFprobe(t, res.MP4Path)
	if vs, as := p.Stream("video"), p.Stream("audio"); vs == nil || vs.CodecName != "h264" || as == nil || as.CodecName != "aac" || vs.Width != 1280 {
		t.Fatalf("remuxed streams: %+v", p.Streams)
	}
	if math.Abs(p.Duration-4) > 0.1 {
		t.Errorf("duration %.3f, want 4", p.Duration)
	}
	if atoms := testenv.MP4Atoms(t, res.MP4Path); indexOf(atoms, "moov") > indexOf(atoms, "mdat") {
		t.Errorf("not fast start: %v", atoms)
	}
	if res.PosterPath == "" {
		t.Errorf("no poster: %v", res.PosterErr)
	}

	off := transcoder.DefaultVideoConfig()
	off.Remux = false
	start = time.Now()
	if res, err := newVideos(t, off).Transform(context.Background(), ready, t.TempDir()); err != nil || res.Remuxed {
		t.Fatalf("with remux off: %v, remuxed %v", err, res.Remuxed)
	}
	t.Logf("4 s 720p H.264/AAC MP4: remux %s, transcode %s", took.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))

	if res, err := v.Transform(context.Background(), hevc, t.TempDir()); err != nil || res.Remuxed {
		t.Fatalf("HEVC must be encoded: %v, remuxed %v", err, res.Remuxed)
	}
}

func indexOf(list []string, s string) int {
	for i, x := range list {
		if x == s {
			return i
		}
	}
	return len(list)
}

// TestRemuxRealClips: real H.264/AAC files that mimetype ships (a 1080p stereo MP4, a small mono MP4
// and a MOV) are remuxed, and the description the worker reports, read from the new MP4's header in
// Go, is what ffprobe says of the file; the copy decodes to the end without an error.
func TestRemuxRealClips(t *testing.T) {
	samples := testenv.MimetypeSamples(t)
	v := newVideos(t, transcoder.DefaultVideoConfig())
	for _, tc := range []struct {
		name             string
		w, h             int
		posterW, posterH int
	}{{"mp4.1.mp4", 1920, 1080, 1280, 720}, {"mp4.mp4", 560, 320, 560, 320}, {"mov.mov", 560, 320, 560, 320}} {
		t.Run(tc.name, func(t *testing.T) {
			out := t.TempDir()
			res, err := v.Transform(context.Background(), filepath.Join(samples, tc.name), out)
			if err != nil {
				t.Fatal(err)
			}
			if !res.Remuxed {
				t.Fatal("an H.264/AAC file within the caps was re-encoded")
			}
			checkMP4(t, res, out, tc.w, tc.h, true) // res.MP4 against ffprobe's view of the file too
			if math.Abs(res.MP4.Duration-res.Source.Duration) > 0.1 {
				t.Errorf("remux lasts %.3f s, source %.3f s", res.MP4.Duration, res.Source.Duration)
			}
			cmd := exec.Command("ffmpeg", "-v", "error", "-xerror", "-i", res.MP4Path, "-f", "null", "-")
			if msg, err := cmd.CombinedOutput(); err != nil || len(msg) > 0 {
				t.Errorf("decoding the remux: %v\n%s", err, msg)
			}
			checkPoster(t, res, out, tc.posterW, tc.posterH)
		})
	}
}
