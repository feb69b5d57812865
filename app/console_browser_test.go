package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/app"
	"github.com/mediaworker/mediaworker/internal/testenv"
)

// chromium runs Debian's headless Chromium once with args and returns its stdout. Each run gets its own
// profile and a time limit.
func chromium(t *testing.T, args ...string) []byte {
	t.Helper()
	bin := testenv.RequireBinary(t, "chromium")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
		"--disable-extensions", "--disable-background-networking", "--hide-scrollbars", "--mute-audio",
		"--user-data-dir=" + t.TempDir(), "--virtual-time-budget=8000"}
	cmd := exec.CommandContext(ctx, bin, append(base, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium %v: %v\n%s", args, err, stderr.String())
	}
	return out
}

// TestConsoleInABrowser processes a photo, an EICAR file, a PDF and a short video on a real worker (real
// NATS, clamd, libvips, ffmpeg), dead-letters an unreadable request, and opens the console in headless
// Chromium: the page it renders (after its script ran) must name clamd and the queue, list the photo and
// the virus, and show a preview image that the worker really serves.
func TestConsoleInABrowser(t *testing.T) {
	clamd := testenv.StartClamd(t)
	w := startWorld(t, app.StorageNATS, clamd, nil)
	base := "http://" + w.app.HTTPAddr()
	dir := t.TempDir()

	// A real photo Go ships as test data, not one we generated.
	photo := filepath.Join(runtime.GOROOT(), "src", "image", "testdata", "video-001.jpeg")
	eicar := filepath.Join(dir, "invoice.jpg")
	pdf := filepath.Join(dir, "scan.jpg")
	if err := os.WriteFile(eicar, []byte(testenv.EICAR), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pdf, []byte(minimalPDF), 0o644); err != nil {
		t.Fatal(err)
	}
	video := testenv.MakeVideo(t, dir, "clip.mov", testenv.VideoOpts{Seconds: 2})
	photoID := w.request(w.upload(photo, "u/1/holiday.jpg"))
	virusID := w.request(w.upload(eicar, "u/2/invoice.jpg"))
	pdfID := w.request(w.upload(pdf, "u/3/scan.jpg"))
	videoID := w.request(w.upload(video, "u/4/clip.mov"))
	w.publishRaw([]byte(`{"this is": "not a request"}`), "garbage-1") // no mediaId: dead-lettered at once

	if r := w.await(photoID, 2*time.Minute); !r.Success {
		t.Fatalf("photo: %+v", r)
	}
	if r := w.await(virusID, 2*time.Minute); r.Success || !strings.Contains(r.Error, testenv.EICARSignature) {
		t.Fatalf("EICAR: %+v", r)
	}
	if r := w.await(pdfID, 2*time.Minute); r.Success {
		t.Fatalf("PDF: %+v", r)
	}
	if r := w.await(videoID, 3*time.Minute); !r.Success {
		t.Fatalf("video: %+v", r)
	}
	// The console reads outcomes from the responses stream on its own; wait until it lists them all.
	testenv.Eventually(t, 30*time.Second, func() error {
		_, body := get(t, base+"/console/live")
		for _, id := range []string{photoID, virusID, pdfID, videoID} {
			if !strings.Contains(body, id) {
				return fmt.Errorf("the console does not list %s yet", id)
			}
		}
		if !strings.Contains(body, `href="/console/dlq/`) {
			return fmt.Errorf("the console does not list the dead letter yet")
		}
		return nil
	})

	dom := string(chromium(t, "--window-size=1400,1000", "--dump-dom", base+"/"))
	for what, want := range map[string]string{
		"the script ran":           `data-live="on"`,
		"clamd":                    "<strong>clamd</strong>",
		"the dev database flag":    "development signature database only",
		"the queue":                "_MEDIA_REQUESTS",
		"the consumer":             w.cfg.Streams.Durable,
		"the photo's mediaId":      photoID,
		"the photo's file name":    `<span class="file">holiday.jpg</span>`,
		"the virus's file name":    `<span class="file">invoice.jpg</span>`,
		"the virus event":          testenv.EICARSignature,
		"the virus standing out":   `class="outcome r-infected"`,
		"the PDF's failure":        "application/pdf",
		"the dead letter":          `href="/console/dlq/`,
		"the purge button":         `action="/console/dlq/purge"`,
		"the whole page":           "<footer",
		"the throughput chart":     "<rect class=\"r-success\"",
		"the replay button's CSRF": `name="csrf"`,
		"a dominant colour":        `<span class="dc" title="dominant colour #`,
		"a ThumbHash placeholder":  `<img class="ph" src="data:image/png;base64,`,
	} {
		if !strings.Contains(dom, want) {
			t.Errorf("the rendered console lacks %s (%q)", what, want)
		}
	}
	if strings.Contains(dom, w.cfg.Streams.AdvisoryCapture().Stream()) {
		t.Errorf("the console lists the advisories stream's consumer among the queues")
	}
	// The DLQ column counts per consumer: the junk request was given up by triage, not by a lane.
	for consumer, want := range map[string]string{w.cfg.Streams.Durable: "1",
		w.cfg.Streams.Lane("image").Durable(): "0", w.cfg.Streams.Lane("video").Durable(): "0"} {
		row := regexp.MustCompile(`(?s)q-name">` + regexp.QuoteMeta(consumer) + `</div>.*?<td class="num">(\d+)</td>\s*</tr>`).FindStringSubmatch(dom)
		if row == nil {
			t.Errorf("the rendered console lacks the consumer %s among the queues", consumer)
		} else if row[1] != want {
			t.Errorf("the queues list %s dead letters for %s, want %s", row[1], consumer, want)
		}
	}
	// With --virtual-time-budget the page's clock runs 8 s: its 3-second refresh must have replaced the
	// live part with a fresh copy from the worker at least once.
	if !regexp.MustCompile(`data-refreshed="[1-9]`).MatchString(dom) {
		t.Errorf("the page did not refresh itself")
	}
	if t.Failed() {
		t.Fatalf("rendered DOM:\n%s", dom)
	}

	// The photo's and the video's ThumbHashes are their previews' placeholders: data: PNGs that the page's
	// CSP lets in and the browser decodes, 32 px on the long side as the reference decoder draws them.
	placeholders := chromiumWait(t, base+"/", `JSON.stringify(Array.from(document.querySelectorAll("#recent img.ph"), function (i) {
		return [i.complete, i.naturalWidth, i.naturalHeight, i.src.slice(0, 22)] }))`, func(s string) bool {
		return strings.Count(s, "[true,") >= 2 && !strings.Contains(s, "[false,")
	})
	var phs [][4]any
	if err := json.Unmarshal([]byte(placeholders), &phs); err != nil || len(phs) != 2 {
		t.Errorf("placeholders in the browser: %s (%v), want the photo's and the video's", placeholders, err)
	}
	for _, p := range phs {
		w, _ := p[1].(float64)
		h, _ := p[2].(float64)
		if p[0] != true || w < 1 || h < 1 || max(w, h) != 32 || p[3] != "data:image/png;base64," {
			t.Errorf("a placeholder in the browser (loaded, natural width, height, URL): %v", p)
		}
	}

	// Every preview is an <img> of a variant the worker wrote and serves, with its own content type.
	imgs := regexp.MustCompile(`<img src="([^"]+)"`).FindAllStringSubmatch(dom, -1)
	var webp, jpeg int
	for _, m := range imgs {
		src := strings.ReplaceAll(m[1], "&amp;", "&")
		resp, err := http.Get(src)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		ct := resp.Header.Get("Content-Type")
		switch {
		case resp.StatusCode != 200:
			t.Errorf("preview %s: %d", src, resp.StatusCode)
		case ct == "image/webp" && strings.HasSuffix(src, "_low.webp") && bytes.HasPrefix(body, []byte("RIFF")):
			webp++
			p := filepath.Join(dir, "preview.webp")
			os.WriteFile(p, body, 0o644)
			if info := testenv.DecodeImage(t, p); info.Width > 480 || info.Height > 480 {
				t.Errorf("the preview is %dx%d, not the low variant", info.Width, info.Height)
			}
		case ct == "image/jpeg" && strings.HasSuffix(src, "/poster.jpg"):
			jpeg++
		default:
			t.Errorf("preview %s is %s", src, ct)
		}
	}
	if webp != 1 || jpeg != 1 {
		t.Errorf("previews: %d WebP and %d poster, want the photo's and the video's (img tags: %d)", webp, jpeg, len(imgs))
	}

	// Screenshots at a desk and on a phone. MW_CONSOLE_SCREENSHOTS keeps them (docs/console.png is one).
	shots := os.Getenv("MW_CONSOLE_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	}
	for name, size := range map[string][2]int{"console.png": {1400, 1000}, "console-phone.png": {390, 844}} {
		path, _ := filepath.Abs(filepath.Join(shots, name))
		chromium(t, "--window-size="+strconv.Itoa(size[0])+","+strconv.Itoa(size[1]), "--screenshot="+path, base+"/")
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := png.DecodeConfig(f)
		f.Close()
		if err != nil || cfg.Width != size[0] || cfg.Height != size[1] {
			t.Errorf("screenshot %s: %dx%d, %v; want %dx%d", name, cfg.Width, cfg.Height, err, size[0], size[1])
		}
	}

	consoleDeadLetterActions(t, w, base, dom)
}

// consoleDeadLetterActions drives the DLQ part of the page against the real dead-letter stream: show
// the entry, replay it (the junk request is dead-lettered again, under a new sequence), delete that one,
// and purge one more, each a POST with the CSRF token of the rendered page.
func consoleDeadLetterActions(t *testing.T, w *world, base, dom string) {
	seqOf := func(page string) string {
		m := regexp.MustCompile(`href="/console/dlq/(\d+)"`).FindStringSubmatch(page)
		if m == nil {
			return ""
		}
		return m[1]
	}
	csrf := regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`).FindStringSubmatch(dom)
	first := seqOf(dom)
	if csrf == nil || first == "" {
		t.Fatal("no dead letter or CSRF token on the page")
	}
	if code, body := get(t, base+"/console/dlq/"+first); code != 200 || !strings.Contains(body, "not a request") || !strings.Contains(body, "Mw-Reason") {
		t.Fatalf("show dead letter %s: %d\n%s", first, code, body)
	}
	post := func(path string) int {
		req, _ := http.NewRequest("POST", base+path, strings.NewReader("csrf="+csrf[1]))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", base)
		resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post("/console/dlq/" + first + "/replay"); code != http.StatusSeeOther {
		t.Fatalf("replay: %d", code)
	}
	var again string
	testenv.Eventually(t, 30*time.Second, func() error {
		_, live := get(t, base+"/console/live")
		if again = seqOf(live); again == "" || again == first {
			return fmt.Errorf("the replayed junk is not back in the dead-letter stream yet (newest %q)", again)
		}
		return nil
	})
	if code, _ := get(t, base+"/console/dlq/"+first); code != http.StatusNotFound {
		t.Errorf("the replayed entry %s is still there: %d", first, code)
	}
	if code := post("/console/dlq/" + again + "/delete"); code != http.StatusSeeOther {
		t.Fatalf("delete: %d", code)
	}
	if code, _ := get(t, base+"/console/dlq/"+again); code != http.StatusNotFound {
		t.Errorf("the deleted entry %s is still there: %d", again, code)
	}
	w.publishRaw([]byte(`{"more": "junk"}`), "garbage-2")
	testenv.Eventually(t, 30*time.Second, func() error {
		if _, live := get(t, base+"/console/live"); !strings.Contains(live, "purge all 1") {
			return fmt.Errorf("the second junk request is not in the dead-letter stream yet")
		}
		return nil
	})
	if code := post("/console/dlq/purge"); code != http.StatusSeeOther {
		t.Fatalf("purge: %d", code)
	}
	if _, live := get(t, base+"/console/live"); !strings.Contains(live, "Empty: nothing has given up.") {
		t.Errorf("after the purge the page still lists dead letters")
	}
}

// TestConsoleNeedsTheOperatorToken: with --scan-api-token set, the console follows the scan API's rule
// (the token, as a bearer header or through the login form), and its actions need it too.
func TestConsoleNeedsTheOperatorToken(t *testing.T) {
	clamd := testenv.StartClamd(t)
	w := startWorld(t, app.StorageNATS, clamd, func(c *app.Config) { c.ScanAPI.Token = "operator-s3cret" })
	base := "http://" + w.app.HTTPAddr()
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	do := func(method, path, token string) *http.Response {
		req, _ := http.NewRequest(method, base+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := noFollow.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if r := do("GET", "/", ""); r.StatusCode != http.StatusSeeOther || r.Header.Get("Location") != "/console/login" {
		t.Fatalf("GET / without the token: %d → %q, want the login form", r.StatusCode, r.Header.Get("Location"))
	}
	if r := do("GET", "/", "wrong"); r.StatusCode != http.StatusSeeOther {
		t.Fatalf("GET / with a wrong token: %d", r.StatusCode)
	}
	if r := do("POST", "/console/dlq/purge", ""); r.StatusCode != http.StatusUnauthorized {
		t.Fatalf("purge without the token: %d, want 401", r.StatusCode)
	}
	if r := do("GET", "/", "operator-s3cret"); r.StatusCode != http.StatusOK {
		t.Fatalf("GET / with the token: %d", r.StatusCode)
	}
	// Health and metrics stay open, as before.
	if code, _ := get(t, base+"/health"); code != http.StatusOK {
		t.Fatalf("/health: %d", code)
	}
}

// TestConsoleBeyondLoopbackNeedsAToken: a worker whose HTTP listens on every interface (the scan API off,
// so it may start without a token) keeps the console and its actions shut, naming the setting to set;
// health stays open. The test connects through 127.0.0.1 only.
func TestConsoleBeyondLoopbackNeedsAToken(t *testing.T) {
	clamd := testenv.StartClamd(t)
	w := startWorld(t, app.StorageNATS, clamd, func(c *app.Config) { c.HTTPAddr, c.ScanAPI.Enabled = "0.0.0.0:0", false })
	_, port, err := net.SplitHostPort(w.app.HTTPAddr())
	if err != nil {
		t.Fatal(err)
	}
	base := "http://127.0.0.1:" + port
	for _, path := range []string{"/", "/console/live"} {
		if code, body := get(t, base+path); code != http.StatusForbidden || !strings.Contains(body, "http.scan_api_token") {
			t.Errorf("GET %s beyond loopback without a token: %d %.200q, want 403 naming http.scan_api_token", path, code, body)
		}
	}
	resp, err := http.Post(base+"/console/dlq/purge", "application/x-www-form-urlencoded", strings.NewReader("csrf=x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("purge beyond loopback without a token: %d, want 403", resp.StatusCode)
	}
	if code, _ := get(t, base+"/health"); code != http.StatusOK {
		t.Errorf("/health: %d", code)
	}
}

// TestStaleSignatures: a clamd whose official signatures are 10 days old still answers PING, but the
// worker is not ready, says why, exports the age, and the console shows clamd red with the reason.
func TestStaleSignatures(t *testing.T) {
	clamd := testenv.StartClamd(t)
	testenv.InstallDailyDatabase(clamd, 27000, time.Now().Add(-240*time.Hour))
	w := startWorld(t, app.StorageNATS, clamd, nil)
	base := "http://" + w.app.HTTPAddr()

	code, body := get(t, base+"/health/ready")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "not ready: clamd_signatures") || !strings.Contains(body, "over the maximum age of 72h") || !strings.Contains(body, "(clamd.max_signature_age)") {
		t.Fatalf("ready with 10-day-old signatures: %d %s", code, body)
	}
	_, health := get(t, base+"/health")
	if !strings.Contains(health, `"signatureVersion": 27000`) || !strings.Contains(health, `"stale": true`) {
		t.Errorf("/health does not report the stale signatures: %s", health)
	}
	// The signature date, as clamd reports it (in its own zone: the margin allows any offset).
	if m := regexp.MustCompile(`"signatureDate": "([^"]+)"`).FindStringSubmatch(health); m == nil {
		t.Errorf("/health lacks the signature date: %s", health)
	} else if date, err := time.Parse(time.RFC3339, m[1]); err != nil || time.Since(date) < 226*time.Hour || time.Since(date) > 254*time.Hour {
		t.Errorf("/health's signature date %s (%v), want about 10 days ago", m[1], err)
	}
	_, metrics := get(t, base+"/metrics")
	m := regexp.MustCompile(`(?m)^mediaworker_clamd_signature_age_seconds (\S+)$`).FindStringSubmatch(metrics)
	if m == nil {
		t.Fatal("/metrics lacks mediaworker_clamd_signature_age_seconds")
	}
	if age, err := strconv.ParseFloat(m[1], 64); err != nil || age < 226*3600 || age > 254*3600 {
		t.Errorf("signature age metric = %s, want about 10 days", m[1])
	}
	_, live := get(t, base+"/console/live")
	if !strings.Contains(live, `class="dep fail"`) || !strings.Contains(live, "signatures 27000") || !strings.Contains(live, "is freshclam running?") {
		t.Errorf("the console does not show clamd red with the reason:\n%s", live)
	}

	// clamd gone altogether: still red, now with why, and the page still renders in full.
	clamd.Stop()
	_, live = get(t, base+"/console/live")
	if !strings.Contains(live, "clamd unavailable") || !strings.Contains(live, "jobs wait until it answers") || !strings.Contains(live, `id="dlq"`) {
		t.Errorf("the console with clamd stopped:\n%s", live)
	}
}

