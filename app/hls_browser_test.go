package app_test

import (
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/app"
	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/pipeline"
	"github.com/mediaworker/mediaworker/transcoder"
)

// The HLS player test plays the worker's ladder in a real browser with a real player: hls.js from npm,
// pinned by testdata/hlsplayer/package-lock.json and installed there for the test only (the product
// ships no player). The page comes from another origin than the worker's, as a customer's site would.

// hlsPlayerDir installs the pinned hls.js with `npm ci` when node_modules lacks it (a fresh clone, CI;
// testenv.NPMPackages, which requires node and npm like every other program the tests use) and
// returns the package's directory.
func hlsPlayerDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join("testdata", "hlsplayer")
	testenv.NPMPackages(t, dir, filepath.Join("hls.js", "dist", "hls.min.js"))
	return dir
}

// hlsPlayerState is what page.html records in window.hlsState.
type hlsPlayerState struct {
	HLSVersion     string   `json:"hlsVersion"`
	HLSSupported   bool     `json:"hlsSupported"`
	MSEReference   bool     `json:"mseReference"`
	MSECodecs      string   `json:"mseCodecs"`
	MSEMaster      bool     `json:"mseMaster"`
	ManifestParsed bool     `json:"manifestParsed"`
	Levels         int      `json:"levels"`
	LevelHeights   []int    `json:"levelHeights"`
	LevelsSwitched []int    `json:"levelsSwitched"`
	FragsLoaded    int      `json:"fragsLoaded"`
	Fatal          string   `json:"fatal"`
	Errors         []string `json:"errors"`
	Playing        bool     `json:"playing"`
	Ended          bool     `json:"ended"`
	CurrentTime    float64  `json:"currentTime"`
	Duration       float64  `json:"duration"`
	Frames         int      `json:"frames"`
	VideoWidth     int      `json:"videoWidth"`
	VideoHeight    int      `json:"videoHeight"`
	BufferedStart  float64  `json:"bufferedStart"`
}

// pictureStats tells a picture from a blank frame: the share of pixels that are not near black, the
// luminance's standard deviation, and the number of distinct colours (at 5 bits a channel).
func pictureStats(img image.Image) (lit, lumaSD float64, colours int) {
	b := img.Bounds()
	seen := map[uint32]bool{}
	var n, litN, sum, sumSq float64
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			r8, g8, b8 := float64(r>>8), float64(g>>8), float64(bl>>8)
			l := 0.299*r8 + 0.587*g8 + 0.114*b8
			n++
			sum += l
			sumSq += l * l
			if max(r8, g8, b8) > 32 {
				litN++
			}
			seen[(r>>11)<<10|(g>>11)<<5|(bl>>11)] = true
		}
	}
	if n == 0 {
		return 0, 0, 0
	}
	mean := sum / n
	return litN / n, math.Sqrt(max(0, sumSq/n-mean*mean)), len(seen)
}

