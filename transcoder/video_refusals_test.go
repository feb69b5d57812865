package transcoder_test

// Videos the transcoder must refuse: broken, hostile or over a limit, with errors a person can act on.

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/transcoder"
)

func TestVideoBadInputs(t *testing.T) {
	v := newVideos(t, transcoder.DefaultVideoConfig())
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}

	// A valid video the attack file points at: if ffmpeg followed the reference, the transform
	// would succeed.
	testenv.MakeVideo(t, dir, "other.mp4", testenv.VideoOpts{Container: "mp4"})
	concat := write("upload.mp4", "ffconcat version 1.0\nfile 'other.mp4'\n")
	if p := testenv.FFprobe(t, concat); p.FormatName != "concat" || p.Stream("video") == nil {
		t.Fatalf("control: plain ffprobe should read the ffconcat file as concat with video, got %+v", p)
	}

	faststart := testenv.MakeVideo(t, dir, "whole.mp4", testenv.VideoOpts{Seconds: 4, Container: "mp4", FastStart: true})
	data, err := os.ReadFile(faststart)
	if err != nil {
		t.Fatal(err)
	}
	truncated := write("truncated.mp4", string(data[:len(data)/3]))

	for _, tc := range []struct {
		name, path, wantMsg string
	}{
		{"text named .mp4", write("notes.mp4", "this is not a video\n"), "not a supported video"},
		{"empty", write("empty.mp4", ""), "not a supported video"},
		{"ffconcat named .mp4", concat, "not a supported video"},
		// Containers ffmpeg reads but the demuxer allow-list does not take.
		{"flv container", testenv.MakeDeviceClip(t, dir, testenv.DeviceClip{Name: "clip.flv", Format: "flv", VCodec: "libx264"}), "not a supported video"},
		{"asf container", testenv.MakeDeviceClip(t, dir, testenv.DeviceClip{Name: "clip.wmv", Format: "asf", VCodec: "mpeg4"}), "not a supported video"},
		{"audio only", testenv.MakeAudio(t, dir, "song.m4a", 1), "the file has no video stream, only audio (aac): audio alone is not supported"},
		{"jpeg named .mp4", testenv.MakeJPEG(t, dir, 320, 240), "not a supported video"},
		{"truncated mp4", truncated, "video is truncated or corrupt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := v.Transform(context.Background(), tc.path, t.TempDir())
			if !transcoder.IsBadInput(err) {
				t.Fatalf("got %v, want a bad-input error", err)
			}
			if !strings.HasPrefix(err.Error(), tc.wantMsg) {
				t.Errorf("error %q, want it to start with %q", err, tc.wantMsg)
			}
			checkVideoErrorForPeople(t, err, tc.path)
			t.Logf("%v", err)
		})
	}
}

// checkVideoErrorForPeople: a video refused as bad input is told in words for the person who
// uploaded it, without ffmpeg's or ffprobe's own (those go to the operator's log as Detail), the
// file's name or path.
func checkVideoErrorForPeople(t *testing.T, err error, path string) {
	t.Helper()
	msg := err.Error()
	for _, bad := range []string{"ffmpeg", "ffprobe", "exited with", "killed (", " @ 0x", "Invalid data", "moov", "time_base",
		filepath.Dir(path), filepath.Base(path)} {
		if strings.Contains(msg, bad) {
			t.Errorf("the message a person reads contains %q: %q", bad, msg)
		}
	}
	// What the tool said is still there for the operator's log, through any wrapping.
	detail := transcoder.ErrorDetail(fmt.Errorf("transforming: %w", err))
	if fromTool := strings.HasPrefix(msg, "not a supported video") || strings.Contains(msg, "could not be decoded"); fromTool && detail == "" {
		t.Errorf("%q has no detail for the operator", msg)
	}
	if detail != "" {
		t.Logf("for the operator: %s", detail)
	}
}

