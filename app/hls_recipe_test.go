package app_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image/jpeg"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/app"
	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/pipeline"
	"github.com/mediaworker/mediaworker/transcoder"
)

// Issue 21's judged case: a 20 s 1080p clip with a recipe asking for HLS [1080, 720, 480] and a
// storyboard every 2 s. ffprobe reads the master playlist over the worker's HTTP through the signed URL
// the answer carries, and every rendition decodes for the full duration; a 720p input gets no 1080p
// rendition; the VTT's cues cover the whole duration and each points inside the sprite; a segment
// without the signature is refused.
func TestHLSRecipeOverHTTP(t *testing.T) {
	const secret = "0123456789abcdef0123456789abcdef-hls"
	clamd := testenv.StartClamd(t)
	w := startWorld(t, app.StorageNATS, clamd, func(c *app.Config) {
		c.URLSigning.Key, c.URLSigning.TTL = secret, time.Hour
		c.Pipeline.Recipes = map[string]pipeline.Recipe{"player": {Name: "player", Video: pipeline.VideoRecipe{
			HLS: &transcoder.LadderSpec{Rungs: []transcoder.LadderRung{
				{Height: 1080, MaxKbps: 5000}, {Height: 720, MaxKbps: 2500}, {Height: 480, MaxKbps: 1000}}},
			Storyboard: &transcoder.StoryboardSpec{EverySeconds: 2},
		}}}
	})
	dir := t.TempDir()
	ask := func(path, key string) contracts.Response {
		t.Helper()
		return w.askRecipe(path, key, "player", 8*time.Minute)
	}
	find := func(r contracts.Response, quality, format string) contracts.Variant {
		t.Helper()
		for _, v := range r.Processed {
			if v.Quality == quality && v.Format == format {
				return v
			}
		}
		t.Fatalf("no %s/%s in %+v", quality, format, r.Processed)
		return contracts.Variant{}
	}

	r := ask(testenv.MakeVideo(t, dir, "big.mp4", testenv.VideoOpts{Width: 1920, Height: 1080, Seconds: 20, FPS: 25, ACodec: "aac", Container: "mp4", FastStart: true}), "v/big.mp4")
	master := find(r, "hls", contracts.FormatM3U8).URL
	if !strings.Contains(master, "/~sig-") {
		t.Fatalf("the master playlist's URL is not signed by directory: %s", master)
	}
	// ffprobe over HTTP: the three renditions and the audio, through the signed URL.
	heights := probeHeights(t, master)
	if fmt.Sprint(heights) != "[1080 720 480]" {
		t.Errorf("ffprobe reads renditions of heights %v, want [1080 720 480]", heights)
	}
	body := string(fetchOK(t, master, contracts.TypeM3U8))
	renditions := regexp.MustCompile(`(?m)^([a-z0-9_]+\.m3u8)$`).FindAllStringSubmatch(body, -1)
	if len(renditions) != 3 {
		t.Fatalf("master playlist names %d video playlists:\n%s", len(renditions), body)
	}
	for _, m := range renditions {
		u := master[:strings.LastIndex(master, "/")+1] + m[1] // as a player resolves it
		if d := decodedSeconds(t, u); d < 19.5 || d > 20.5 {
			t.Errorf("%s decodes for %.2f s, want 20", m[1], d)
		}
	}
	// Unsigned: refused.
	unsigned := regexp.MustCompile(`/~sig-[^/]+/`).ReplaceAllString(master, "/")
	if resp, err := http.Get(unsigned); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("the playlist without its signature: %v %v, want 403", resp, err)
	}

	// The storyboard: cues from 0 to 20 s, each inside the sprite.
	sprite := fetchOK(t, find(r, "storyboard", contracts.FormatJPG).URL, contracts.TypeJPEG)
	cfg, err := jpeg.DecodeConfig(bytes.NewReader(sprite))
	if err != nil {
		t.Fatal(err)
	}
	vtt := string(fetchOK(t, find(r, "storyboard", "vtt").URL, contracts.TypeVTT))
	cue := regexp.MustCompile(`(\d\d):(\d\d):(\d\d\.\d\d\d) --> (\d\d):(\d\d):(\d\d\.\d\d\d)\s+storyboard\.jpg#xywh=(\d+),(\d+),(\d+),(\d+)`)
	cues := cue.FindAllStringSubmatch(vtt, -1)
	if !strings.HasPrefix(vtt, "WEBVTT") || len(cues) != 10 {
		t.Fatalf("storyboard VTT has %d cues:\n%s", len(cues), vtt)
	}
	end := 0.0
	for i, c := range cues {
		from, to := vttSeconds(c[1], c[2], c[3]), vttSeconds(c[4], c[5], c[6])
		if from != end || to <= from {
			t.Errorf("cue %d is %.3f–%.3f, want it to start at %.3f", i, from, to, end)
		}
		end = to
		x, y, cw, ch := atoi(c[7]), atoi(c[8]), atoi(c[9]), atoi(c[10])
		if x+cw > cfg.Width || y+ch > cfg.Height || cw <= 0 || ch <= 0 {
			t.Errorf("cue %d points at %d,%d %d×%d outside the %d×%d sprite", i, x, y, cw, ch, cfg.Width, cfg.Height)
		}
	}
	if end < 19.9 || end > 20.1 {
		t.Errorf("the cues end at %.3f s, want the video's 20 s", end)
	}

	// A 720p input: no 1080p rendition, and none is upscaled.
	small := ask(testenv.MakeVideo(t, dir, "small.mp4", testenv.VideoOpts{Width: 1280, Height: 720, Seconds: 6, FPS: 25, ACodec: "aac", Container: "mp4", FastStart: true}), "v/small.mp4")
	if h := probeHeights(t, find(small, "hls", contracts.FormatM3U8).URL); fmt.Sprint(h) != "[720 480]" {
		t.Errorf("a 720p input's ladder has heights %v, want [720 480]", h)
	}
}

