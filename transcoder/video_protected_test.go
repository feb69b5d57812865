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

// Module versions whose zips ship the encrypted and fragmented MP4s used below: files this project
// did not make (mp4ff's CENC cenc/cbcs and PIFF test vectors and their decryptions, go-mp4's
// encrypted init segments and fragmented sample).
const (
	mp4ffVersion = "v0.47.0"
	goMP4Version = "v1.4.1"
)

// Real encrypted MP4s from other projects are refused with the DRM words; their decryptions and
// other clear fragmented files are taken, lasting what their content lasts. A file decrypted by
// mp4ff (encv rewritten to avc1, sinf to free, the fragments' senc kept) is not called encrypted,
// nor is encrypted audio without any video (it is refused as audio alone, as its decryption is).
func TestVideoProtectedRealFiles(t *testing.T) {
	mp4ff := testenv.ModuleDir(t, "github.com/Eyevinn/mp4ff", mp4ffVersion)
	gomp4 := testenv.ModuleDir(t, "github.com/abema/go-mp4", goMP4Version)
	v := newVideos(t, transcoder.DefaultVideoConfig())
	const drm = "the video is encrypted (DRM); it cannot be converted"
	for _, p := range []string{
		mp4ff + "/mp4/testdata/cbcs.mp4",                                     // cbcs, fragmented
		mp4ff + "/mp4/testdata/prog_8s_enc_dashinit.mp4",                     // cenc, fragmented
		mp4ff + "/mp4/testdata/init_cenc.cmfv",                               // a CMAF init segment
		mp4ff + "/cmd/mp4ff-decrypt/testdata/PIFF/video/complseg-1.0001.mp4", // PIFF
		gomp4 + "/testdata/sample_init.encv.mp4",
		gomp4 + "/testdata/sample_init.enca.mp4",
	} {
		if _, err := v.Probe(context.Background(), p); !transcoder.IsBadInput(err) || err.Error() != drm {
			t.Errorf("%s: Probe: %v, want %q", p, err, drm)
		}
	}
	for _, tc := range []struct {
		path    string
		seconds float64
	}{
		{mp4ff + "/mp4/testdata/cbcsdec.mp4", 13.706},
		{mp4ff + "/mp4/testdata/prog_8s_dec_dashinit.mp4", 8},
		{mp4ff + "/cmd/mp4ff-decrypt/testdata/PIFF/video/complseg-1.0001_dec.mp4", 4.92},
		{mp4ff + "/examples/resegmenter/testdata/testV300.mp4", 8}, // its mehd says 3,900 s
		{gomp4 + "/testdata/sample_fragmented.mp4", 1.21},
	} {
		p, err := v.Probe(context.Background(), tc.path)
		if err != nil {
			t.Errorf("%s: Probe: %v", tc.path, err)
			continue
		}
		if math.Abs(p.Info.Duration-tc.seconds) > 0.1 {
			t.Errorf("%s: duration %.3f s, want %.3f", tc.path, p.Info.Duration, tc.seconds)
		}
	}
	// Encrypted audio alone is refused for what it would be refused for decrypted.
	const audioOnly = "the file has no video stream, only audio (aac): audio alone is not supported"
	for _, p := range []string{
		mp4ff + "/mp4/testdata/cbcs_audio.mp4",
		mp4ff + "/cmd/mp4ff-decrypt/testdata/PIFF/audio/init.mp4",
	} {
		if _, err := v.Probe(context.Background(), p); !transcoder.IsBadInput(err) || err.Error() != audioOnly {
			t.Errorf("%s: Probe: %v, want %q", p, err, audioOnly)
		}
	}
	// Decrypted by mp4ff with its senc boxes kept (and its media cut out by mp4ff to keep it small):
	// refused for what it is, not as encrypted.
	p := mp4ff + "/examples/add-sidx/testdata/clear_with_enc_boxes.mp4"
	if _, err := v.Probe(context.Background(), p); err == nil || strings.Contains(err.Error(), "encrypted") {
		t.Errorf("%s: Probe: %v, want a refusal that is not the DRM one", p, err)
	}
}
