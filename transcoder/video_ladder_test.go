package transcoder

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/progress"
)

// The ladder's tests run the real ffmpeg on short clips made at low cost (ultrafast, 10 fps): 12 s,
// so three 4 s segments per rendition.

var defaultLadder = LadderSpec{Rungs: []LadderRung{{1080, 6000}, {720, 3000}, {480, 1200}}}

const ladderClipSeconds = 12

// ladderClip makes one of the ladder's test clips in a directory of the test's: "1080p" (1920×1080
// with AAC), "720p-portrait" (1280×720 stored, shown upright as 720×1280, with AAC, as phones record)
// or "360p-silent" (640×360, no audio).
func ladderClip(t testing.TB, name string) string {
	t.Helper()
	o, ok := map[string]testenv.VideoOpts{
		"1080p":         {Width: 1920, Height: 1080, ACodec: "aac"},
		"720p-portrait": {Width: 1280, Height: 720, ACodec: "aac", Rotate90: true},
		"360p-silent":   {Width: 640, Height: 360},
	}[name]
	if !ok {
		t.Fatalf("no ladder clip %q", name)
	}
	o.Seconds, o.FPS = ladderClipSeconds, 10
	return testenv.MakeVideo(t, t.TempDir(), name+".mov", o)
}

func newLadderVideos(t testing.TB) *Videos {
	t.Helper()
	testenv.RequireBinary(t, "ffmpeg")
	testenv.RequireBinary(t, "ffprobe")
	v, err := NewVideos(DefaultVideoConfig())
	if err != nil {
		t.Fatalf("NewVideos: %v", err)
	}
	return v
}

func makeLadder(t testing.TB, v *Videos, clip string, spec LadderSpec) (LadderResult, string) {
	t.Helper()
	ctx := context.Background()
	pr, err := v.Probe(ctx, ladderClip(t, clip))
	if err != nil {
		t.Fatalf("Probe: %v", err)
	}
	out := t.TempDir()
	// Progress flows across the whole run, as the MP4 encode's does: several reports, never backwards,
	// ending at 1.
	var mu sync.Mutex
	var got []float64
	pctx := progress.With(ctx, func(f float64) {
		mu.Lock()
		got = append(got, f)
		mu.Unlock()
	})
	start := time.Now()
	res, err := v.Ladder(pctx, pr, out, spec)
	if err != nil {
		t.Fatalf("Ladder: %v", err)
	}
	t.Logf("%s: ladder in %s", clip, time.Since(start).Round(time.Millisecond))
	mu.Lock()
	defer mu.Unlock()
	if len(got) < 2 || got[len(got)-1] != 1 || !slices.IsSorted(got) {
		t.Errorf("progress reports %v: want several, rising to 1", got)
	}
	return res, out
}

type ladderStream struct {
	CodecType string `json:"codec_type"`
	CodecName string `json:"codec_name"`
	Width     int    `json:"width"`
	Height    int    `json:"height"`
	Transfer  string `json:"color_transfer"`
}

// ladderStreams is ffprobe's list of the streams of a playlist on disk.
func ladderStreams(t *testing.T, path string) []ladderStream {
	t.Helper()
	out, err := exec.Command("ffprobe", "-v", "error", "-of", "json", "-show_streams", path).Output()
	if err != nil {
		t.Fatalf("ffprobe %s: %v", filepath.Base(path), err)
	}
	var raw struct{ Streams []ladderStream }
	if err := json.Unmarshal(out, &raw); err != nil {
		t.Fatalf("ffprobe %s: %v", filepath.Base(path), err)
	}
	return raw.Streams
}

// ladderDecodedSeconds decodes every frame a playlist names and returns how far the decoding got.
func ladderDecodedSeconds(t *testing.T, path string) float64 {
	t.Helper()
	out, err := exec.Command("ffmpeg", "-nostdin", "-v", "error", "-i", path, "-f", "null", "-progress", "pipe:1", "-").Output()
	if err != nil {
		t.Fatalf("decoding %s: %v", filepath.Base(path), err)
	}
	last := -1.0
	for l := range strings.Lines(string(out)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "out_time_us="); ok {
			if us, err := strconv.ParseInt(v, 10, 64); err == nil {
				last = float64(us) / 1e6
			}
		}
	}
	return last
}

