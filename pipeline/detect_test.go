package pipeline

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mediaworker/mediaworker/internal/testenv"
)

type detectCase struct {
	file string
	mime string
	kind MediaKind // "" for refused
}

// checkDetect runs Detect on each case's file and compares the type, the kind and, for a refused
// one, the error a person reads.
func checkDetect(t *testing.T, dir string, cases []detectCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			mime, kind, err := Detect(filepath.Join(dir, tc.file))
			if tc.kind == "" {
				want := "detecting: unsupported media type: " + tc.mime
				if err == nil || err.Error() != want || !isPermanent(err) || kind != "" {
					t.Fatalf("got %q %q %v, want the permanent error %q", mime, kind, err, want)
				}
				return
			}
			if err != nil || mime != tc.mime || kind != tc.kind {
				t.Fatalf("got %q %q %v, want %q %q", mime, kind, err, tc.mime, tc.kind)
			}
		})
	}
}

// TestDetectRealSamples runs detection on the format samples mimetype v1.4.3 ships: real files
// written by other software, not by our tests.
func TestDetectRealSamples(t *testing.T) {
	checkDetect(t, testenv.MimetypeSamples(t), []detectCase{
		{"mp4.mp4", "video/mp4", Video},
		{"mp4.1.mp4", "video/mp4", Video},
		{"mov.mov", "video/quicktime", Video},
		{"mqv.mqv", "video/quicktime", Video}, // Sony's QuickTime brand, a child of video/mp4
		{"3gp.3gp", "video/3gpp", Video},
		{"3g2.3g2", "video/3gpp2", Video},
		{"mkv.mkv", "video/matroska", Video}, // matched through its alias video/x-matroska as well
		{"webm.webm", "video/webm", Video},
		{"avi.avi", "video/x-msvideo", Video},
		{"mpeg.mpeg", "video/mpeg", Video},
		{"avif.avif", "image/avif", Image},         // a child of video/mp4: must not become a video
		{"avifsequence.avif", "image/avif", Image}, // animated AVIF likewise
		{"heic.single.heic", "image/heic", Image},
		{"heif.heif", "image/heif", Image},
		{"apng.png", "image/apng", Image},
		{"jpg.jpg", "image/jpeg", Image},
		{"png.png", "image/png", Image},
		{"gif.gif", "image/gif", Image},
		{"webp.webp", "image/webp", Image},
		{"tiff.tiff", "image/tiff", Image},
		// Refused: audio, even in a container whose parent type we take, and containers we do not
		// allow ffmpeg to demux.
		{"m4a.m4a", "audio/mp4", ""},
		{"audio.mp4", "audio/mp4", ""},
		{"mp3.mp3", "audio/mpeg", ""},
		{"wav.wav", "audio/wav", ""},
		{"flac.flac", "audio/flac", ""},
		{"flv.flv", "video/x-flv", ""},
		{"asf.asf", "video/x-ms-asf", ""},
		{"ogg.ogv", "video/ogg", ""},
		{"rmvb.rmvb", "application/vnd.rn-realmedia-vbr", ""},
		{"bmp.bmp", "image/bmp", ""},
		{"svg.svg", "image/svg+xml", Document}, // a document: refused without a documents recipe (triage_test, pipeline_test)
		{"pdf.pdf", "application/pdf", Document},
		{"zip.zip", "application/zip", ""},
	})
}

// TestDetectDeviceContainers runs detection on what devices write, made with ffmpeg: transport
// streams (which mimetype does not detect), program streams and an AAC voice memo.
func TestDetectDeviceContainers(t *testing.T) {
	dir := t.TempDir()
	testenv.MakeCamcorderMTS(t, dir)
	testenv.MakeBroadcastTS(t, dir)
	testenv.MakeDVDVOB(t, dir)
	testenv.MakeMPEGPS(t, dir)
	testenv.MakeM4A(t, dir)
	testenv.MakeScreenMKV(t, dir)
	testenv.MakeCameraAVI(t, dir)
	// A transport stream cut after three packets is too short to tell from noise.
	ts, err := os.ReadFile(filepath.Join(dir, "recording.ts"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "short.ts"), ts[:3*188], 0o644); err != nil {
		t.Fatal(err)
	}
	// Sync bytes at the right places in text are still text.
	text := []byte(strings.Repeat("G"+strings.Repeat("x", 187), 20))
	if err := os.WriteFile(filepath.Join(dir, "text.ts"), text, 0o644); err != nil {
		t.Fatal(err)
	}
	checkDetect(t, dir, []detectCase{
		{"camcorder.mts", "video/mp2t", Video},
		{"recording.ts", "video/mp2t", Video},
		{"dvd.vob", "video/mpeg", Video},
		{"clip.mpg", "video/mpeg", Video},
		{"screen.mkv", "video/matroska", Video},
		{"camera.avi", "video/x-msvideo", Video},
		{"memo.m4a", "audio/mp4", ""},
		{"short.ts", "application/octet-stream", ""},
		{"text.ts", "text/plain; charset=utf-8", ""},
	})
}

func TestSniffTransportStream(t *testing.T) {
	packets := func(n, size, offset int) []byte {
		b := make([]byte, n*size)
		for i := range n {
			b[i*size+offset] = 0x47
		}
		return b
	}
	broken := packets(10, 188, 0)
	broken[5*188] = 0
	cases := []struct {
		name string
		head []byte
		want bool
	}{
		{"ts", packets(10, 188, 0), true},
		{"m2ts", packets(10, 192, 4), true},
		{"four packets", packets(4, 188, 0), true},
		{"three packets", packets(3, 188, 0), false},
		{"a broken run", broken, false},
		{"empty", nil, false},
	}
	for _, tc := range cases {
		if got := sniffTransportStream(tc.head); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

// isPermanent reports whether err is the pipeline's permanent error.
func isPermanent(err error) bool {
	var pe *Error
	return errors.As(err, &pe) && pe.Class == Permanent
}
