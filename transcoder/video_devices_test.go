package transcoder_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
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

// TestVideoHDRToSDR: HLG and PQ sources (a portrait phone clip with a rotation matrix, an HDR10 clip,
// VP9 and AV1 HDR from a browser or camera export) come out as 8-bit H.264 tagged BT.709, upright, and look
// like the SDR pattern they were made from: neither washed out (what a player shows when HDR is
// passed on or ignored) nor darkened. The untreated source, measured the same way, is the control
// that shows the check can fail.
func TestVideoHDRToSDR(t *testing.T) {
	v := newVideos(t, transcoder.DefaultVideoConfig())
	dir := t.TempDir()
	ref := testenv.MeasureFrame(t, testenv.SDRReference(t, dir, 320, 180))
	cases := []struct {
		name  string
		path  string
		hdr   string
		w, h  int
		audio bool
	}{
		{"HLG HEVC portrait phone clip", testenv.MakePhoneHLG(t, dir), "hlg", 180, 320, true},
		{"PQ HEVC clip", testenv.MakePQClip(t, dir), "pq", 320, 180, true},
		{"PQ VP9 WebM", testenv.MakeDeviceClip(t, dir, testenv.DeviceClip{Name: "hdr.webm", Format: "webm",
			VCodec: "libvpx-vp9", ACodec: "libopus", Transfer: testenv.TransferPQ}), "pq", 320, 180, true},
		{"HLG AV1 MKV", testenv.MakeDeviceClip(t, dir, testenv.DeviceClip{Name: "hlg_av1.mkv", Format: "matroska",
			VCodec: "libsvtav1", ACodec: "libopus", Transfer: testenv.TransferHLG}), "hlg", 320, 180, true},
		// 8-bit HLG H.264/AAC in MP4, as some cameras write: everything else about it would be copied.
		{"HLG 8-bit H.264 MP4", testenv.MakeDeviceClip(t, dir, testenv.DeviceClip{Name: "hlg8.mp4", Format: "mp4",
			VCodec: "libx264", ACodec: "aac", Transfer: testenv.TransferHLG, EightBit: true}), "hlg", 320, 180, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			untreated := testenv.MeasureFrame(t, tc.path)
			if untreated.Saturation > 0.5*ref.Saturation {
				t.Fatalf("control: the untreated source has saturation %.0f, the SDR pattern %.0f: not washed out?", untreated.Saturation, ref.Saturation)
			}
			out := t.TempDir()
			res, err := v.Transform(context.Background(), tc.path, out)
			if err != nil {
				t.Fatalf("Transform: %v", err)
			}
			if res.Source.HDR != tc.hdr || res.MP4.HDR != "" {
				t.Errorf("source HDR %q, MP4 HDR %q; want %q and none", res.Source.HDR, res.MP4.HDR, tc.hdr)
			}
			if res.Remuxed {
				t.Error("an HDR source was remuxed")
			}
			checkMP4(t, res, out, tc.w, tc.h, tc.audio)
			checkPoster(t, res, out, tc.w, tc.h)
			c := testenv.ProbeColour(t, res.MP4Path)
			if c.Codec != "h264" || c.PixFmt != "yuv420p" || c.Primaries != "bt709" || c.Transfer != "bt709" || c.Space != "bt709" ||
				c.DisplayWidth != tc.w || c.DisplayHeight != tc.h || c.Rotate != 0 {
				t.Errorf("MP4 video %+v, want h264 yuv420p tagged bt709, %dx%d upright", c, tc.w, tc.h)
			}
			for _, f := range []string{res.MP4Path, res.PosterPath} {
				got := testenv.MeasureFrame(t, f)
				t.Logf("%s: luma %.0f saturation %.0f (SDR pattern %.0f/%.0f, untreated %.0f/%.0f)", filepath.Base(f),
					got.Luma, got.Saturation, ref.Luma, ref.Saturation, untreated.Luma, untreated.Saturation)
				if got.Saturation < 0.65*ref.Saturation || math.Abs(got.Luma-ref.Luma) > 0.2*ref.Luma {
					t.Errorf("%s looks washed out or dark: luma %.0f saturation %.0f, SDR pattern %.0f/%.0f",
						filepath.Base(f), got.Luma, got.Saturation, ref.Luma, ref.Saturation)
				}
			}
		})
	}
}

