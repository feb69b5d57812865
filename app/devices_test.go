package app_test

import (
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/mediaworker/mediaworker/app"
	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/internal/testenv"
)

// TestDeviceMedia publishes what phones, camcorders, screen recorders and old cameras upload through
// the real worker (embedded JetStream, its object store, clamd, ffmpeg) and checks that each gets
// exactly one response of the kind a user expects, valid against our schemas and the seed contract's
// (world.listen validates every event): videos as an upright H.264 MP4 in SDR BT.709 with audio and
// a poster of the size the response states, audio alone refused as unsupported.
func TestDeviceMedia(t *testing.T) {
	clamd := testenv.StartClamd(t)
	w := startWorld(t, app.StorageNATS, clamd, nil)
	media := t.TempDir()
	samples := testenv.MimetypeSamples(t)

	type want struct {
		mime     string
		w, h     int  // displayed size of the MP4 and the poster
		audio    bool // the MP4 has an audio stream
		hdr      string
		errorMsg string // a refusal: the error contains this
	}
	inputs := []struct {
		name, path string
		want       want
	}{
		{"HLG HEVC portrait phone clip", testenv.MakePhoneHLG(t, media), want{mime: "video/quicktime", w: 180, h: 320, audio: true, hdr: "hlg"}},
		{"PQ HEVC clip", testenv.MakePQClip(t, media), want{mime: "video/mp4", w: 320, h: 180, audio: true, hdr: "pq"}},
		{"VP9/Opus MKV screen recording", testenv.MakeScreenMKV(t, media), want{mime: "video/matroska", w: 320, h: 180, audio: true}},
		{"MPEG-4/MP3 AVI", testenv.MakeCameraAVI(t, media), want{mime: "video/x-msvideo", w: 320, h: 180, audio: true}},
		{"H.264/AC-3 camcorder MTS", testenv.MakeCamcorderMTS(t, media), want{mime: "video/mp2t", w: 320, h: 180, audio: true}},
		{"MPEG-2/AC-3 DVD VOB", testenv.MakeDVDVOB(t, media), want{mime: "video/mpeg", w: 320, h: 180, audio: true}},
		// A real file other software wrote (its AVI sibling, 30 s of encode, is in the transcoder's tests).
		{"mimetype's mkv.mkv", filepath.Join(samples, "mkv.mkv"), want{mime: "video/matroska", w: 1280, h: 720, audio: true}},
		{"AAC voice memo .m4a", testenv.MakeM4A(t, media), want{errorMsg: "detecting: unsupported media type: audio/mp4"}},
		{"mimetype's m4a.m4a", filepath.Join(samples, "m4a.m4a"), want{errorMsg: "detecting: unsupported media type: audio/mp4"}},
	}
	// The SDR pattern the HDR clips were made from: what their tone-mapped output should look like.
	sdr := testenv.MeasureFrame(t, testenv.SDRReference(t, media, 320, 180))
	ids := make([]string, len(inputs))
	for i, in := range inputs {
		ids[i] = w.request(w.upload(in.path, "dev/"+filepath.Base(in.path)))
	}
	// A refused request without mediaUrl is answered with the upload's URI as originalUrl.
	noURL := uuid.NewString()
	w.publishRaw([]byte(`{"s3Key":"dev/x.mov","s3Bucket":"media","mediaId":"`+noURL+`"}`), noURL)

	for i, in := range inputs {
		t.Run(in.name, func(t *testing.T) {
			r := w.await(ids[i], 3*time.Minute)
			if in.want.errorMsg != "" {
				if r.Success || !strings.Contains(r.Error, in.want.errorMsg) {
					t.Fatalf("got %+v, want a failure containing %q", r, in.want.errorMsg)
				}
				return
			}
			if !r.Success || len(r.Processed) != 2 {
				t.Fatalf("want success with an MP4 and a poster, got %+v", r)
			}
			if m := r.Metadata; m == nil || m.MIME != in.want.mime || m.HDR != in.want.hdr || m.Width != in.want.w || m.Height != in.want.h {
				t.Errorf("metadata %+v, want %s %dx%d hdr %q", r.Metadata, in.want.mime, in.want.w, in.want.h, in.want.hdr)
			}
			mp4 := variant(t, r, contracts.QualityOriginal)
			file := w.fetch(servedKey(t, w, mp4.URL))
			c := testenv.ProbeColour(t, file)
			if c.Codec != "h264" || c.PixFmt != "yuv420p" || c.DisplayWidth != in.want.w || c.DisplayHeight != in.want.h || c.Rotate != 0 {
				t.Errorf("MP4 video %+v, want h264 yuv420p %dx%d upright", c, in.want.w, in.want.h)
			}
			if c.Transfer == testenv.TransferHLG || c.Transfer == testenv.TransferPQ || c.Primaries == "bt2020" {
				t.Errorf("MP4 is still tagged HDR: %+v", c)
			}
			if in.want.hdr != "" && (c.Primaries != "bt709" || c.Transfer != "bt709" || c.Space != "bt709") {
				t.Errorf("tone-mapped MP4 tagged %s/%s/%s, want bt709", c.Primaries, c.Transfer, c.Space)
			}
			if in.want.hdr != "" {
				checkNotWashedOut(t, file, sdr)
			}
			if a := testenv.FFprobe(t, file).Stream("audio"); in.want.audio && (a == nil || a.CodecName != "aac") {
				t.Errorf("MP4 audio %+v, want aac", a)
			}
			poster := variant(t, r, contracts.QualityThumbnail)
			posterFile := w.fetch(servedKey(t, w, poster.URL))
			if in.want.hdr != "" {
				checkNotWashedOut(t, posterFile, sdr)
			}
			img := testenv.DecodeImage(t, posterFile)
			if img.Loader != "jpegload" || img.Width != in.want.w || img.Height != in.want.h ||
				poster.Width != img.Width || poster.Height != img.Height {
				t.Errorf("poster %dx%d (%s), response says %dx%d, want %dx%d", img.Width, img.Height, img.Loader,
					poster.Width, poster.Height, in.want.w, in.want.h)
			}
		})
	}
	t.Run("refusal without mediaUrl echoes a URI", func(t *testing.T) {
		r := w.await(noURL, time.Minute)
		if r.Success || r.OriginalURL != "s3://media/dev/x.mov" || !strings.Contains(r.Error, "mediaUrl is missing") {
			t.Fatalf("got %+v", r)
		}
	})
	scratchEmpty(t, w)
}

