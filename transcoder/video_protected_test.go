package transcoder_test

// MP4s whose index misleads (mp4_content.go): encrypted tracks, fragmented files declaring a
// duration their fragments do not hold, init segments without media.

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/transcoder"
)

// A CENC-encrypted MP4 decodes as grey noise; it is refused at probing, saying why.
func TestVideoEncryptedIsRefused(t *testing.T) {
	v := newVideos(t, transcoder.DefaultVideoConfig())
	path := testenv.MakeEncryptedVideo(t, t.TempDir(), "protected.mp4", 2)
	if _, err := v.Probe(context.Background(), path); !transcoder.IsBadInput(err) ||
		err.Error() != "the video is encrypted (DRM); it cannot be converted" {
		t.Fatalf("Probe: got %v, want the encrypted (DRM) refusal", err)
	}
	_, err := v.Transform(context.Background(), path, t.TempDir())
	if !transcoder.IsBadInput(err) || !strings.Contains(err.Error(), "encrypted (DRM); it cannot be converted") {
		t.Fatalf("Transform: got %v, want the encrypted (DRM) refusal", err)
	}
	checkVideoErrorForPeople(t, err, path)
}

// A WebM whose track header declares encryption is refused the same way.
func TestVideoEncryptedWebMIsRefused(t *testing.T) {
	v := newVideos(t, transcoder.DefaultVideoConfig())
	path := testenv.MakeEncryptedWebM(t, t.TempDir(), "protected.webm", 1)
	if p := testenv.FFprobe(t, path); p.Stream("video") == nil {
		t.Fatalf("control: ffprobe should read the WebM's video, got %+v", p)
	}
	_, err := v.Probe(context.Background(), path)
	if !transcoder.IsBadInput(err) || err.Error() != "the video is encrypted (DRM); it cannot be converted" {
		t.Fatalf("Probe: got %v, want the encrypted (DRM) refusal", err)
	}
	// The same file, clear, is taken.
	if _, err := v.Probe(context.Background(), testenv.MakeVideo(t, t.TempDir(), "clear.webm",
		testenv.VideoOpts{Container: "webm", VCodec: "vp9", Seconds: 1})); err != nil {
		t.Fatalf("Probe of a clear WebM: %v", err)
	}
}

// A transport stream whose programme is scrambled (a DVB recording of a pay channel) is refused the
// same way; a clear one is taken.
func TestVideoScrambledTSIsRefused(t *testing.T) {
	v := newVideos(t, transcoder.DefaultVideoConfig())
	path := testenv.MakeScrambledTS(t, t.TempDir(), "recording.ts", 1)
	if p := testenv.FFprobe(t, path); p.Stream("video") == nil {
		t.Fatalf("control: ffprobe should read the stream's video, got %+v", p)
	}
	_, err := v.Probe(context.Background(), path)
	if !transcoder.IsBadInput(err) || err.Error() != "the video is encrypted (DRM); it cannot be converted" {
		t.Fatalf("Probe: got %v, want the encrypted (DRM) refusal", err)
	}
	if _, err := v.Probe(context.Background(), testenv.MakeVideo(t, t.TempDir(), "clear.ts",
		testenv.VideoOpts{Container: "mpegts", ACodec: "aac", Seconds: 1})); err != nil {
		t.Fatalf("Probe of a clear transport stream: %v", err)
	}
}

// A fragmented MP4 whose headers declare 3,900 s over 3 s of fragments is judged by its fragments:
// within the hour's limit, and converted whole.
func TestVideoFragmentedDurationFromContent(t *testing.T) {
	v := newVideos(t, transcoder.DefaultVideoConfig())
	dir := t.TempDir()
	path := testenv.MakeFragmentedVideo(t, dir, "live.mp4", 3, 3900*time.Second)
	if p := testenv.FFprobe(t, path); p.Duration < 3800 {
		t.Fatalf("control: ffprobe should report the declared 3900 s, got %v", p.Duration)
	}
	pr, err := v.Probe(context.Background(), path)
	if err != nil {
		t.Fatalf("Probe: %v", err)
	}
	if d := pr.Info.Duration; math.Abs(d-3) > 0.2 {
		t.Errorf("probed duration %.2f s, want the fragments' 3 s", d)
	}
	res, err := v.TransformProbed(context.Background(), pr, dir)
	if err != nil {
		t.Fatalf("Transform: %v", err)
	}
	if d := res.Source.Duration; math.Abs(d-3) > 0.2 {
		t.Errorf("durationSeconds %.2f, want 3", d)
	}
	if p := testenv.FFprobe(t, res.MP4Path); math.Abs(p.Duration-3) > 0.3 {
		t.Errorf("the MP4 lasts %.2f s, want 3", p.Duration)
	}
}

// An init segment alone has a video track and no frame: it is told so.
func TestVideoInitSegmentHasNoFrames(t *testing.T) {
	v := newVideos(t, transcoder.DefaultVideoConfig())
	path := testenv.MakeInitSegment(t, t.TempDir(), "init.mp4")
	_, err := v.Transform(context.Background(), path, t.TempDir())
	if !transcoder.IsBadInput(err) || !strings.HasPrefix(err.Error(), "the file has no video frames") {
		t.Fatalf("got %v, want the no-video-frames refusal", err)
	}
	checkVideoErrorForPeople(t, err, path)
}
