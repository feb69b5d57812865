package transcoder

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/progress"
)

// phoneClip writes a clip shaped like a phone's or a web upload's: H.264 (x264 veryfast, a keyframe
// every gop frames) and AAC in a fast-start MP4.
func phoneClip(t testing.TB, w, h int, seconds, fps, gop int) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), fmt.Sprintf("phone-%dx%d-g%d.mp4", w, h, gop))
	d := strconv.Itoa(seconds)
	cmd := exec.Command("ffmpeg", "-nostdin", "-v", "error", "-y",
		"-f", "lavfi", "-i", fmt.Sprintf("testsrc2=s=%dx%d:r=%d:d=%s", w, h, fps, d),
		"-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000:d="+d,
		"-c:v", "libx264", "-preset", "veryfast", "-pix_fmt", "yuv420p", "-g", strconv.Itoa(gop), "-keyint_min", strconv.Itoa(gop),
		"-c:a", "aac", "-b:a", "96k", "-movflags", "+faststart", "-t", d, out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("making %s: %v\n%s", out, err, b)
	}
	return out
}

type probedStream struct {
	Codec    string  `json:"codec_name"`
	Type     string  `json:"codec_type"`
	Width    int     `json:"width"`
	Height   int     `json:"height"`
	Duration float64 `json:"duration,string"`
}

func probeStreams(t *testing.T, path string) []probedStream {
	t.Helper()
	out, err := exec.Command("ffprobe", "-v", "error", "-of", "json", "-show_entries", "stream=codec_name,codec_type,width,height,duration", path).Output()
	if err != nil {
		t.Fatalf("ffprobe %s: %v", filepath.Base(path), err)
	}
	var doc struct{ Streams []probedStream }
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	return doc.Streams
}

// videoPacketsHash is the SHA-256 of a file's video packets' bytes, in order (ffmpeg's streamhash of
// a copy: no decoding).
func videoPacketsHash(t *testing.T, path string) string {
	t.Helper()
	out, err := exec.Command("ffmpeg", "-nostdin", "-v", "error", "-i", path, "-map", "0:v:0", "-c", "copy",
		"-f", "streamhash", "-hash", "sha256", "-").Output()
	if err != nil {
		t.Fatalf("hashing %s's video packets: %v", path, err)
	}
	return strings.TrimSpace(string(out))
}

// hlsSegmentDurations reads a rendition playlist's EXTINF durations.
func hlsSegmentDurations(t *testing.T, path string) []float64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var ds []float64
	for l := range strings.Lines(string(b)) {
		if d, ok := strings.CutPrefix(strings.TrimSpace(l), "#EXTINF:"); ok {
			f, _ := strconv.ParseFloat(strings.TrimSuffix(d, ","), 64)
			ds = append(ds, f)
		}
	}
	return ds
}

