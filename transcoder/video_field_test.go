package transcoder_test

// Files from the field that the transcoder used to refuse or describe wrongly (issue 21 item 5),
// each made here with ffmpeg or from ffmpeg's bytes.

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/transcoder"
)

// ffmpeg runs ffmpeg with args (quiet, overwriting) and fails the test on an error.
func ffmpeg(t *testing.T, args ...string) {
	t.Helper()
	testenv.RequireBinary(t, "ffmpeg")
	full := append([]string{"-nostdin", "-hide_banner", "-v", "error", "-y"}, args...)
	if out, err := exec.Command("ffmpeg", full...).CombinedOutput(); err != nil {
		t.Fatalf("ffmpeg %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// ffprobeEntries returns ffprobe's "key=value" lines for entries (an -show_entries argument).
func ffprobeEntries(t *testing.T, path, entries string) string {
	t.Helper()
	out, err := exec.Command("ffprobe", "-v", "error", "-show_entries", entries, "-of", "default=nw=1", path).Output()
	if err != nil {
		t.Fatalf("ffprobe %s: %v", path, err)
	}
	return string(out)
}

// tsWithoutPID copies the MPEG-TS at src to dst without the packets of one PID: what a live capture
// whose audio never arrived holds (the program map still declares the stream).
func tsWithoutPID(t *testing.T, src, dst string, pid int) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	var out []byte
	for off := 0; off+188 <= len(data); off += 188 {
		p := data[off : off+188]
		if p[0] != 0x47 {
			t.Fatalf("%s: no sync byte at %d", src, off)
		}
		if int(p[1]&0x1f)<<8|int(p[2]) != pid {
			out = append(out, p...)
		}
	}
	if err := os.WriteFile(dst, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestVideoTSWithEmptyAudioTrack: an MPEG-TS whose program declares an AAC stream that holds no packet
// (HLS and live captures) was refused as "could not be decoded" (the encode mapped the empty stream);
// the empty stream is dropped and the video converted alone.
func TestVideoTSWithEmptyAudioTrack(t *testing.T) {
	v := newVideos(t, transcoder.DefaultVideoConfig())
	dir := t.TempDir()
	full := testenv.MakeVideo(t, dir, "full.ts", testenv.VideoOpts{Seconds: 2, ACodec: "aac", Container: "mpegts"})
	ids := ffprobeEntries(t, full, "stream=codec_type,id")
	audioPID := -1
	for _, block := range strings.SplitAfter(ids, "codec_type=") {
		if strings.HasPrefix(block, "audio") {
			hex, _, _ := strings.Cut(strings.TrimPrefix(strings.SplitN(block, "id=", 2)[1], "0x"), "\n")
			n, err := strconv.ParseInt(hex, 16, 32)
			if err != nil {
				t.Fatalf("ffprobe's stream ids %q: %v", ids, err)
			}
			audioPID = int(n)
		}
	}
	if audioPID < 0 {
		t.Fatalf("no audio stream in %q", ids)
	}
	src := filepath.Join(dir, "capture.ts")
	tsWithoutPID(t, full, src, audioPID)
	// Control: the stream is still declared, without a packet, so without parameters.
	if got := ffprobeEntries(t, src, "stream=codec_type,codec_name,sample_rate,channels"); !strings.Contains(got, "codec_type=audio") ||
		!strings.Contains(got, "sample_rate=0") {
		t.Fatalf("control: the stripped TS should declare an empty AAC stream, ffprobe says:\n%s", got)
	}

	out := t.TempDir()
	res, err := v.Transform(context.Background(), src, out)
	if err != nil {
		t.Fatalf("Transform: %v (%s)", err, transcoder.ErrorDetail(err))
	}
	if res.Source.HasAudio || res.Source.AudioCodec != "" || res.Source.Container != "mpegts" {
		t.Errorf("source described as %+v, want an mpegts without audio", res.Source)
	}
	checkMP4(t, res, out, 320, 240, false)
	checkPoster(t, res, out, 320, 240)
	if math.Abs(res.MP4.Duration-2) > 0.2 {
		t.Errorf("MP4 lasts %.2f s, want about 2", res.MP4.Duration)
	}
}

// TestVideoLateStart: MP4s whose timestamps start late were refused as truncated (their declared
// duration counts from zero, so 3 s of content starting at 30 s "lasted" 33 s and the 3 s decoded
// looked cut): their length is judged from their own start, in the remux and in the encode.
func TestVideoLateStart(t *testing.T) {
	dir := t.TempDir()
	offset := filepath.Join(dir, "offset.mp4")
	ffmpeg(t, "-f", "lavfi", "-i", "testsrc2=s=320x240:r=25:d=3", "-f", "lavfi", "-i", "sine=d=3",
		"-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", "-c:a", "aac", "-output_ts_offset", "30", offset)

	// A DASH representation: its init segment joined to its third media segment (4 s to 6 s),
	// as a capture of a live stream is saved.
	dash := filepath.Join(dir, "dash")
	if err := os.Mkdir(dash, 0o755); err != nil {
		t.Fatal(err)
	}
	ffmpeg(t, "-f", "lavfi", "-i", "testsrc2=s=320x240:r=25:d=8", "-c:v", "libx264", "-preset", "ultrafast",
		"-pix_fmt", "yuv420p", "-g", "50", "-sc_threshold", "0", "-f", "dash", "-seg_duration", "2",
		"-use_template", "1", "-use_timeline", "0", "-init_seg_name", "init.m4s", "-media_seg_name", "seg-$Number$.m4s",
		filepath.Join(dash, "stream.mpd"))
	var joined []byte
	for _, name := range []string{"init.m4s", "seg-3.m4s"} {
		b, err := os.ReadFile(filepath.Join(dash, name))
		if err != nil {
			t.Fatal(err)
		}
		joined = append(joined, b...)
	}
	segment := filepath.Join(dir, "segment.mp4")
	if err := os.WriteFile(segment, joined, 0o644); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name      string
		path      string
		length    float64 // the content's
		audio     bool
		remux     bool
		declaredA float64 // control: ffprobe's format duration, at least
	}{
		{"offset 30 s, remuxed", offset, 3, true, true, 30},
		{"offset 30 s, encoded", offset, 3, true, false, 30},
		{"dash segment, encoded", segment, 2, false, false, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if d := testenv.FFprobe(t, tc.path).Duration; d < tc.declaredA {
				t.Fatalf("control: ffprobe says the file lasts %.2f s, want at least %.0f (the timeline from zero)", d, tc.declaredA)
			}
			cfg := transcoder.DefaultVideoConfig()
			cfg.Remux = tc.remux
			out := t.TempDir()
			res, err := newVideos(t, cfg).Transform(context.Background(), tc.path, out)
			if err != nil {
				t.Fatalf("Transform: %v (%s)", err, transcoder.ErrorDetail(err))
			}
			if res.Remuxed != tc.remux {
				t.Errorf("Remuxed = %v, want %v", res.Remuxed, tc.remux)
			}
			if math.Abs(res.Source.Duration-tc.length) > 0.1 || math.Abs(res.MP4.Duration-tc.length) > 0.1 {
				t.Errorf("source lasts %.2f s, MP4 %.2f s; want both about %.0f (the content)", res.Source.Duration, res.MP4.Duration, tc.length)
			}
			checkMP4(t, res, out, 320, 240, tc.audio)
			checkPoster(t, res, out, 320, 240)
		})
	}
}

// TestVideoCutBeforeIndex: an MP4 whose index comes after the media (recorders, ffmpeg without fast
// start) cut before or inside it was "not a supported video"; it is truncated, like the other cut
// files.
func TestVideoCutBeforeIndex(t *testing.T) {
	v := newVideos(t, transcoder.DefaultVideoConfig())
	dir := t.TempDir()
	whole := testenv.MakeVideo(t, dir, "whole.mp4", testenv.VideoOpts{Seconds: 2, ACodec: "aac", Container: "mp4"})
	data, err := os.ReadFile(whole)
	if err != nil {
		t.Fatal(err)
	}
	atoms := testenv.MP4Atoms(t, whole)
	if atoms[len(atoms)-1] != "moov" {
		t.Fatalf("control: top-level boxes %v, want the index (moov) last", atoms)
	}
	moov := strings.LastIndex(string(data), "moov") - 4
	const want = "video is truncated: the MP4 file ends before its index (was the upload cut short?)"
	for _, tc := range []struct {
		name    string
		size    int
		toolSaw bool // ffprobe refused it (inside the index, it reads the tracks before the cut, here none)
	}{
		{"in the media", moov / 2, true},
		{"right before the index", moov, true},
		{"inside the index", moov + 40, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := filepath.Join(t.TempDir(), "upload.mp4")
			if err := os.WriteFile(src, data[:tc.size], 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := v.Transform(context.Background(), src, t.TempDir())
			if !transcoder.IsBadInput(err) || err.Error() != want {
				t.Fatalf("got %v, want the bad input %q", err, want)
			}
			if tc.toolSaw && !strings.Contains(transcoder.ErrorDetail(err), "moov") {
				t.Errorf("the operator's detail %q does not carry ffprobe's words", transcoder.ErrorDetail(err))
			}
			checkVideoErrorForPeople(t, err, src)
		})
	}
	// A file that is no MP4 at all is still not called cut.
	notes := filepath.Join(dir, "notes.mp4")
	if err := os.WriteFile(notes, []byte("\x00\x00\x00\x10ftypisom\x00\x00\x00\x00just some words"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Transform(context.Background(), notes, t.TempDir()); err == nil || !strings.HasPrefix(err.Error(), "not a supported video") {
		t.Errorf("an ftyp box and text: %v, want \"not a supported video\"", err)
	}
}

// TestVideoLiveWebMDuration: a WebM written live (MediaRecorder, streaming) has no duration in its
// header; the response's durationSeconds comes from what the encode decoded.
func TestVideoLiveWebMDuration(t *testing.T) {
	v := newVideos(t, transcoder.DefaultVideoConfig())
	src := filepath.Join(t.TempDir(), "recording.webm")
	ffmpeg(t, "-f", "lavfi", "-i", "testsrc2=s=320x240:r=25:d=3", "-f", "lavfi", "-i", "sine=d=3",
		"-c:v", "libvpx-vp9", "-deadline", "realtime", "-cpu-used", "8", "-b:v", "500k", "-c:a", "libopus",
		"-live", "1", "-f", "webm", src)
	if got := ffprobeEntries(t, src, "format=duration"); !strings.Contains(got, "duration=N/A") {
		t.Fatalf("control: the live WebM should declare no duration, ffprobe says %q", got)
	}
	pr, err := v.Probe(context.Background(), src)
	if err != nil || pr.Info.Duration != 0 {
		t.Fatalf("Probe: %+v, %v; want a duration of 0 (unknown)", pr, err)
	}
	out := t.TempDir()
	res, err := v.TransformProbed(context.Background(), pr, out)
	if err != nil {
		t.Fatalf("Transform: %v (%s)", err, transcoder.ErrorDetail(err))
	}
	if math.Abs(res.Source.Duration-3) > 0.1 || res.Source.Duration != res.MP4.Duration {
		t.Errorf("source duration %.3f s, MP4 %.3f s: want the MP4's, about 3", res.Source.Duration, res.MP4.Duration)
	}
	checkMP4(t, res, out, 320, 240, true)
}

// TestVideoPosterSkipsBlack: a clip that opens on 3 s of black gets a poster of its content, taken at
// or after 3 s, whether its poster comes from the encode's frames or from a run beside the remux. A
// clip that opens on good frames keeps the poster at 10% in.
func TestVideoPosterSkipsBlack(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "opening.mp4")
	ffmpeg(t, "-f", "lavfi", "-i", "color=c=black:s=320x240:r=25:d=3,format=yuv420p[b];"+
		"testsrc2=s=320x240:r=25:d=4,format=yuv420p[c];[b][c]concat=n=2:v=1:a=0",
		"-c:v", "libx264", "-preset", "veryfast", "-pix_fmt", "yuv420p", "-movflags", "+faststart", src)
	plain := testenv.MakeVideo(t, dir, "plain.mp4", testenv.VideoOpts{Seconds: 7, FPS: 25, Container: "mp4", FastStart: true})
	for _, remux := range []bool{false, true} {
		t.Run(fmt.Sprintf("remux=%v", remux), func(t *testing.T) {
			cfg := transcoder.DefaultVideoConfig()
			cfg.Remux = remux
			v := newVideos(t, cfg)
			out := t.TempDir()
			res, err := v.Transform(context.Background(), src, out)
			if err != nil {
				t.Fatal(err)
			}
			if res.Remuxed != remux {
				t.Fatalf("Remuxed = %v, want %v", res.Remuxed, remux)
			}
			checkPoster(t, res, out, 320, 240)
			if l := meanLuma(t, res.PosterPath); l < 60 {
				t.Errorf("poster mean luma %.0f: black, not the content", l)
			}
			if res.PosterTimeSeconds < 3 || res.PosterTimeSeconds > 3.5 {
				t.Errorf("poster taken at %.3f s, want within the first part after the black (3 to 3.5 s)", res.PosterTimeSeconds)
			}
			leftovers, _ := filepath.Glob(filepath.Join(out, "poster-*"))
			if len(leftovers) != 0 {
				t.Errorf("candidates left behind: %v", leftovers)
			}

			out = t.TempDir()
			res, err = v.Transform(context.Background(), plain, out)
			if err != nil {
				t.Fatal(err)
			}
			checkPoster(t, res, out, 320, 240)
			if math.Abs(res.PosterTimeSeconds-0.7) > 0.001 {
				t.Errorf("a clip without a bad opening: poster at %.3f s, want 0.7 (10%% in)", res.PosterTimeSeconds)
			}
		})
	}
}
