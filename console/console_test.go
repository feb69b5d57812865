package console

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeSource is a Source for the console's own logic (auth, CSRF, routing, rendering); the app's tests
// run it against a real worker.
type fakeSource struct {
	mu       sync.Mutex
	snap     Snapshot
	replayed []uint64
	deleted  []uint64
	purged   int
}

func (f *fakeSource) Snapshot(context.Context) Snapshot { return f.snap }
func (f *fakeSource) DeadLetter(_ context.Context, seq uint64) (DeadLetter, error) {
	if seq != 7 {
		return DeadLetter{}, ErrNotFound
	}
	return DeadLetter{Seq: 7, MediaID: "m-7", Reason: "max-deliveries", Payload: `{"mediaId":"m-7"}`,
		Headers: map[string][]string{"Mw-Reason": {"max-deliveries"}}}, nil
}
func (f *fakeSource) Replay(_ context.Context, seq uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.replayed = append(f.replayed, seq)
	return nil
}
func (f *fakeSource) Delete(_ context.Context, seq uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deleted = append(f.deleted, seq)
	return nil
}
func (f *fakeSource) Purge(context.Context) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.purged++
	return 3, nil
}

func newServer(t *testing.T, cfg Config) (*httptest.Server, *fakeSource) {
	t.Helper()
	src := &fakeSource{}
	ring := &Ring{}
	now := time.Now()
	ring.Add(now, ResultSuccess)
	ring.Add(now, ResultInfected)
	src.snap = Snapshot{
		Dependencies: []Dependency{{Name: "clamd", Detail: "ClamAV 1.4.6", State: Warn, Reason: "development database only"}},
		Queues:       []Queue{{Stream: "APP_MEDIA_REQUESTS", Consumer: "mediaworker", Pending: 4}},
		DeadLetters:  1,
		RecentDead:   []DeadLetter{{Seq: 7, MediaID: "m-7", Reason: "max-deliveries"}},
		Recent: []Outcome{
			{MediaID: "photo-1", Kind: "image", Result: ResultSuccess, Time: now, PreviewURL: "http://127.0.0.1:1/objects/media/p_low.webp"},
			{MediaID: "evil-1", Result: ResultInfected, Virus: "Eicar-Test", Time: now, PreviewURL: "javascript:alert(1)"},
		},
		Throughput: ring,
	}
	if cfg.Token != "" && cfg.Limiter == nil {
		cfg.Limiter = &fakeLimiter{}
	}
	h, err := New(src, cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv, src
}

func noRedirect() *http.Client {
	return &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func fetch(t *testing.T, c *http.Client, req *http.Request) (int, string, http.Header) {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

var csrfField = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

func TestOpenConsoleRendersAndGuardsActions(t *testing.T) {
	srv, src := newServer(t, Config{Open: true})
	c := noRedirect()
	req, _ := http.NewRequest("GET", srv.URL+"/", nil)
	code, body, hdr := fetch(t, c, req)
	if code != 200 || !strings.Contains(hdr.Get("Content-Security-Policy"), "frame-ancestors 'none'") {
		t.Fatalf("GET /: %d, headers %v", code, hdr)
	}
	for _, want := range []string{"clamd", "development database only", "APP_MEDIA_REQUESTS", "photo-1", "evil-1",
		"Eicar-Test", `src="http://127.0.0.1:1/objects/media/p_low.webp"`, `class="outcome r-infected"`, "<svg",
		`action="/console/dlq/7/replay"`, `action="/console/dlq/purge"`, "</html>"} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if strings.Contains(body, "javascript:") {
		t.Error("a javascript: preview URL reached the page")
	}
	m := csrfField.FindStringSubmatch(body)
	if m == nil {
		t.Fatal("no CSRF token in the page's forms")
	}

	post := func(path string, form url.Values, hdr map[string]string) (int, string, http.Header) {
		req, _ := http.NewRequest("POST", srv.URL+path, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		return fetch(t, c, req)
	}
	if code, _, _ := post("/console/dlq/7/replay", url.Values{}, nil); code != 403 {
		t.Errorf("replay without a CSRF token: %d, want 403", code)
	}
	if code, _, _ := post("/console/dlq/7/replay", url.Values{"csrf": {m[1]}}, map[string]string{"Origin": "http://evil.example"}); code != 403 {
		t.Errorf("replay from another origin: %d, want 403", code)
	}
	if code, _, _ := post("/console/dlq/purge", url.Values{"csrf": {m[1]}}, map[string]string{"Sec-Fetch-Site": "cross-site"}); code != 403 {
		t.Errorf("purge from another site: %d, want 403", code)
	}
	if len(src.replayed)+src.purged != 0 {
		t.Fatalf("refused actions ran: replayed %v, purged %d", src.replayed, src.purged)
	}
	code, _, hdr = post("/console/dlq/7/replay", url.Values{"csrf": {m[1]}}, map[string]string{"Origin": srv.URL})
	if code != http.StatusSeeOther || len(src.replayed) != 1 || src.replayed[0] != 7 {
		t.Fatalf("replay: %d, replayed %v", code, src.replayed)
	}
	req, _ = http.NewRequest("GET", srv.URL+hdr.Get("Location"), nil)
	if _, body, _ := fetch(t, c, req); !strings.Contains(body, "Dead letter 7 was published to the request subject again.") {
		t.Error("the page after a replay does not say it happened")
	}
	if code, _, _ := post("/console/dlq/7/delete", url.Values{"csrf": {m[1]}}, nil); code != http.StatusSeeOther || len(src.deleted) != 1 {
		t.Errorf("delete: %d, deleted %v", code, src.deleted)
	}
	if code, _, _ := post("/console/dlq/purge", url.Values{"csrf": {m[1]}}, nil); code != http.StatusSeeOther || src.purged != 1 {
		t.Errorf("purge: %d, purged %d", code, src.purged)
	}

	for path, want := range map[string]int{"/console/dlq/7": 200, "/console/dlq/8": 404, "/console/dlq/x": 400,
		"/nothing-here": 404, "/console/assets/console.css": 200, "/console/live": 200} {
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		if code, _, _ := fetch(t, c, req); code != want {
			t.Errorf("GET %s: %d, want %d", path, code, want)
		}
	}
}

func TestRingKeepsTheLastHour(t *testing.T) {
	var r Ring
	now := time.Date(2026, 11, 22, 12, 30, 30, 0, time.UTC)
	r.Add(now, ResultSuccess)
	r.Add(now.Add(-10*time.Second), ResultSuccess)
	r.Add(now.Add(-5*time.Minute), ResultFailed)
	r.Add(now.Add(-59*time.Minute), ResultGaveUp)
	r.Add(now.Add(-61*time.Minute), ResultSuccess) // too old: not in the hour
	r.Add(now, "retry")                            // not a result the chart shows
	s := r.Series(now)
	if len(s) != Minutes || !s[len(s)-1].Start.Equal(now.Truncate(time.Minute)) {
		t.Fatalf("series: %d minutes ending %v", len(s), s[len(s)-1].Start)
	}
	total := [4]int{}
	for _, m := range s {
		for k, n := range m.Counts {
			total[k] += n
		}
	}
	if total != [4]int{2, 1, 0, 1} || s[len(s)-1].Counts[0] != 2 || s[len(s)-6].Counts[1] != 1 {
		t.Fatalf("totals %v; last minute %v", total, s[len(s)-1].Counts)
	}
	// An hour later the slots are reused, and the old counts are gone.
	later := now.Add(time.Hour)
	r.Add(later, ResultInfected)
	total = [4]int{}
	for _, m := range r.Series(later) {
		for k, n := range m.Counts {
			total[k] += n
		}
	}
	if total != [4]int{0, 0, 1, 0} {
		t.Fatalf("an hour later: %v", total)
	}
	c := buildChart(r.Series(later))
	if c.Sum != 1 || c.Max != 2 || len(c.Bars) != Minutes {
		t.Fatalf("chart: sum %d, max %d, %d bars", c.Sum, c.Max, len(c.Bars))
	}
}

// TestOpenConsoleAnswersOnlyLoopbackNames: without a token the console answers only requests that name
// a loopback host (a DNS-rebinding page sends its own name), on every path, and only pages of its own
// origin; the names a rebinding page could spell are not loopback names.
func TestOpenConsoleAnswersOnlyLoopbackNames(t *testing.T) {
	srv, src := newServer(t, Config{Open: true})
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	send := func(method, path, host, origin string) (int, string) {
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader("csrf=x"))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Host = host
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		code, body, _ := fetch(t, noRedirect(), req)
		return code, body
	}
	for _, path := range []string{"/", "/console/live", "/console/dlq/7", "/console/assets/console.css", "/console/login", "/nothing-here"} {
		if code, body := send("GET", path, "evil.example:"+port, ""); code != http.StatusMisdirectedRequest || !strings.Contains(body, `"evil.example:`+port+`"`) {
			t.Errorf("GET %s for evil.example: %d %q, want 421 naming the host", path, code, body)
		}
	}
	if code, _ := send("POST", "/console/dlq/purge", "evil.example:"+port, "http://evil.example:"+port); code != http.StatusMisdirectedRequest {
		t.Errorf("purge for evil.example: %d, want 421", code)
	}
	for _, origin := range []string{"http://evil.example:" + port, "http://localhost:1", "null", "http://127.0.0.1:" + port + ".evil.example"} {
		if code, _ := send("GET", "/console/live", "127.0.0.1:"+port, origin); code != http.StatusForbidden {
			t.Errorf("GET /console/live from Origin %s: %d, want 403", origin, code)
		}
	}
	if src.purged != 0 {
		t.Fatal("a refused purge ran")
	}
	for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port, "LOCALHOST.:" + port, "[::1]:" + port, "127.8.9.10:" + port, "localhost", "[::ffff:127.0.0.1]:" + port} {
		if code, _ := send("GET", "/console/live", host, ""); code != http.StatusOK {
			t.Errorf("GET /console/live for %s: %d, want 200", host, code)
		}
	}
	if code, _ := send("GET", "/console/live", "localhost:"+port, "http://localhost:"+port); code != http.StatusOK {
		t.Errorf("GET /console/live from its own origin: %d, want 200", code)
	}
	for host, want := range map[string]bool{"localhost": true, "127.0.0.1": true, "[::1]:80": true, "::1": true,
		"localhost.evil.example": false, "127.0.0.1.nip.io": false, "0.0.0.0": false, "2130706433": false, "": false, "[::]": false,
		"10.0.0.1:8080": false, "evil.localhost.example": false} {
		if got := LoopbackHost(host); got != want {
			t.Errorf("LoopbackHost(%q) = %v, want %v", host, got, want)
		}
	}
}

// Jobs in hand are listed with their elapsed time; a video's progress is a bar, an image (which reports
// none) has no bar.
func TestInFlightJobsShowProgressBars(t *testing.T) {
	srv, src := newServer(t, Config{Open: true})
	now := time.Now()
	src.snap.InFlight = []Job{
		{MediaID: "clip-9", Kind: "video", Started: now.Add(-150 * time.Second), Progress: 0.42},
		{MediaID: "photo-9", Kind: "image", Started: now.Add(-2 * time.Second), Progress: -1},
	}
	req, _ := http.NewRequest("GET", srv.URL+"/console/live", nil)
	code, body, _ := fetch(t, noRedirect(), req)
	if code != 200 {
		t.Fatalf("GET /console/live: %d", code)
	}
	video := regexp.MustCompile(`(?s)clip-9</span> <span class="kind">video</span> <span class="muted">2m3\ds</span></div>\s*<progress max="1" value="0.42"[^>]*></progress><span class="mono small">42%</span>`)
	if !video.MatchString(body) {
		t.Errorf("the video in flight lacks its elapsed time or its 42%% bar:\n%s", body)
	}
	image := regexp.MustCompile(`(?s)photo-9</span> <span class="kind">image</span> <span class="muted">\d+\.\ds</span></div>\s*</li>`)
	if !image.MatchString(body) || strings.Count(body, "<progress") != 1 {
		t.Errorf("the image in flight should show its elapsed time and no bar:\n%s", body)
	}
}

// Each consumer's row counts the stranded messages this instance rescued from it and says what was done
// with the last one and when; a consumer without rescues shows 0 and nothing more.
func TestQueuesShowRescues(t *testing.T) {
	srv, src := newServer(t, Config{Open: true})
	now := time.Now()
	src.snap.Queues = []Queue{
		{Stream: "APP_MEDIA_REQUESTS", Consumer: "mediaworker", Pending: 4},
		{Stream: "APP_MEDIA_REQUESTS", Consumer: "mediaworker-image", Rescued: 3, LastRescue: now.Add(-5 * time.Minute), LastRescueAction: "gave_up", DeadLetters: 1},
	}
	req, _ := http.NewRequest("GET", srv.URL+"/console/live", nil)
	code, body, _ := fetch(t, noRedirect(), req)
	if code != 200 {
		t.Fatalf("GET /console/live: %d", code)
	}
	if !strings.Contains(body, `<span class="long">rescued</span>`) {
		t.Errorf("the queues lack a rescued column:\n%s", body)
	}
	image := regexp.MustCompile(`(?s)q-name">mediaworker-image</div>.*?<td class="num">3<div class="muted small" title="the last rescue, \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC">gave up 5m ago</div></td><td class="num">1</td>\s*</tr>`)
	if !image.MatchString(body) {
		t.Errorf("the image lane's row lacks its 3 rescues, the last one's action and time, or its DLQ count last:\n%s", body)
	}
	triage := regexp.MustCompile(`(?s)q-name">mediaworker</div>.*?<td class="num">4</td><td class="num">0</td><td class="num">0</td>\s*<td class="num">0</td><td class="num">0</td>\s*</tr>`)
	if !triage.MatchString(body) {
		t.Errorf("triage's row should show 0 rescues and no last one:\n%s", body)
	}
}

// Recent outcomes show the asset facts their responses carry: a success with a ThumbHash gets it drawn as
// its preview's placeholder (beneath the preview, or alone) and its dominant colour as a swatch; one
// without facts gets neither; a colour or hash that is not one is dropped, and a failure's facts are not
// shown. A reused answer says so.
func TestConsoleShowsAssetFacts(t *testing.T) {
	srv, src := newServer(t, Config{Open: true})
	now := time.Now()
	src.snap.Recent = []Outcome{
		{MediaID: "with-facts", Kind: "image", Result: ResultSuccess, Time: now, PreviewURL: "http://127.0.0.1:1/objects/media/a_low.webp",
			ThumbHash: realThumbHashes["board (landscape)"], DominantColor: "#4e8b66"},
		{MediaID: "no-preview", Kind: "video", Result: ResultSuccess, Time: now, ThumbHash: realThumbHashes["talk"], DominantColor: "#8b2401", Reused: true},
		{MediaID: "no-facts", Kind: "image", Result: ResultSuccess, Time: now, PreviewURL: "http://127.0.0.1:1/objects/media/b_low.webp"},
		{MediaID: "hostile", Kind: "image", Result: ResultSuccess, Time: now, PreviewURL: "http://127.0.0.1:1/objects/media/c_low.webp",
			ThumbHash: `"><script>alert(1)</script>`, DominantColor: "red;background:url(x)"},
		{MediaID: "failed", Kind: "image", Result: ResultFailed, Time: now, Error: "boom", ThumbHash: realThumbHashes["moon (grey)"], DominantColor: "#030303"},
	}
	req, _ := http.NewRequest("GET", srv.URL+"/", nil)
	code, body, hdr := fetch(t, noRedirect(), req)
	if code != 200 {
		t.Fatalf("GET /: %d", code)
	}
	if csp := hdr.Get("Content-Security-Policy"); !strings.Contains(csp, "img-src 'self' http: https: data:;") {
		t.Errorf("the CSP does not let the placeholders' data: URLs in: %s", csp)
	}
	items := map[string]string{}
	for _, m := range regexp.MustCompile(`(?s)<li class="outcome[^"]*">(.*?)</li>`).FindAllStringSubmatch(body, -1) {
		id := regexp.MustCompile(`<span class="mono id[^"]*">([^<]*)</span>`).FindStringSubmatch(m[1])
		if id != nil {
			items[id[1]] = m[1]
		}
	}
	// html/template writes the base64's "+" as "&#43;", which the browser reads back.
	placeholder := regexp.MustCompile(`<img class="ph" src="data:image/png;base64,(?:[A-Za-z0-9/]|&#43;)+=*" alt="" width="72" height="72">`)
	swatch := func(c string) string {
		return `<span class="dc" title="dominant colour ` + c + `"><svg viewBox="0 0 1 1" width="11" height="11" aria-hidden="true"><rect width="1" height="1" fill="` + c + `"></rect></svg><span class="mono small">` + c + `</span></span>`
	}

	it := items["with-facts"]
	if !regexp.MustCompile(`<div class="preview">` + placeholder.String() + `<img src="http://127.0.0.1:1/objects/media/a_low.webp"`).MatchString(it) {
		t.Errorf("the outcome with facts lacks its placeholder beneath its preview:\n%s", it)
	}
	if !strings.Contains(it, swatch("#4e8b66")) || strings.Contains(it, "reused") {
		t.Errorf("the outcome with facts lacks its colour swatch (or says reused):\n%s", it)
	}
	it = items["no-preview"]
	if !regexp.MustCompile(`<div class="preview">`+placeholder.String()+`</div>`).MatchString(it) || strings.Contains(it, "noimg") {
		t.Errorf("the outcome without a preview should show its placeholder alone:\n%s", it)
	}
	if !strings.Contains(it, swatch("#8b2401")) || !strings.Contains(it, `<span class="tag reused"`) {
		t.Errorf("the reused outcome lacks its swatch or its reused tag:\n%s", it)
	}
	for _, id := range []string{"no-facts", "hostile", "failed"} {
		it := items[id]
		if it == "" {
			t.Fatalf("%s is not listed", id)
		}
		if strings.Contains(it, `class="ph"`) || strings.Contains(it, `class="dc"`) || strings.Contains(it, "data:") {
			t.Errorf("%s should show no placeholder and no swatch:\n%s", id, it)
		}
	}
	for _, bad := range []string{"<script>alert", "background:url", "red;"} {
		if strings.Contains(body, bad) {
			t.Errorf("the page carries %q from a hostile response", bad)
		}
	}
	if n := len(placeholder.FindAllString(body, -1)); n != 2 {
		t.Errorf("%d placeholders on the page, want 2", n)
	}
}

// The memory budget shows beside the slots: the bytes admitted of the budget as a meter and in MiB,
// and the jobs waiting for memory when there are any.
func TestSlotsShowTheMemoryBudget(t *testing.T) {
	srv, src := newServer(t, Config{Open: true})
	src.snap.Slots = []Slots{{Kind: "image", Active: 2, Max: 2}}
	src.snap.Memory = &Memory{InUse: 150 << 20, Budget: 192 << 20, Peak: 180 << 20, Waiting: 1}
	req, _ := http.NewRequest("GET", srv.URL+"/console/live", nil)
	code, body, _ := fetch(t, noRedirect(), req)
	if code != 200 {
		t.Fatalf("GET /console/live: %d", code)
	}
	memory := regexp.MustCompile(`(?s)<div class="slot" id="memory"><span class="slot-kind">memory</span>\s*` +
		`<meter min="0" max="201326592" value="157286400" title="150 MiB of the 192 MiB budget admitted \(peak 180 MiB\)"></meter>\s*` +
		`<span class="mono">150 MiB/192 MiB</span> <span class="muted">\+1 waiting for memory</span></div>`)
	if !memory.MatchString(body) {
		t.Errorf("the slots lack the memory budget in use (150 of 192 MiB, 1 waiting):\n%s", body)
	}

	src.snap.Memory.Waiting = 0
	_, body, _ = fetch(t, noRedirect(), req)
	if !strings.Contains(body, `<span class="mono">150 MiB/192 MiB</span></div>`) || strings.Contains(body, "waiting for memory") {
		t.Errorf("with nobody waiting, the budget should show no waiters:\n%s", body)
	}
	src.snap.Memory = nil
	_, body, _ = fetch(t, noRedirect(), req)
	if strings.Contains(body, `id="memory"`) {
		t.Errorf("without a budget the page should show none:\n%s", body)
	}
}

// Jobs and answers are named by their upload's file (the base of its key) beside the mediaId; a key is
// the uploader's, so the name is escaped, stripped of control and bidi characters, and cut when long.
// A job handed back after a transient failure stays in flight with why it waits, and no progress bar;
// requests the worker does not take while a dependency is down are counted in the same card.
func TestJobsShowFileNamesAndWhyTheyWait(t *testing.T) {
	srv, src := newServer(t, Config{Open: true})
	now := time.Now()
	long := strings.Repeat("x", 300) + ".jpeg"
	src.snap.Dependencies = []Dependency{{Name: "clamd", State: Fail, Reason: "connection refused"}}
	src.snap.InFlight = []Job{
		{MediaID: "clip-9", File: FileName("u/9/<b onclick=x>clip\u202egpj.mov"), Kind: "video", Started: now, Progress: 0.5, State: "waiting for clamd"},
		{MediaID: "photo-9", File: FileName("u/9/" + long), Kind: "image", Started: now, Progress: -1},
	}
	src.snap.Recent[0].File = FileName("tenant/uploads/holiday.jpg")
	req, _ := http.NewRequest("GET", srv.URL+"/console/live", nil)
	code, body, _ := fetch(t, noRedirect(), req)
	if code != 200 {
		t.Fatalf("GET /console/live: %d", code)
	}
	for what, want := range map[string]string{
		"the held job's escaped name, its id and state": `<span class="file">&lt;b onclick=x&gt;clip?gpj.mov</span> <span class="mono id muted small">clip-9</span> <span class="kind">video</span> <span class="tag job-state">waiting for clamd</span>`,
		"the long name cut, its extension kept":         `<span class="file">` + strings.Repeat("x", 43) + "…" + strings.Repeat("x", 15) + `.jpeg</span>`,
		"the answer's file name":                        `<span class="file">holiday.jpg</span> <span class="mono id muted small">photo-1</span>`,
		"the answer without one, by its mediaId":        `<div class="o-id"><span class="mono id">evil-1</span></div>`,
		"the requests not taken":                        `4 more queued, not taken until clamd is back.`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %s (%q):\n%s", what, want, body)
		}
	}
	if strings.Contains(body, "<progress") || strings.Contains(body, "\u202e") || strings.Contains(body, "<b ") {
		t.Errorf("a held job shows a progress bar, or a key's markup or bidi override reached the page:\n%s", body)
	}
	for key, want := range map[string]string{"": "", "dir/": "dir", "a/b/c.png": "c.png", "bad\xffname": "bad?name", "tab\there": "tab?here"} {
		if got := FileName(key); got != want {
			t.Errorf("FileName(%q) = %q, want %q", key, got, want)
		}
	}
}