// A 1080p H.264/AAC upload with a keyframe every 2 s, a recipe asking for mp4 [1080, 720] and an HLS
// ladder [1080, 720, 480] of 4 s segments: one run makes all five renditions; the 1080p MP4 and the
// 1080p HLS rendition are the input's own packets (byte for byte), the others are encoded; every
// rendition decodes for the input's duration at its height; the copied rendition's segments are cut
// where the encoded ones are.
func TestRenditionsRemuxWhatFits(t *testing.T) {
	v := newLadderVideos(t)
	ctx := context.Background()
	src := phoneClip(t, 1920, 1080, 12, 25, 50)
	pr, err := v.Probe(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	// Progress flows across the whole run, copies and encodes alike: several reports, rising to 1.
	var mu sync.Mutex
	var got []float64
	pctx := progress.With(ctx, func(f float64) {
		mu.Lock()
		got = append(got, f)
		mu.Unlock()
	})
	res, err := v.Renditions(pctx, pr, out, RenditionsSpec{MP4: []int{720, 1080},
		HLS: &LadderSpec{Rungs: []LadderRung{{1080, 20000}, {720, 3000}, {480, 1200}}}})
	if err != nil {
		t.Fatalf("Renditions: %v", err)
	}
	mu.Lock()
	if len(got) < 3 || got[len(got)-1] != 1 || !slices.IsSorted(got) || got[0] > 0.5 {
		t.Errorf("progress reports %v: want several from early on, rising to 1", got)
	}
	mu.Unlock()
	if len(res.MP4) != 2 || res.MP4[0].Name != "1080p" || res.MP4[1].Name != "720p" {
		t.Fatalf("mp4 renditions %+v, want 1080p then 720p", res.MP4)
	}
	if !res.MP4[0].Remuxed || res.MP4[1].Remuxed {
		t.Errorf("remuxed: 1080p %v, 720p %v; want the input's own size copied and the 720p encoded", res.MP4[0].Remuxed, res.MP4[1].Remuxed)
	}
	if res.HLSCopied != "1080p" {
		t.Errorf("the 1080p rung was not copied (%q, refused: %s)", res.HLSCopied, res.HLSCopyRefused)
	}
	want := videoPacketsHash(t, src)
	if got := videoPacketsHash(t, res.MP4[0].Path); got != want {
		t.Errorf("the remuxed 1080p MP4's video packets differ from the input's:\n%s\n%s", got, want)
	}
	for i, m := range res.MP4 {
		wantH := []int{1080, 720}[i]
		ss := probeStreams(t, m.Path)
		if len(ss) != 2 || ss[0].Codec != "h264" || ss[0].Height != wantH || ss[1].Codec != "aac" {
			t.Errorf("%s: streams %+v, want h264 %dp and aac", m.Name, ss, wantH)
		}
		if d := ladderDecodedSeconds(t, m.Path); d < 11.8 || d > 12.2 {
			t.Errorf("%s decodes for %.2f s, want 12", m.Name, d)
		}
		if m.Height != wantH || m.Info.Duration < 11.8 {
			t.Errorf("%s: result %+v", m.Name, m)
		}
		if !bytes.Contains(readHead(t, m.Path, 64<<10), []byte("moov")) {
			t.Errorf("%s is not fast-start (no moov in its first 64 KiB)", m.Name)
		}
	}
	// The ladder: the copied rung decodes to the input's packets' frames, and every rendition's
	// segments are ~4 s (the input's keyframes every 2 s) and cut at the same times.
	hls := res.HLS
	if len(hls.Renditions) != 3 {
		t.Fatalf("ladder renditions %+v", hls.Renditions)
	}
	var first []float64
	for i, r := range hls.Renditions {
		pl := filepath.Join(hls.Dir, r.Playlist)
		if d := ladderDecodedSeconds(t, pl); d < 11.8 || d > 12.2 {
			t.Errorf("%s decodes for %.2f s, want 12", r.Playlist, d)
		}
		ds := hlsSegmentDurations(t, pl)
		for j, d := range ds[:len(ds)-1] {
			if d < 3.9 || d > 6.1 {
				t.Errorf("%s segment %d lasts %.2f s, want 4-6", r.Playlist, j, d)
			}
		}
		if i == 0 {
			first = ds
		} else if fmt.Sprintf("%.2f", ds) != fmt.Sprintf("%.2f", first) {
			t.Errorf("%s's segments %.2f are not cut where %s's are (%.2f)", r.Playlist, ds, hls.Renditions[0].Playlist, first)
		}
	}
}

func readHead(t *testing.T, path string, n int) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, n)
	k, _ := f.Read(b)
	return b[:k]
}