// checkLadderFiles checks what every ladder must be: the result's files are exactly the directory's,
// in publishing order; playlists are VOD, CMAF (init segment + .m4s), with relative names and target
// durations of at most 6 s; each video rendition is H.264 of the planned size without audio and
// decodes for the clip's whole length; the audio, if any, is in one playlist, listed once.
func checkLadderFiles(t *testing.T, res LadderResult, out string, wantSizes [][2]int, wantAudio bool) {
	t.Helper()
	if res.Dir != filepath.Join(out, "hls") || res.Master != "master.m3u8" {
		t.Errorf("Dir %q, Master %q", res.Dir, res.Master)
	}
	entries, err := os.ReadDir(res.Dir)
	if err != nil {
		t.Fatal(err)
	}
	var onDisk []string
	for _, e := range entries {
		onDisk = append(onDisk, e.Name())
	}
	listed := slices.Sorted(slices.Values(res.Files))
	if !slices.Equal(listed, onDisk) {
		t.Errorf("result lists %v, directory holds %v", listed, onDisk)
	}
	if n := len(res.Files); n == 0 || res.Files[n-1] != "master.m3u8" {
		t.Errorf("files %v: want the master last", res.Files)
	}
	firstPlaylist := slices.IndexFunc(res.Files, func(f string) bool { return strings.HasSuffix(f, ".m3u8") })
	for _, f := range res.Files[firstPlaylist:] {
		if !strings.HasSuffix(f, ".m3u8") {
			t.Errorf("files %v: %s after a playlist", res.Files, f)
		}
	}

	if len(res.Renditions) != len(wantSizes) {
		t.Fatalf("renditions %+v, want sizes %v", res.Renditions, wantSizes)
	}
	master, err := os.ReadFile(filepath.Join(res.Dir, res.Master))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("master.m3u8:\n%s", master)
	for i, r := range res.Renditions {
		if r.Width != wantSizes[i][0] || r.Height != wantSizes[i][1] {
			t.Errorf("rendition %d is %dx%d, want %dx%d", i, r.Width, r.Height, wantSizes[i][0], wantSizes[i][1])
		}
		if r.BandwidthBps <= 0 || !strings.Contains(string(master), "BANDWIDTH="+strconv.Itoa(r.BandwidthBps)+",") {
			t.Errorf("rendition %d: bandwidth %d not in the master", i, r.BandwidthBps)
		}
	}
	if got := strings.Count(string(master), "#EXT-X-STREAM-INF:"); got != len(wantSizes) {
		t.Errorf("master lists %d variants, want %d (no audio-only variant)", got, len(wantSizes))
	}
	if got := strings.Count(string(master), "TYPE=AUDIO"); got != ladderCount(wantAudio) {
		t.Errorf("master lists %d audio renditions, want %d", got, ladderCount(wantAudio))
	}
	if (res.AudioPlaylist != "") != wantAudio {
		t.Errorf("audio playlist %q, want audio: %v", res.AudioPlaylist, wantAudio)
	}

	// The master as a player reads it, from disk: every rendition's video, the audio once.
	var heights []int
	audios := 0
	for _, s := range ladderStreams(t, filepath.Join(res.Dir, res.Master)) {
		switch s.CodecType {
		case "video":
			heights = append(heights, s.Height)
		case "audio":
			audios++
		}
	}
	wantHeights := []int{}
	for _, s := range wantSizes {
		wantHeights = append(wantHeights, s[1])
	}
	slices.Sort(heights)
	slices.Sort(wantHeights)
	if !slices.Equal(heights, wantHeights) || audios != ladderCount(wantAudio) {
		t.Errorf("ffprobe of the master: video heights %v, %d audio streams; want %v and %d", heights, audios, wantHeights, ladderCount(wantAudio))
	}

	playlists := []string{}
	for _, r := range res.Renditions {
		playlists = append(playlists, r.Playlist)
	}
	if wantAudio {
		playlists = append(playlists, res.AudioPlaylist)
	}
	var firstDurations []string
	for i, pl := range playlists {
		path := filepath.Join(res.Dir, pl)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		for _, want := range []string{"#EXT-X-PLAYLIST-TYPE:VOD", "#EXT-X-ENDLIST", "#EXT-X-MAP:URI=\""} {
			if !strings.Contains(text, want) {
				t.Errorf("%s lacks %s", pl, want)
			}
		}
		segments := 0
		var durations []string
		for l := range strings.Lines(text) {
			l = strings.TrimSpace(l)
			if d, ok := strings.CutPrefix(l, "#EXTINF:"); ok {
				durations = append(durations, d)
			}
			if td, ok := strings.CutPrefix(l, "#EXT-X-TARGETDURATION:"); ok {
				if n, err := strconv.Atoi(td); err != nil || n > 6 {
					t.Errorf("%s: target duration %s, want at most 6", pl, td)
				}
			}
			if l == "" || strings.HasPrefix(l, "#") {
				continue
			}
			segments++
			if !strings.HasSuffix(l, ".m4s") || strings.ContainsAny(l, "/:") {
				t.Errorf("%s names %q: want a relative .m4s", pl, l)
			}
		}
		if segments < 3 {
			t.Errorf("%s has %d segments, want at least 3 for %d s", pl, segments, ladderClipSeconds)
		}
		audio := i == len(res.Renditions)
		// Keyframes at the same times in every video rendition: the same segments, so a player can
		// switch at any boundary.
		if !audio {
			if i == 0 {
				firstDurations = durations
			} else if !slices.Equal(durations, firstDurations) {
				t.Errorf("%s's segments last %v, %s's %v: want them aligned", pl, durations, playlists[0], firstDurations)
			}
		}
		streams := ladderStreams(t, path)
		switch {
		case audio && (len(streams) != 1 || streams[0].CodecName != "aac"):
			t.Errorf("%s: streams %+v, want one AAC", pl, streams)
		case !audio && (len(streams) != 1 || streams[0].CodecName != "h264" || streams[0].Height != wantSizes[i][1] || streams[0].Width != wantSizes[i][0]):
			t.Errorf("%s: streams %+v, want one H.264 %dx%d", pl, streams, wantSizes[i][0], wantSizes[i][1])
		}
		if d := ladderDecodedSeconds(t, path); math.Abs(d-ladderClipSeconds) > 0.5 {
			t.Errorf("%s decodes for %.2f s, want %d", pl, d, ladderClipSeconds)
		}
	}
	if math.Abs(res.Duration-ladderClipSeconds) > 0.5 {
		t.Errorf("result says %.2f s, want %d", res.Duration, ladderClipSeconds)
	}
}

