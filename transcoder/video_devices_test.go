package transcoder_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/transcoder"
)

// TestVideoDeviceContainers: what camcorders, screen recorders, old cameras and DVD camcorders write
// comes out as an H.264/AAC MP4 and a poster of the size a player shows, audio kept; so do the real
// samples mimetype ships for these containers.
func TestVideoDeviceContainers(t *testing.T) {
	v := newVideos(t, transcoder.DefaultVideoConfig())
	dir := t.TempDir()
	samples := testenv.MimetypeSamples(t)
	cases := []struct {
		name          string
		path          string
		container     string // as the result names the source's
		w, h          int
		audio         bool
		videoCodec    string
		sourceAudioIn string
	}{
		{"VP9/Opus MKV (screen recorder)", testenv.MakeScreenMKV(t, dir), "webm", 320, 180, true, "vp9", "opus"},
		{"MPEG-4/MP3 AVI (old camera)", testenv.MakeCameraAVI(t, dir), "avi", 320, 180, true, "mpeg4", "mp3"},
		{"H.264/AC-3 MTS (camcorder, 192-byte packets)", testenv.MakeCamcorderMTS(t, dir), "mpegts", 320, 180, true, "h264", "ac3"},
		{"H.264/AAC TS", testenv.MakeBroadcastTS(t, dir), "mpegts", 320, 180, true, "h264", "aac"},
		{"MPEG-2/AC-3 VOB (DVD camcorder)", testenv.MakeDVDVOB(t, dir), "mpeg", 320, 180, true, "mpeg2video", "ac3"},
		{"MPEG-2/MP2 MPG", testenv.MakeMPEGPS(t, dir), "mpeg", 320, 180, true, "mpeg2video", "mp2"},
		// Real files from mimetype's testdata.
		{"avi.avi", filepath.Join(samples, "avi.avi"), "avi", 512, 384, true, "mpeg4", "mp3"},
		{"mkv.mkv", filepath.Join(samples, "mkv.mkv"), "matroska", 1280, 720, true, "mpeg4", "aac"},
		{"mpeg.mpeg", filepath.Join(samples, "mpeg.mpeg"), "mpeg", 320, 240, false, "mpeg2video", ""},
		{"3gp.3gp", filepath.Join(samples, "3gp.3gp"), "mp4", 352, 288, true, "h263", "amr_nb"},
		{"webm.webm", filepath.Join(samples, "webm.webm"), "webm", 560, 320, true, "vp8", "vorbis"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out := t.TempDir()
			res, err := v.Transform(context.Background(), tc.path, out)
			if err != nil {
				t.Fatalf("Transform: %v", err)
			}
			s := res.Source
			if s.Container != tc.container || s.VideoCodec != tc.videoCodec || s.AudioCodec != tc.sourceAudioIn ||
				s.Width != tc.w || s.Height != tc.h {
				t.Errorf("source described as %+v, want %s %s/%s %dx%d", s, tc.container, tc.videoCodec, tc.sourceAudioIn, tc.w, tc.h)
			}
			if res.Remuxed {
				t.Errorf("a %s source was remuxed, want an encode", tc.container)
			}
			checkMP4(t, res, out, tc.w, tc.h, tc.audio)
			checkPoster(t, res, out, tc.w, tc.h)
		})
	}
}