// checkNotWashedOut decodes the first frame of a video or image the plain way (as a browser that
// ignores HDR tags would) and compares it with the SDR pattern the HDR clip was made from: an HDR
// source passed on untreated measures at about a third of the pattern's saturation.
func checkNotWashedOut(t *testing.T, path string, sdr testenv.FrameStats) {
	t.Helper()
	got := testenv.MeasureFrame(t, path)
	t.Logf("%s: luma %.0f saturation %.0f (SDR pattern %.0f/%.0f)", filepath.Base(path), got.Luma, got.Saturation, sdr.Luma, sdr.Saturation)
	if got.Saturation < 0.65*sdr.Saturation || math.Abs(got.Luma-sdr.Luma) > 0.2*sdr.Luma {
		t.Errorf("%s looks washed out or dark: luma %.0f saturation %.0f, the SDR pattern %.0f/%.0f",
			filepath.Base(path), got.Luma, got.Saturation, sdr.Luma, sdr.Saturation)
	}
}

// TestDeviceImages: an AVIF photo, an animated GIF and an animated WebP from a phone or messenger,
// through the real worker, come out as a user expects: three WebP variants each, the AVIF a still of
// its own size (never a video: AVIF's parent type is MP4), the animations still animated (each variant
// decoded and its frames counted), no warnings.
func TestDeviceImages(t *testing.T) {
	clamd := testenv.StartClamd(t)
	w := startWorld(t, app.StorageNATS, clamd, nil)
	media := t.TempDir()
	inputs := []struct {
		name, path, mime string
		w, h, frames     int // of the high variant
	}{
		{"AVIF still", testenv.MakeAVIF(t, media, 1600, 1200), "image/avif", 1600, 1200, 1},
		{"animated GIF", testenv.MakeGIF(t, media, 480, 270, 12), "image/gif", 480, 270, 12},
		{"animated WebP", testenv.MakeAnimatedWebP(t, media, 480, 270, 12), "image/webp", 480, 270, 12},
	}
	ids := make([]string, len(inputs))
	for i, in := range inputs {
		ids[i] = w.request(w.upload(in.path, "dev/"+filepath.Base(in.path)))
	}
	for i, in := range inputs {
		t.Run(in.name, func(t *testing.T) {
			r := w.await(ids[i], 3*time.Minute)
			if !r.Success || len(r.Processed) != 3 || len(r.Warnings) != 0 {
				t.Fatalf("want three WebP variants and no warnings, got %+v", r)
			}
			if m := r.Metadata; m == nil || m.MIME != in.mime {
				t.Errorf("metadata %+v, want %s", r.Metadata, in.mime)
			}
			for _, v := range r.Processed {
				if v.Format != contracts.FormatWebP {
					t.Errorf("%s variant is %s, want webp", v.Quality, v.Format)
					continue
				}
				img := testenv.DecodeImage(t, w.fetch(servedKey(t, w, v.URL)))
				frames, _ := strconv.Atoi(img.Fields["n-pages"])
				if img.Loader != "webpload" || img.Width != v.Width || img.Height != v.Height || max(frames, 1) != in.frames {
					t.Errorf("%s: decodes as %s %dx%d with %d frames; the response says %dx%d, want %d frames",
						v.Quality, img.Loader, img.Width, img.Height, frames, v.Width, v.Height, in.frames)
				}
				if v.Quality == contracts.QualityHigh && (v.Width != in.w || v.Height != in.h) {
					t.Errorf("high variant %dx%d, want %dx%d (never enlarged)", v.Width, v.Height, in.w, in.h)
				}
			}
		})
	}
	scratchEmpty(t, w)
}

// servedKey is the object key of a variant URL the worker's HTTP server serves (/objects/<bucket>/<key>:
// the URL form of the embedded store when the worker serves its variants).
func servedKey(t *testing.T, w *world, u string) string {
	t.Helper()
	_, key, ok := strings.Cut(u, "/objects/"+w.bucket+"/")
	if !ok {
		t.Fatalf("variant url %q is not served under /objects/%s/", u, w.bucket)
	}
	return key
}