// TestConsoleListsJobsHeldThroughAnOutage: clamd stops, a request comes: the job meets the outage and
// the worker holds it until clamd is back. All that time the console lists it in flight, by its file
// name, as waiting for clamd (or, should the dependency watcher see the outage before the pull, counts
// it among the requests not taken until clamd is back); once answered it leaves the card and its answer
// is listed by the same file name.
func TestConsoleListsJobsHeldThroughAnOutage(t *testing.T) {
	clamd := testenv.StartClamd(t)
	w := startWorld(t, app.StorageNATS, clamd, nil)
	base := "http://" + w.app.HTTPAddr()
	key := w.upload(testenv.MakeJPEG(t, t.TempDir(), 320, 240), "u/5/beach day.jpg")
	card := func(id string) string {
		t.Helper()
		_, live := get(t, base+"/console/live")
		m := regexp.MustCompile(`(?s)<section class="card[^"]*" id="` + id + `".*?</section>`).FindString(live)
		if m == "" {
			t.Fatalf("the console lacks its %s card:\n%s", id, live)
		}
		return m
	}
	clamd.Stop()
	id := w.request(key)
	file := `<span class="file">beach day.jpg</span>`
	testenv.Eventually(t, time.Minute, func() error {
		switch c := card("inflight"); {
		case strings.Contains(c, file) && strings.Contains(c, id) && strings.Contains(c, `<span class="tag job-state">waiting for clamd</span>`):
			t.Logf("held in flight: %s", regexp.MustCompile(`(?s)<li class="job.*?</li>`).FindString(c))
		case strings.Contains(c, "1 more queued, not taken until clamd is back."):
			t.Logf("not taken: clamd was seen down before the pull")
		default:
			return fmt.Errorf("the job is not listed in flight while clamd is down:\n%s", c)
		}
		return nil
	})
	// Still there a few refreshes later: held, not dropped.
	time.Sleep(2 * time.Second)
	if c := card("inflight"); !strings.Contains(c, id) && !strings.Contains(c, "1 more queued") {
		t.Fatalf("the held job left the in-flight card before it was answered:\n%s", c)
	}
	clamd.Start()
	if r := w.await(id, 2*time.Minute); !r.Success {
		t.Fatalf("after clamd came back: %+v", r)
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		if c := card("inflight"); strings.Contains(c, id) {
			return fmt.Errorf("the answered job is still in flight:\n%s", c)
		}
		if c := card("recent"); !strings.Contains(c, file+` <span class="mono id muted small">`+id+`</span>`) {
			return fmt.Errorf("the answer is not listed by its file name:\n%s", c)
		}
		return nil
	})
}