func TestVideoLimits(t *testing.T) {
	src := testenv.MakeVideo(t, t.TempDir(), "src.mp4", testenv.VideoOpts{Seconds: 3, Container: "mp4"})

	cfg := transcoder.DefaultVideoConfig()
	cfg.MaxDuration = 2 * time.Second
	_, err := newVideos(t, cfg).Probe(context.Background(), src)
	if !transcoder.IsBadInput(err) || err.Error() != "video is 3s long, limit is 2s" {
		t.Errorf("duration limit: got %v", err)
	}

	cfg = transcoder.DefaultVideoConfig()
	cfg.MaxPixels = 320*240 - 1
	_, err = newVideos(t, cfg).Transform(context.Background(), src, t.TempDir())
	if !transcoder.IsBadInput(err) || !strings.HasPrefix(err.Error(), "video is 320×240 (0.1 MP per frame), limit is") {
		t.Errorf("pixel limit: got %v", err)
	}

	cfg = transcoder.DefaultVideoConfig()
	cfg.MaxOutputBytes = 20_000
	_, err = newVideos(t, cfg).Transform(context.Background(), src, t.TempDir())
	if !transcoder.IsBadInput(err) || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("output limit: got %v", err)
	}

	pr, err := newVideos(t, transcoder.DefaultVideoConfig()).Probe(context.Background(), src)
	var info transcoder.VideoInfo
	if pr != nil {
		info = pr.Info
	}
	if err != nil || info.Width != 320 || info.Height != 240 || info.VideoCodec != "h264" || info.HasAudio ||
		math.Abs(info.Duration-3) > 0.1 {
		t.Errorf("Probe = %+v, %v", info, err)
	}
}

func TestVideoHLS(t *testing.T) {
	cfg := transcoder.DefaultVideoConfig()
	cfg.HLS = true
	cfg.HLSSegment = time.Second
	v := newVideos(t, cfg)
	src := testenv.MakeVideo(t, t.TempDir(), "src.mov", testenv.VideoOpts{Seconds: 4, ACodec: "aac"})
	out := t.TempDir()
	res, err := v.Transform(context.Background(), src, out)
	if err != nil {
		t.Fatalf("Transform: %v", err)
	}
	checkMP4(t, res, out, 320, 240, true)

	hlsDir := filepath.Join(out, "hls")
	if res.HLSDir != hlsDir || len(res.HLSFiles) < 3 || res.HLSFiles[0] != filepath.Join(hlsDir, "index.m3u8") {
		t.Fatalf("HLS dir %q files %v: want %s/index.m3u8 then at least 2 segments", res.HLSDir, res.HLSFiles, hlsDir)
	}
	playlist, err := os.ReadFile(res.HLSFiles[0])
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(playlist), "#EXT-X-PLAYLIST-TYPE:VOD") || !strings.Contains(string(playlist), "#EXT-X-ENDLIST") {
		t.Errorf("playlist is not a complete VOD playlist:\n%s", playlist)
	}
	var listed []string
	var total float64
	sc := bufio.NewScanner(strings.NewReader(string(playlist)))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if d, ok := strings.CutPrefix(line, "#EXTINF:"); ok {
			secs, err := strconv.ParseFloat(strings.TrimSuffix(d, ","), 64)
			if err != nil {
				t.Errorf("bad EXTINF line %q", line)
			}
			total += secs
		}
		if line != "" && !strings.HasPrefix(line, "#") {
			listed = append(listed, filepath.Join(hlsDir, line)) // relative to the playlist
		}
	}
	if !slices.Equal(listed, res.HLSFiles[1:]) {
		t.Errorf("playlist lists %v, result has %v", listed, res.HLSFiles[1:])
	}
	if math.Abs(total-4) > 0.2 {
		t.Errorf("segments add up to %.2f s, want about 4", total)
	}
	for _, seg := range res.HLSFiles[1:] {
		p := testenv.FFprobe(t, seg)
		if p.FormatName != "mpegts" || p.Stream("video") == nil || p.Stream("video").CodecName != "h264" || p.Stream("audio") == nil {
			t.Errorf("segment %s: %+v", seg, p)
		}
	}
}

// TestVideoCancelKillsFFmpeg cancels a transcode while ffmpeg runs and checks that nothing of its
// process group is left.

// TestVideoTooLongASideIsRefusedClearly: a strip within the pixel limit but longer than libx264
// encodes (16384 pixels on a side), once the short edge is made at least 2, is refused with its size
// and the limit, not as a video that "could not be decoded".
func TestVideoTooLongASideIsRefusedClearly(t *testing.T) {
	v := newVideos(t, transcoder.DefaultVideoConfig())
	dir := t.TempDir()
	for _, tc := range []struct {
		w, h int
		want string
	}{
		{20000, 2, "video is 20000×2, limit is 16384 pixels on a side"},
		{1, 9000, "video is 1×9000 and would be encoded as 2×18000, limit is 16384 pixels on a side"},
	} {
		src := testenv.MakeThinVideo(t, dir, fmt.Sprintf("strip_%dx%d.mkv", tc.w, tc.h), tc.w, tc.h)
		_, err := v.Transform(context.Background(), src, t.TempDir())
		if !transcoder.IsBadInput(err) || err.Error() != tc.want {
			t.Errorf("%d×%d: got %v, want %q", tc.w, tc.h, err, tc.want)
		}
	}
}