// TestVideoInterlaced: 1080i camcorder footage (interlaced H.264, in M2TS and in an MP4 that would
// otherwise be copied) comes out progressive: deinterlaced, not remuxed with its fields combed.
func TestVideoInterlaced(t *testing.T) {
	v := newVideos(t, transcoder.DefaultVideoConfig())
	dir := t.TempDir()
	for _, src := range []string{
		testenv.MakeDeviceClip(t, dir, testenv.DeviceClip{Name: "1080i.mts", Format: "mpegts", M2TS: true,
			VCodec: "libx264", ACodec: "ac3", Width: 640, Height: 360, Interlaced: true}),
		testenv.MakeDeviceClip(t, dir, testenv.DeviceClip{Name: "1080i.mp4", Format: "mp4",
			VCodec: "libx264", ACodec: "aac", Width: 640, Height: 360, Interlaced: true}),
	} {
		t.Run(filepath.Base(src), func(t *testing.T) {
			if c := testenv.ProbeColour(t, src); c.FieldOrder != "tt" {
				t.Fatalf("control: source field order %q, want tt", c.FieldOrder)
			}
			if il, n := testenv.CombedFrames(t, src); n == 0 || il < n*8/10 {
				t.Fatalf("control: idet finds %d of %d source frames interlaced", il, n)
			}
			out := t.TempDir()
			res, err := v.Transform(context.Background(), src, out)
			if err != nil {
				t.Fatalf("Transform: %v", err)
			}
			if res.Remuxed {
				t.Error("interlaced video was remuxed")
			}
			checkMP4(t, res, out, 640, 360, true)
			if c := testenv.ProbeColour(t, res.MP4Path); c.FieldOrder != "progressive" {
				t.Errorf("MP4 field order %q, want progressive", c.FieldOrder)
			}
			if il, n := testenv.CombedFrames(t, res.MP4Path); n == 0 || il > n/5 {
				t.Errorf("idet finds %d of %d MP4 frames interlaced (combed): not deinterlaced", il, n)
			}
		})
	}
}

// TestVideoDeviceContainersDamaged: cut-off uploads in the containers added for devices (an
// interrupted camcorder copy, a partial AVI) are bad input or a shorter video, never an internal
// error that would be retried.
func TestVideoDeviceContainersDamaged(t *testing.T) {
	v := newVideos(t, transcoder.DefaultVideoConfig())
	dir := t.TempDir()
	for _, c := range []testenv.DeviceClip{
		{Name: "cam.mts", Format: "mpegts", M2TS: true, VCodec: "libx264", ACodec: "ac3", Seconds: 4},
		{Name: "old.avi", Format: "avi", VCodec: "mpeg4", ACodec: "libmp3lame", Seconds: 4},
		{Name: "dvd.vob", Format: "vob", VCodec: "mpeg2video", ACodec: "ac3", Seconds: 4},
	} {
		src := testenv.MakeDeviceClip(t, dir, c)
		st, err := os.Stat(src)
		if err != nil {
			t.Fatal(err)
		}
		for _, keep := range []int{2048, int(st.Size() / 3)} {
			name := fmt.Sprintf("%s cut at %d bytes", c.Name, keep)
			t.Run(name, func(t *testing.T) {
				scratch := t.TempDir()
				cut := testenv.MakeTruncated(t, src, scratch, c.Name, keep)
				res, err := v.Transform(context.Background(), cut, scratch)
				if err != nil && strings.Contains(err.Error(), scratch) {
					t.Errorf("the error names the scratch directory: %v", err)
				}
				switch {
				case err == nil:
					t.Logf("decoded %.1f s of %.1f s", res.MP4.Duration, res.Source.Duration)
				case transcoder.IsBadInput(err):
					checkVideoErrorForPeople(t, err, cut)
					t.Logf("refused: %v", err)
				default:
					t.Fatalf("internal error for a damaged upload: %v", err)
				}
			})
		}
	}
}