// TestHLSPlaysInABrowser makes an HLS ladder (720p and 360p) of an 8-second clip on a real worker with
// signed URLs, and plays the answer's master playlist to its end with hls.js in headless Chromium, from a
// page on another origin: hls.js must see both levels and no fatal error, the video must end at its
// duration, and a screenshot taken mid-play must show the picture (testsrc2 is colourful), not a blank.
func TestHLSPlaysInABrowser(t *testing.T) {
	player := hlsPlayerDir(t)
	testenv.RequireBinary(t, "chromium")
	clamd := testenv.StartClamd(t)
	w := startWorld(t, app.StorageNATS, clamd, func(c *app.Config) {
		c.URLSigning.Key, c.URLSigning.TTL = "hls-browser-test-signing-key-0123456789abcdef", time.Hour
		c.Pipeline.Recipes = map[string]pipeline.Recipe{"player": {Name: "player", Video: pipeline.VideoRecipe{
			HLS: &transcoder.LadderSpec{Rungs: []transcoder.LadderRung{{Height: 720, MaxKbps: 2500}, {Height: 360, MaxKbps: 800}},
				SegmentSeconds: 2}}}}
	})
	clip := testenv.MakeVideo(t, t.TempDir(), "clip.mp4", testenv.VideoOpts{Width: 1280, Height: 720, Seconds: 8, FPS: 25,
		ACodec: "aac", Container: "mp4", FastStart: true})
	req := testenv.NewRequest(w.bucket, w.upload(clip, "u/hls/clip.mp4"))
	req.Recipe = "player"
	testenv.PublishRequest(t, w.js, w.subj.Request, req)
	r := w.await(req.MediaID, 3*time.Minute)
	if !r.Success {
		t.Fatalf("the clip's answer: %+v", r)
	}
	hls := variant(t, r, "hls")
	if hls.Format != "m3u8" {
		t.Fatalf("the hls variant: %+v, want format m3u8", hls)
	}

	// The master playlist as the player will get it: its CODECS are what MediaSource is asked first.
	resp, err := http.Get(hls.URL)
	if err != nil {
		t.Fatal(err)
	}
	master, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s\n%s", hls.URL, resp.Status, master)
	}
	t.Logf("master playlist %s:\n%s", hls.URL, master)
	codecs := "avc1.64001f,mp4a.40.2"
	if m := regexp.MustCompile(`CODECS="([^"]+)"`).FindSubmatch(master); m != nil {
		codecs = string(m[1])
	}

	// The page and hls.js come from a loopback server of their own: another origin than the worker's.
	page, err := os.ReadFile(filepath.Join(player, "page.html"))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/{$}", func(rw http.ResponseWriter, _ *http.Request) {
		rw.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = rw.Write(page)
	})
	mux.HandleFunc("/hls.min.js", func(rw http.ResponseWriter, req *http.Request) {
		rw.Header().Set("Content-Type", "text/javascript; charset=utf-8")
		http.ServeFile(rw, req, filepath.Join(player, "node_modules", "hls.js", "dist", "hls.min.js"))
	})
	site := httptest.NewServer(mux)
	defer site.Close()
	pageURL := site.URL + "/?" + url.Values{"src": {hls.URL}, "codecs": {codecs}}.Encode()

	d := openDevtools(t, pageURL, "--autoplay-policy=no-user-gesture-required",
		"--disable-background-timer-throttling", "--disable-renderer-backgrounding")
	var st hlsPlayerState
	var shot image.Image
	var shotAt float64
	deadline := time.Now().Add(90 * time.Second)
	for ; time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		raw := d.eval(`typeof hlsSnapshot === "function" ? hlsSnapshot() : ""`)
		if raw == "" {
			continue
		}
		if err := json.Unmarshal([]byte(raw), &st); err != nil {
			t.Fatalf("page state %s: %v", raw, err)
		}
		if !st.MSEReference || !st.MSEMaster {
			t.Fatalf("this Chromium cannot play H.264/AAC through MediaSource: isTypeSupported(%q) = %v, "+
				"isTypeSupported(the master's %q) = %v; state %s", `video/mp4; codecs="avc1.64001f,mp4a.40.2"`,
				st.MSEReference, st.MSECodecs, st.MSEMaster, raw)
		}
		if st.Fatal != "" || st.Ended {
			break
		}
		// Mid-play: a frame well after the start and well before the end is on screen.
		if shot == nil && st.Playing && st.Frames > 0 && st.CurrentTime >= 1.5 && st.CurrentTime <= st.Duration-2 {
			shotAt = st.CurrentTime
			shot = d.screenshot(0, 0, 640, 360)
		}
	}
	final, _ := json.Marshal(st)
	t.Logf("player state: %s", final)

	if st.HLSVersion == "" || !st.HLSSupported {
		t.Fatalf("hls.js did not load or says MediaSource is unsupported: %s", final)
	}
	if st.Fatal != "" {
		t.Fatalf("hls.js reported a fatal error: %s (all errors: %q)", st.Fatal, st.Errors)
	}
	if !st.ManifestParsed || st.Levels != 2 {
		t.Errorf("hls.js parsed the master (%v) with %d levels %v, want 2 (720p and 360p)", st.ManifestParsed, st.Levels, st.LevelHeights)
	}
	if !st.Ended {
		t.Errorf("the video did not play to its end within 90 s: %s", final)
	}
	if st.Duration < 7 || st.Duration > 9 || st.CurrentTime < st.Duration-0.5 {
		t.Errorf("the video ended at %.2f s of %.2f s, want its end of about 8 s", st.CurrentTime, st.Duration)
	}
	if st.Frames < 100 {
		t.Errorf("the browser decoded %d frames, want most of 8 s at 25 fps", st.Frames)
	}
	if len(st.Errors) > 0 {
		t.Logf("non-fatal hls.js errors: %q", st.Errors)
	}
	// No hole at the start: hls.js once reported "fragment loaded with buffer holes, seeking from 0 to
	// 0.18" on the first 720p segment (the video started at 0.08 s behind an empty edit list, which
	// MSE players ignore); the buffered media must start at 0 and no gap be seeked over.
	for _, e := range st.Errors {
		if strings.Contains(e, "bufferSeekOverHole") || strings.Contains(e, "buffer holes") || strings.Contains(e, "bufferNudgeOnStall") {
			t.Errorf("hls.js reports a gap in the buffer: %s", e)
		}
	}
	if st.BufferedStart < 0 || st.BufferedStart > 0.01 {
		t.Errorf("the buffered media starts at %.3f s, want 0 (no hole at the start)", st.BufferedStart)
	}
	// 8 s and the audio's 21 ms of AAC priming at most: the video's old 0.08 s start offset made it 8.08.
	if st.Duration > 8.03 {
		t.Errorf("the playlist plays for %.3f s, want the clip's 8 s (a start offset lengthens it)", st.Duration)
	}

	if shot == nil {
		t.Fatalf("no screenshot was taken mid-play (state %s)", final)
	}
	lit, sd, colours := pictureStats(shot)
	t.Logf("screenshot at %.2f s: %v, %.0f%% lit, luma SD %.1f, %d colours", shotAt, shot.Bounds().Size(), lit*100, sd, colours)
	if lit < 0.5 || sd < 20 || colours < 50 {
		p := filepath.Join(os.TempDir(), fmt.Sprintf("hls-midplay-%d.png", os.Getpid())) // kept to look at
		if f, err := os.Create(p); err == nil {
			_ = png.Encode(f, shot)
			f.Close()
		}
		t.Errorf("the mid-play screenshot looks blank (%.0f%% lit, luma SD %.1f, %d colours; saved as %s)", lit*100, sd, colours, p)
	}
}
