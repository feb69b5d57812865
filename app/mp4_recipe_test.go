package app_test

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/app"
	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/pipeline"
	"github.com/mediaworker/mediaworker/transcoder"
)

// A recipe with mp4 [1080, 720] and an HLS ladder, on a real worker (every answer is checked against
// the response schema as it arrives): a 1080p H.264/AAC upload gets a 1080p MP4 that is its own
// video packets (remuxed, not encoded) and an encoded 720p one, each read over HTTP by ffprobe as
// H.264 + AAC of its height for the upload's duration, beside the default's MP4 and poster and the
// ladder; a 720p upload gets one 720p MP4, not a 1080p one and not two.
func TestMP4RenditionsRecipe(t *testing.T) {
	clamd := testenv.StartClamd(t)
	w := startWorld(t, app.StorageNATS, clamd, func(c *app.Config) {
		c.Pipeline.Recipes = map[string]pipeline.Recipe{"clips": {Name: "clips", Video: pipeline.VideoRecipe{
			MP4: []int{1080, 720},
			HLS: &transcoder.LadderSpec{Rungs: []transcoder.LadderRung{{Height: 720, MaxKbps: 2500}, {Height: 360, MaxKbps: 800}}},
		}}}
	})
	dir := t.TempDir()
	ask := func(path, key string) contracts.Response {
		t.Helper()
		return w.askRecipe(path, key, "clips", 5*time.Minute)
	}
	mp4s := func(r contracts.Response) map[string]contracts.Variant {
		out := map[string]contracts.Variant{}
		for _, v := range r.Processed {
			if v.Format == contracts.FormatMP4 {
				out[v.Quality] = v
			}
		}
		return out
	}

	src := testenv.MakeVideo(t, dir, "big.mp4", testenv.VideoOpts{Width: 1920, Height: 1080, Seconds: 6, FPS: 25, ACodec: "aac", Container: "mp4", FastStart: true})
	r := ask(src, "m/big.mp4")
	got := mp4s(r)
	if len(got) != 3 || got[contracts.QualityOriginal].URL == "" || got["1080p"].URL == "" || got["720p"].URL == "" {
		t.Fatalf("mp4 variants %+v, want original (the default's), 1080p and 720p", got)
	}
	if variant(t, r, "hls").Format != contracts.FormatM3U8 || variant(t, r, contracts.QualityThumbnail).Format != contracts.FormatJPG {
		t.Errorf("the ladder or the poster is missing: %+v", r.Processed)
	}
	for name, h := range map[string]int{"1080p": 1080, "720p": 720} {
		v := got[name]
		if v.Height != h || v.Width != h*16/9 || v.Size <= 0 || !strings.Contains(v.URL, "_"+name+".mp4") {
			t.Errorf("%s variant %+v", name, v)
		}
		codec, height, audio, dur := probeMP4(t, v.URL)
		if codec != "h264" || height != h || audio != "aac" || dur < 5.8 || dur > 6.2 {
			t.Errorf("%s over HTTP: %s %dp audio %q %.2f s, want h264 %dp aac 6 s", name, codec, height, audio, dur, h)
		}
	}
	// The 1080p rendition is the upload's own video, copied.
	if a, b := packetsHash(t, src), packetsHash(t, got["1080p"].URL); a != b {
		t.Errorf("the 1080p rendition's video packets are not the upload's:\n%s\n%s", a, b)
	}
	if a, b := packetsHash(t, src), packetsHash(t, got["720p"].URL); a == b {
		t.Errorf("the 720p rendition has the upload's packets")
	}

	small := ask(testenv.MakeVideo(t, dir, "small.mp4", testenv.VideoOpts{Width: 1280, Height: 720, Seconds: 3, FPS: 25, ACodec: "aac", Container: "mp4", FastStart: true}), "m/small.mp4")
	got = mp4s(small)
	if _, ok := got["1080p"]; ok || len(got) != 2 || got["720p"].Height != 720 {
		t.Errorf("a 720p upload's mp4 variants %+v, want original and one 720p", got)
	}
	if _, height, _, _ := probeMP4(t, got["720p"].URL); height != 720 {
		t.Errorf("the 720p upload's rendition is %dp", height)
	}
}

// probeMP4 reads an MP4 over HTTP: its video codec and height, its audio codec and its duration.
func probeMP4(t *testing.T, url string) (vcodec string, height int, acodec string, dur float64) {
	t.Helper()
	out, err := exec.Command("ffprobe", "-v", "error", "-of", "json", "-show_entries",
		"stream=codec_type,codec_name,height:format=duration", url).Output()
	if err != nil {
		t.Fatalf("ffprobe %s: %v", url, err)
	}
	var doc struct {
		Streams []struct {
			Type   string `json:"codec_type"`
			Codec  string `json:"codec_name"`
			Height int    `json:"height"`
		}
		Format struct {
			Duration float64 `json:"duration,string"`
		}
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	for _, s := range doc.Streams {
		switch s.Type {
		case "video":
			vcodec, height = s.Codec, s.Height
		case "audio":
			acodec = s.Codec
		}
	}
	return vcodec, height, acodec, doc.Format.Duration
}

// packetsHash is the SHA-256 of a file's (or URL's) video packets, in order, without decoding.
func packetsHash(t *testing.T, in string) string {
	t.Helper()
	out, err := exec.Command("ffmpeg", "-nostdin", "-v", "error", "-i", in, "-map", "0:v:0", "-c", "copy",
		"-f", "streamhash", "-hash", "sha256", "-").Output()
	if err != nil {
		t.Fatalf("hashing %s: %v", filepath.Base(in), err)
	}
	return fmt.Sprint(strings.TrimSpace(string(out)))
}