// fetchOK GETs url and checks the worker serves it as ctype.
func fetchOK(t *testing.T, url, ctype string) []byte {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != ctype {
		t.Fatalf("GET %s: %s %q (%v)", url, resp.Status, resp.Header.Get("Content-Type"), err)
	}
	return b
}

// probeHeights is the video heights ffprobe finds behind an HLS URL, tallest first.
func probeHeights(t *testing.T, url string) []int {
	t.Helper()
	out, err := exec.Command("ffprobe", "-v", "error", "-show_entries", "stream=codec_type,height", "-of", "json", url).Output()
	if err != nil {
		t.Fatalf("ffprobe %s: %v", url, err)
	}
	var doc struct {
		Streams []struct {
			CodecType string `json:"codec_type"`
			Height    int    `json:"height"`
		} `json:"streams"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	var hs []int
	audio := 0
	for _, s := range doc.Streams {
		switch s.CodecType {
		case "video":
			hs = append(hs, s.Height)
		case "audio":
			audio++
		}
	}
	if audio == 0 {
		t.Errorf("ffprobe finds no audio behind %s", url)
	}
	return hs
}

// decodedSeconds decodes an HLS rendition over HTTP with ffmpeg and returns how long it played.
func decodedSeconds(t *testing.T, url string) float64 {
	t.Helper()
	out, err := exec.Command("ffmpeg", "-nostdin", "-v", "error", "-i", url, "-map", "0:v:0", "-f", "null", "-progress", "pipe:1", "-").Output()
	if err != nil {
		t.Fatalf("ffmpeg cannot decode %s: %v", url, err)
	}
	m := regexp.MustCompile(`out_time_us=(\d+)`).FindAllStringSubmatch(string(out), -1)
	if len(m) == 0 {
		t.Fatalf("ffmpeg said nothing of its progress on %s", url)
	}
	us, _ := strconv.ParseFloat(m[len(m)-1][1], 64)
	return us / 1e6
}

func vttSeconds(h, m, s string) float64 {
	sec, _ := strconv.ParseFloat(s, 64)
	return float64(atoi(h))*3600 + float64(atoi(m))*60 + sec
}

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }
