package pipeline

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/gabriel-vasile/mimetype"
	"github.com/mediaworker/mediaworker/internal/testenv"
)

// Files that are no video we take but used to pass detection as one (or as nothing it could name),
// and were refused by ffprobe as "not a supported video": a Canon CR3 (an ISO base media file) and
// video elementary streams. Detection refuses them, saying what they are.

// cr3Head is the start of a Canon CR3 as the cameras write it: an ftyp box of major brand "crx ",
// then the moov box with Canon's uuid box first.
func cr3Head() []byte {
	var b bytes.Buffer
	box := func(typ string, payload []byte) {
		binary.Write(&b, binary.BigEndian, uint32(8+len(payload)))
		b.WriteString(typ)
		b.Write(payload)
	}
	box("ftyp", []byte("crx \x00\x00\x00\x01crx isom"))
	uuid := append([]byte{0x85, 0xc0, 0xb6, 0x87, 0x82, 0x0f, 0x11, 0xe0, 0x81, 0x11, 0xf4, 0xce, 0x46, 0x2b, 0x6a, 0x48},
		bytes.Repeat([]byte{0}, 64)...)
	var moov bytes.Buffer
	binary.Write(&moov, binary.BigEndian, uint32(8+len(uuid)))
	moov.WriteString("uuid")
	moov.Write(uuid)
	box("moov", moov.Bytes())
	return b.Bytes()
}

// makeElementaryStream writes 0.4 s of testsrc2 as a raw stream of codec, in ffmpeg's muxer
// format (mpeg1video, m4v, h264, ...).
func makeElementaryStream(t *testing.T, dir, name, codec, format string) string {
	t.Helper()
	testenv.RequireBinary(t, "ffmpeg")
	path := filepath.Join(dir, name)
	args := []string{"-nostdin", "-hide_banner", "-v", "error", "-y",
		"-f", "lavfi", "-i", "testsrc2=s=160x120:r=25:d=0.4", "-pix_fmt", "yuv420p", "-c:v", codec}
	if codec == "libx265" {
		args = append(args, "-x265-params", "log-level=error")
	}
	args = append(args, "-f", format, path)
	if out, err := exec.Command("ffmpeg", args...).CombinedOutput(); err != nil {
		t.Fatalf("making %s: %v\n%s", name, err, out)
	}
	return path
}

func TestDetectNamesWhatItRefuses(t *testing.T) {
	dir := t.TempDir()
	cr3 := filepath.Join(dir, "IMG_0001.CR3")
	if err := os.WriteFile(cr3, cr3Head(), 0o644); err != nil {
		t.Fatal(err)
	}
	// Why detection has to look for itself: mimetype takes each of these for what detection accepts.
	mpeg1 := makeElementaryStream(t, dir, "clip.m1v", "mpeg1video", "mpeg1video")
	for path, want := range map[string]string{cr3: "video/mp4", mpeg1: "video/mpeg"} {
		if m, err := mimetype.DetectFile(path); err != nil || m.String() != want {
			t.Fatalf("control: mimetype calls %s %v (%v), want %s", filepath.Base(path), m, err, want)
		}
	}
	for _, tc := range []struct {
		path, mime, want string
	}{
		{cr3, "image/x-canon-cr3", "detecting: camera RAW (Canon CR3) is not supported"},
		{mpeg1, "video/mpeg", "detecting: raw MPEG-1 video elementary stream is not supported (wrap it in a container)"},
		{makeElementaryStream(t, dir, "clip.m2v", "mpeg2video", "mpeg2video"), "video/mpeg",
			"detecting: raw MPEG-2 video elementary stream is not supported (wrap it in a container)"},
		{makeElementaryStream(t, dir, "clip.m4v", "mpeg4", "m4v"), "video/mp4v-es",
			"detecting: raw MPEG-4 video elementary stream is not supported (wrap it in a container)"},
		{makeElementaryStream(t, dir, "clip.h264", "libx264", "h264"), "video/h264",
			"detecting: raw H.264 video elementary stream is not supported (wrap it in a container)"},
		{makeElementaryStream(t, dir, "clip.hevc", "libx265", "hevc"), "video/h265",
			"detecting: raw HEVC video elementary stream is not supported (wrap it in a container)"},
	} {
		t.Run(filepath.Base(tc.path), func(t *testing.T) {
			mime, kind, err := Detect(tc.path)
			if err == nil || err.Error() != tc.want || !isPermanent(err) || kind != "" || mime != tc.mime {
				t.Fatalf("Detect = %q %q %v, want %s refused: %q", mime, kind, err, tc.mime, tc.want)
			}
			head, rerr := os.ReadFile(tc.path)
			if rerr != nil {
				t.Fatal(rerr)
			}
			// Triage sniffs the same way (it routes a refused type to the image lane, which refuses it
			// after the scan).
			if _, _, err := DetectBytes(head[:min(len(head), SniffBytes)]); err == nil || err.Error() != tc.want {
				t.Errorf("DetectBytes: %v, want %q", err, tc.want)
			}
		})
	}
	// What stays accepted: a program stream (pack header 00 00 01 BA), an MP4 of any other brand.
	testenv.MakeMPEGPS(t, dir)
	mp4 := testenv.MakeVideo(t, dir, "clip.mp4", testenv.VideoOpts{Container: "mp4"})
	checkDetect(t, dir, []detectCase{
		{"clip.mpg", "video/mpeg", Video},
		{filepath.Base(mp4), "video/mp4", Video},
	})
}

// TestRefusedRawFilesEndInDetecting: a job for a CR3 or an elementary stream ends in the detecting
// stage the contract documents, with the sentence that names the file, and nothing is transformed.
func TestRefusedRawFilesEndInDetecting(t *testing.T) {
	dir := t.TempDir()
	mpeg2, err := os.ReadFile(makeElementaryStream(t, dir, "clip.m2v", "mpeg2video", "mpeg2video"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"cr3", cr3Head(), "detecting: camera RAW (Canon CR3) is not supported"},
		{"m2v", mpeg2, "detecting: raw MPEG-2 video elementary stream is not supported (wrap it in a container)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.req.S3Key = "u/upload." + tc.name
			f.store.objs["media/"+f.req.S3Key] = tc.data
			out := f.run(t)
			if out.Kind != Failed || out.Response.Error != tc.want || !isPermanent(out.Err) {
				t.Fatalf("%s %q (%v), want the permanent failure %q", out.Kind, out.Response.Error, out.Err, tc.want)
			}
			if f.images.called {
				t.Error("the file was transformed as an image")
			}
			p, err := New(f.cfg, Deps{Store: f.store, Scanner: f.scan, Images: f.images, Videos: fakeVideos{}})
			if err != nil {
				t.Fatal(err)
			}
			if out := p.Triage(context.Background(), f.req); out.MediaKind != Image {
				t.Errorf("triage routed it to %q, want the image lane (the cheap one, which refuses it after the scan)", out.MediaKind)
			}
		})
	}
}