func ladderCount(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestLadder1080p(t *testing.T) {
	v := newLadderVideos(t)
	res, out := makeLadder(t, v, "1080p", defaultLadder)
	checkLadderFiles(t, res, out, [][2]int{{1920, 1080}, {1280, 720}, {854, 480}}, true)
	if res.AudioPlaylist != "audio.m3u8" {
		t.Errorf("audio playlist %q", res.AudioPlaylist)
	}
	// Bitrate caps: each rendition's BANDWIDTH is its cap plus the audio, plus ffmpeg's 10%.
	for i, r := range res.Renditions {
		want := (defaultLadder.Rungs[i].MaxKbps*1000 + 128000) * 11 / 10
		if r.BandwidthBps != want {
			t.Errorf("%s: bandwidth %d, want %d", r.Playlist, r.BandwidthBps, want)
		}
	}
}

// A 720p phone video shot upright: its short edge is 720, so no 1080 rendition, and the renditions
// are portrait.
func TestLadder720pPortrait(t *testing.T) {
	v := newLadderVideos(t)
	res, out := makeLadder(t, v, "720p-portrait", defaultLadder)
	checkLadderFiles(t, res, out, [][2]int{{720, 1280}, {480, 854}}, true)
}

// No audio: no audio group. Every rung taller than the source: one rendition at its own size.
func TestLadderSilentBelowEveryRung(t *testing.T) {
	v := newLadderVideos(t)
	res, out := makeLadder(t, v, "360p-silent", defaultLadder)
	checkLadderFiles(t, res, out, [][2]int{{640, 360}}, false)
	if res.Renditions[0].Playlist != "360p.m3u8" {
		t.Errorf("playlist %q", res.Renditions[0].Playlist)
	}
	master, _ := os.ReadFile(filepath.Join(res.Dir, res.Master))
	if strings.Contains(string(master), "AUDIO=") {
		t.Errorf("master refers to an audio group:\n%s", master)
	}
}

// An upright phone clip in HLG: the MP4 encode's tone mapping runs once, before the split, and every
// rendition comes out SDR BT.709. (Interlaced sources are deinterlaced first, as the MP4's are: the
// graph is checked without a clip, testenv making no interlaced HDR ones.)
func TestLadderHDRPortrait(t *testing.T) {
	v := newLadderVideos(t)
	src := testenv.MakeDeviceClip(t, t.TempDir(), testenv.DeviceClip{Name: "hlg_i.mov", Format: "mov",
		Width: 640, Height: 360, Seconds: ladderClipSeconds, VCodec: "libx264", ACodec: "aac",
		Transfer: testenv.TransferHLG, EightBit: true, Rotate90: true})
	pr, err := v.Probe(context.Background(), src)
	if err != nil {
		t.Fatal(err)
	}
	if pr.Info.HDR != "hlg" || !pr.p.rotated {
		t.Fatalf("the clip is not what the test needs: %+v, rotated %v", pr.Info, pr.p.rotated)
	}
	interlaced := pr.p
	interlaced.interlaced = true
	if g := ladderGraph(interlaced, []ladderRendition{{width: 360, height: 640}, {width: 240, height: 426}}); !strings.HasPrefix(g, "[0:0]bwdif=") ||
		!strings.Contains(g, "tonemap") || strings.Index(g, "tonemap") > strings.Index(g, "split") {
		t.Errorf("graph %s: want deinterlacing first and tone mapping before the split", g)
	}
	res, err := v.Ladder(context.Background(), pr, t.TempDir(), LadderSpec{Rungs: []LadderRung{{360, 1000}, {240, 500}}})
	if err != nil {
		t.Fatal(err)
	}
	checkLadderFiles(t, res, filepath.Dir(res.Dir), [][2]int{{360, 640}, {240, 426}}, true)
	for _, r := range res.Renditions {
		if s := ladderStreams(t, filepath.Join(res.Dir, r.Playlist)); len(s) != 1 || s[0].Transfer != "bt709" {
			t.Errorf("%s: %+v, want BT.709", r.Playlist, s)
		}
	}
}

// The ladder runs under the encode's confinement: a budget too small for it gets the input refused,
// naming the limit and how the ladder's budget follows from the video.
func TestLadderCPUBudget(t *testing.T) {
	testenv.RequireBinary(t, "ffmpeg")
	cfg := DefaultVideoConfig()
	cfg.CPUPerInputSecond = 10 * time.Millisecond // × 1.44 (720p + 480p over 720p) × (12 s + 10 s): 1 s, RLIMIT_CPU's least
	v, err := NewVideos(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pr, err := v.Probe(context.Background(), ladderClip(t, "720p-portrait"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = v.Ladder(context.Background(), pr, t.TempDir(), defaultLadder)
	want := "making hls ladder: the video needs more CPU time than the limit of 1s for a 12.0 s video: 14ms per second of video, counting 10s more (1.44 times the MP4's rate, for 2 renditions)"
	if !IsBadInput(err) || err.Error() != want {
		t.Errorf("got %v (bad input: %v), want %q", err, IsBadInput(err), want)
	}
}

func TestLadderSpecValidate(t *testing.T) {
	if err := defaultLadder.Validate(); err != nil {
		t.Errorf("default ladder: %v", err)
	}
	if err := (LadderSpec{Rungs: []LadderRung{{480, 1}}, SegmentSeconds: 6}).Validate(); err != nil {
		t.Errorf("one rung, 6 s: %v", err)
	}
	for want, spec := range map[string]LadderSpec{
		"rungs: at least one":                   {},
		"rungs: at most 8":                      {Rungs: slices.Repeat([]LadderRung{{480, 1000}}, 9)},
		"rungs[1].height must be even":          {Rungs: []LadderRung{{1080, 6000}, {721, 3000}}},
		"rungs[0].height must be even and 2-":   {Rungs: []LadderRung{{0, 6000}}},
		"rungs[0].height must be even and 2-4":  {Rungs: []LadderRung{{8640, 6000}}},
		"rungs[1].max_kbps must be 1-":          {Rungs: []LadderRung{{1080, 6000}, {720, -1}}},
		"rungs[2].height 1080 repeats rungs[0]": {Rungs: []LadderRung{{1080, 6000}, {720, 3000}, {1080, 5000}}},
		"segment_seconds must be 2-10":          {Rungs: []LadderRung{{720, 3000}}, SegmentSeconds: 1},
		"segment_seconds must be":               {Rungs: []LadderRung{{720, 3000}}, SegmentSeconds: math.NaN()},
	} {
		err := spec.Validate()
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%+v: got %v, want %q...", spec, err, want)
		}
	}
	// Ladder refuses an invalid spec as our fault, not the input's.
	// (It is checked first: the probe is not looked at.)
	v := newLadderVideos(t)
	_, err := v.Ladder(context.Background(), &VideoProbe{}, t.TempDir(), LadderSpec{})
	if err == nil || IsBadInput(err) || !strings.Contains(err.Error(), "rungs") {
		t.Errorf("Ladder with no rungs: %v", err)
	}
}

func TestLadderPlan(t *testing.T) {
	rungs := defaultLadder.Rungs
	for _, c := range []struct {
		w, h int
		want [][2]int
	}{
		{3840, 2160, [][2]int{{1920, 1080}, {1280, 720}, {854, 480}}},
		{1080, 1920, [][2]int{{1080, 1920}, {720, 1280}, {480, 854}}},
		{1440, 1080, [][2]int{{1440, 1080}, {960, 720}, {640, 480}}}, // 4:3
		{1920, 1078, [][2]int{{1282, 720}, {854, 480}}},              // just short of 1080: not enlarged
		{320, 241, [][2]int{{318, 240}}},                             // below every rung: its own short edge, even
		{1, 1, [][2]int{{2, 2}}},
	} {
		rs, err := planLadder(c.w, c.h, rungs)
		var got [][2]int
		for _, r := range rs {
			got = append(got, [2]int{r.width, r.height})
		}
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("%dx%d: %v (%v), want %v", c.w, c.h, got, err, c.want)
		}
	}
	// A rung without max_kbps gets a default by its height, not an error.
	if err := (LadderSpec{Rungs: []LadderRung{{1080, 0}, {720, 0}, {480, 2500}}}).Validate(); err != nil {
		t.Errorf("rungs without max_kbps: %v", err)
	}
	rs, err := planLadder(1920, 1080, []LadderRung{{1080, 0}, {720, 0}, {480, 2500}})
	var kbps []int
	for _, r := range rs {
		kbps = append(kbps, r.maxKbps)
	}
	if err != nil || !slices.Equal(kbps, []int{6000, 3000, 2500}) {
		t.Errorf("caps of rungs 1080 and 720 without max_kbps, and 480 with 2500: %v (%v), want [6000 3000 2500]", kbps, err)
	}
	// A strip no rendition of which libx264 can encode is the input's fault.
	if _, err := planLadder(20000, 400, rungs); !IsBadInput(err) {
		t.Errorf("20000x400: %v, want bad input", err)
	}
}

// BenchmarkLadderVsFFmpeg compares the CPU time (getrusage of children: ffmpeg's user + system) of
// Ladder with that of the same command line run bare, without prlimit, progress parsing or the
// playlists' checks, interleaved so that the busy machine's load weighs on both alike. Ladder's own
// Go-side work (progress, CPU watching, reading the playlists) is reported apart, as go-cpu-ms/op.
//
//	go test ./transcoder/ -run '^$' -bench LadderVsFFmpeg -benchtime 3x
func BenchmarkLadderVsFFmpeg(b *testing.B) {
	v := newLadderVideos(b)
	ctx := context.Background()
	pr, err := v.Probe(ctx, ladderClip(b, "1080p"))
	if err != nil {
		b.Fatal(err)
	}
	rs, err := planLadder(pr.Info.Width, pr.Info.Height, defaultLadder.Rungs)
	if err != nil {
		b.Fatal(err)
	}
	args := ladderArgs(&v.cfg, pr.path, pr.p, rs, defaultLadder.segmentSeconds())
	b.Logf("ffmpeg %s", strings.Join(args, " "))

	var bare, ours, goSide time.Duration
	for i := 0; b.Loop(); i++ {
		runBare := func() {
			dir := filepath.Join(b.TempDir(), "hls")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				b.Fatal(err)
			}
			cmd := exec.Command(v.tools.ffmpeg, args...)
			cmd.Dir = dir
			before := ladderChildCPU()
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("bare ffmpeg: %v: %s", err, out)
			}
			bare += ladderChildCPU() - before
		}
		runOurs := func() {
			before, selfBefore := ladderChildCPU(), ladderSelfCPU()
			if _, err := v.Ladder(ctx, pr, b.TempDir(), defaultLadder); err != nil {
				b.Fatal(err)
			}
			ours += ladderChildCPU() - before
			goSide += ladderSelfCPU() - selfBefore
		}
		if i%2 == 0 {
			runBare()
			runOurs()
		} else {
			runOurs()
			runBare()
		}
	}
	n := float64(b.N)
	b.ReportMetric(float64(ours.Milliseconds())/n, "ladder-cpu-ms/op")
	b.ReportMetric(float64(bare.Milliseconds())/n, "bare-cpu-ms/op")
	b.ReportMetric(float64(goSide.Milliseconds())/n, "go-cpu-ms/op")
	b.ReportMetric(float64(ours)/float64(bare), "cpu-ratio")
	b.Logf("%d runs each: Ladder %.2f CPU-s, bare ffmpeg %.2f CPU-s per run: ratio %.3f (with Go's own %.3f)",
		b.N, ours.Seconds()/n, bare.Seconds()/n, float64(ours)/float64(bare), float64(ours+goSide)/float64(bare))
}

func ladderChildCPU() time.Duration { return ladderRusage(syscall.RUSAGE_CHILDREN) }
func ladderSelfCPU() time.Duration  { return ladderRusage(syscall.RUSAGE_SELF) }

func ladderRusage(who int) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(who, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