// A 720p input asked for mp4 [1080, 720] gets one 720p rendition, not a 1080p one and not two copies
// of the same 720p.
func TestRenditionsNeverUpscale(t *testing.T) {
	v := newLadderVideos(t)
	ctx := context.Background()
	src := phoneClip(t, 1280, 720, 4, 25, 50)
	pr, err := v.Probe(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	res, err := v.Renditions(ctx, pr, t.TempDir(), RenditionsSpec{MP4: []int{1080, 720}})
	if err != nil {
		t.Fatalf("Renditions: %v", err)
	}
	if len(res.MP4) != 1 || res.MP4[0].Name != "720p" || res.MP4[0].Height != 720 || !res.MP4[0].Remuxed || res.HLS != nil {
		t.Fatalf("renditions %+v, want one remuxed 720p", res)
	}
	if ss := probeStreams(t, res.MP4[0].Path); ss[0].Height != 720 || ss[0].Codec != "h264" {
		t.Errorf("streams %+v", ss)
	}
}

// Keyframes 10 s apart cannot cut 4 s segments by copying: the rung as tall as the input is encoded
// (with keyframes of its own), and the result says why.
func TestRenditionsSparseKeyframesEncode(t *testing.T) {
	v := newLadderVideos(t)
	ctx := context.Background()
	src := phoneClip(t, 640, 360, 12, 10, 100)
	pr, err := v.Probe(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	res, err := v.Renditions(ctx, pr, t.TempDir(), RenditionsSpec{HLS: &LadderSpec{Rungs: []LadderRung{{360, 5000}}}})
	if err != nil {
		t.Fatalf("Renditions: %v", err)
	}
	if res.HLSCopied != "" || !strings.Contains(res.HLSCopyRefused, "too sparse") {
		t.Fatalf("copied %q, refused %q; want it encoded because the keyframes are too sparse", res.HLSCopied, res.HLSCopyRefused)
	}
	ds := hlsSegmentDurations(t, filepath.Join(res.HLS.Dir, res.HLS.Renditions[0].Playlist))
	if len(ds) != 3 || ds[0] < 3.9 || ds[0] > 4.1 {
		t.Errorf("segments %v, want three of 4 s", ds)
	}
	// Above the rung's bitrate cap: encoded too.
	res, err = v.Renditions(ctx, pr, t.TempDir(), RenditionsSpec{HLS: &LadderSpec{Rungs: []LadderRung{{360, 1}}}})
	if err != nil {
		t.Fatalf("Renditions: %v", err)
	}
	if res.HLSCopied != "" || !strings.Contains(res.HLSCopyRefused, "cap") {
		t.Errorf("copied %q, refused %q; want it encoded for its bitrate", res.HLSCopied, res.HLSCopyRefused)
	}
}

// The ladder's segments start every rendition and the audio at 0 in the segments' own timeline
// (tfdt + the first sample's composition offset), which MSE players such as hls.js go by, ignoring
// edit lists: hls.js reported a 0.18 s hole at the start when the video started at 0.08 s (B-frames'
// delay) behind an empty edit. No edit list is written (hls.js and the playlists' durations would
// disagree with one). (ffprobe is no judge here: its MP4 demuxer shifts negative composition offsets.)
func TestLadderStartsAtZero(t *testing.T) {
	v := newLadderVideos(t)
	ctx := context.Background()
	src := phoneClip(t, 1280, 720, 4, 25, 250)
	pr, err := v.Probe(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	res, err := v.Ladder(ctx, pr, t.TempDir(), LadderSpec{Rungs: []LadderRung{{720, 1}, {360, 800}}, SegmentSeconds: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"720p", "360p", "audio"} {
		init, err := os.ReadFile(filepath.Join(res.Dir, n+"_init.mp4"))
		if err != nil {
			t.Fatal(err)
		}
		seg, err := os.ReadFile(filepath.Join(res.Dir, n+"_000.m4s"))
		if err != nil {
			t.Fatal(err)
		}
		if e := boxPayloads(init, "elst"); len(e) > 0 {
			t.Errorf("%s's init segment has an edit list", n)
		}
		tfdt := boxPayloads(seg, "tfdt")
		trun := boxPayloads(seg, "trun")
		if len(tfdt) != 1 || len(trun) != 1 {
			t.Fatalf("%s_000.m4s: %d tfdt, %d trun boxes", n, len(tfdt), len(trun))
		}
		var base uint64
		if tfdt[0][0] == 1 {
			base = binary.BigEndian.Uint64(tfdt[0][4:])
		} else {
			base = uint64(binary.BigEndian.Uint32(tfdt[0][4:]))
		}
		start := int64(base)
		if tr := trun[0]; len(tr) >= 8 {
			flags := binary.BigEndian.Uint32(tr[0:4]) & 0xffffff
			off := 8
			if flags&0x1 != 0 {
				off += 4
			}
			if flags&0x4 != 0 {
				off += 4
			}
			for _, bit := range []uint32{0x100, 0x200, 0x400} {
				if flags&bit != 0 {
					off += 4
				}
			}
			if flags&0x800 != 0 {
				c := binary.BigEndian.Uint32(tr[off:])
				if tr[0] == 1 {
					start += int64(int32(c))
				} else {
					start += int64(c)
				}
			}
		}
		if start != 0 {
			t.Errorf("%s's first sample is shown at %d (timescale units), want 0", n, start)
		}
	}
}

// boxPayloads finds every ISO BMFF box of type typ (descending into the containers on the way) and
// returns their payloads.
func boxPayloads(b []byte, typ string) [][]byte {
	var out [][]byte
	for off := 0; off+8 <= len(b); {
		size := int(binary.BigEndian.Uint32(b[off:]))
		if size < 8 || off+size > len(b) {
			break
		}
		name, body := string(b[off+4:off+8]), b[off+8:off+size]
		switch {
		case name == typ:
			out = append(out, body)
		case strings.Contains("moov trak mdia minf stbl edts moof traf mvex", name):
			out = append(out, boxPayloads(body, typ)...)
		}
		off += size
	}
	return out
}

// The CPU a recipe's video work costs on a 1080p H.264 upload (the job's MP4 and poster, then mp4
// [1080, 720] and hls [1080, 720]), with the remux path and without it (VideoConfig.Remux off): the
// copied MP4 (which the 1080p rendition links) and HLS rung must cost far less than encoding them.
func TestRenditionsRemuxCPU(t *testing.T) {
	if testing.Short() {
		t.Skip("measures two full runs")
	}
	src := phoneClip(t, 1920, 1080, 10, 30, 60)
	spec := RenditionsSpec{MP4: []int{1080, 720}, HLS: &LadderSpec{Rungs: []LadderRung{{1080, 20000}, {720, 3000}}}}
	cpu := func(remux bool) (time.Duration, RenditionsResult) {
		cfg := DefaultVideoConfig()
		cfg.Remux = remux
		v, err := NewVideos(cfg)
		if err != nil {
			t.Fatal(err)
		}
		pr, err := v.Probe(context.Background(), src)
		if err != nil {
			t.Fatal(err)
		}
		// The job's video work: its MP4 and poster, then the recipe's renditions.
		out := t.TempDir()
		before := ladderChildCPU()
		if _, err := v.TransformProbed(context.Background(), pr, out); err != nil {
			t.Fatal(err)
		}
		spec.ReuseMP4 = true
		res, err := v.Renditions(context.Background(), pr, out, spec)
		if err != nil {
			t.Fatal(err)
		}
		return ladderChildCPU() - before, res
	}
	with, rw := cpu(true)
	without, ro := cpu(false)
	t.Logf("a job's MP4 + poster + mp4 [1080, 720] + hls [1080, 720] of a 10 s 1080p30 H.264 clip: %s CPU with the remux path (hls rung copied: %q), %s without",
		with.Round(time.Millisecond), rw.HLSCopied, without.Round(time.Millisecond))
	// The 1080p rendition is the job's MP4 either way (remuxed with the path, encoded without).
	if !rw.MP4[0].Reused || rw.HLSCopied == "" || !ro.MP4[0].Reused || ro.HLSCopied != "" {
		t.Fatalf("with remux: %+v %q; without: %+v %q", rw.MP4[0], rw.HLSCopied, ro.MP4[0], ro.HLSCopied)
	}
	if float64(with) > 0.6*float64(without) {
		t.Errorf("with the remux path the run took %s of CPU, without %s: want far less", with, without)
	}
}

func TestPlanMP4(t *testing.T) {
	for _, c := range []struct {
		w, h    int
		heights []int
		want    string
	}{
		{1920, 1080, []int{720, 1080}, "[1080p 1920x1080 720p 1280x720]"},
		{1280, 720, []int{1080, 720}, "[720p 1280x720]"},
		{1000, 1001, []int{1080, 720, 480}, "[1000p 1000x1002 720p 720x720 480p 480x480]"},
		{720, 1280, []int{480}, "[480p 480x854]"},
		{321, 241, []int{1080}, "[240p 320x240]"},
	} {
		ps, err := planMP4(c.w, c.h, c.heights)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, p := range ps {
			got = append(got, fmt.Sprintf("%s %dx%d", p.name, p.width, p.height))
		}
		if s := "[" + strings.Join(got, " ") + "]"; s != c.want {
			t.Errorf("%dx%d %v: %s, want %s", c.w, c.h, c.heights, s, c.want)
		}
	}
}

func TestValidateMP4Heights(t *testing.T) {
	for hs, want := range map[string]string{
		"":              "at least one",
		"0":             "mp4[0] must be an even height",
		"721":           "mp4[0] must be an even height",
		"1080 720 1080": "mp4[2] 1080 repeats mp4[0]",
		"1 2 3 4 5":     "at most 4",
		"1080 720":      "",
	} {
		var list []int
		for _, f := range strings.Fields(hs) {
			n, _ := strconv.Atoi(f)
			list = append(list, n)
		}
		err := ValidateMP4Heights(list)
		if (err == nil) != (want == "") || (err != nil && !strings.Contains(err.Error(), want)) {
			t.Errorf("%q: %v, want %q", hs, err, want)
		}
	}
}

// The job's MP4 stands for a rendition of its size (ReuseMP4): an upload that must be encoded
// (MJPEG) is encoded once at 360p for the MP4 and its 360p rendition, which is the same file, linked;
// the 240p one is encoded.
func TestRenditionsReuseTheJobsMP4(t *testing.T) {
	v := newLadderVideos(t)
	ctx := context.Background()
	src := testenv.MakeVideo(t, t.TempDir(), "cam.mov", testenv.VideoOpts{Width: 640, Height: 360, Seconds: 3, FPS: 25, VCodec: "mjpeg", ACodec: "aac"})
	pr, err := v.Probe(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	job, err := v.TransformProbed(ctx, pr, out)
	if err != nil {
		t.Fatal(err)
	}
	res, err := v.Renditions(ctx, pr, out, RenditionsSpec{MP4: []int{1080, 240}, ReuseMP4: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.MP4) != 2 || !res.MP4[0].Reused || res.MP4[0].Height != 360 || res.MP4[1].Reused || res.MP4[1].Height != 240 {
		t.Fatalf("renditions %+v, want 360p reused and 240p encoded", res.MP4)
	}
	a, _ := os.Stat(job.MP4Path)
	b, _ := os.Stat(res.MP4[0].Path)
	if !os.SameFile(a, b) {
		t.Errorf("the 360p rendition is not the job's MP4")
	}
	if ss := probeStreams(t, res.MP4[1].Path); ss[0].Codec != "h264" || ss[0].Height != 240 {
		t.Errorf("240p: %+v", ss)
	}
}
