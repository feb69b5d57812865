package app_test

import (
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/mediaworker/mediaworker/app"
	"github.com/mediaworker/mediaworker/internal/testenv"
)

// clientFrom is an HTTP client whose connections leave from ip, a loopback address (Linux routes all of
// 127.0.0.0/8 to lo), so the worker sees a different client address per client. It follows no redirects.
func clientFrom(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	return &http.Client{
		Transport:     &http.Transport{DialContext: d.DialContext},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// TestWrongTokensAreThrottledPerAddress: an address that guesses the operator token gets 429 with
// Retry-After after 10 wrong tokens, on /v1/scan and the console alike (one budget for both), however
// fast it keeps guessing; while it is throttled, the owner on another address is never refused (the
// right token works, on both surfaces, and the owner's own typo is a 401, not a 429), and a browser that
// logged in before the attack keeps working even from the attacker's address.
func TestWrongTokensAreThrottledPerAddress(t *testing.T) {
	clamd := testenv.StartClamd(t)
	const token = "operator-token-of-the-throttle-test"
	w := startWorld(t, app.StorageNATS, clamd, func(c *app.Config) { c.ScanAPI.Token = token })
	base := "http://" + w.app.HTTPAddr()
	attacker, owner := clientFrom("127.0.0.2"), clientFrom("127.0.0.1")

	do := func(c *http.Client, method, path, bearer string, cookie *http.Cookie, form url.Values) *http.Response {
		t.Helper()
		body := "hello"
		if form != nil {
			body = form.Encode()
		}
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		if form != nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		if cookie != nil {
			req.AddCookie(cookie)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	login := func(c *http.Client, tok string) (int, *http.Cookie) {
		t.Helper()
		resp := do(c, "POST", "/console/login", "", nil, url.Values{"token": {tok}})
		for _, ck := range resp.Cookies() {
			if ck.Name == "mw_console" && ck.Value != "" {
				return resp.StatusCode, ck
			}
		}
		return resp.StatusCode, nil
	}

	// A colleague on the attacker's address (one office NAT) logged in to the console before the attack.
	code, session := login(attacker, token)
	if code != http.StatusSeeOther || session == nil {
		t.Fatalf("login before the attack: %d, cookie %v", code, session)
	}

	// The attack: 60 wrong tokens as fast as /v1/scan answers. At most 10 are checked (401); then 429
	// with a Retry-After of at most a minute, every time.
	checked := 0
	for i := range 60 {
		resp := do(attacker, "POST", "/v1/scan", "guess-"+strconv.Itoa(i), nil, nil)
		switch resp.StatusCode {
		case http.StatusUnauthorized:
			checked++
		case http.StatusTooManyRequests:
			if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || s < 1 || s > 60 {
				t.Fatalf("guess %d: 429 with Retry-After %q, want 1–60 seconds", i, resp.Header.Get("Retry-After"))
			}
		default:
			t.Fatalf("guess %d: %d, want 401 or 429", i, resp.StatusCode)
		}
	}
	if checked != 10 {
		t.Fatalf("%d of 60 wrong tokens were checked, want 10 (then 429)", checked)
	}

	// The console shares the budget: the attacker gets no fresh one there, by header or by login form.
	if r := do(attacker, "GET", "/console/live", "guess-console", nil, nil); r.StatusCode != http.StatusTooManyRequests || r.Header.Get("Retry-After") == "" {
		t.Errorf("console bearer guess from the throttled address: %d, want 429 with Retry-After", r.StatusCode)
	}
	if code, ck := login(attacker, "guess-login"); code != http.StatusTooManyRequests || ck != nil {
		t.Errorf("console login guess from the throttled address: %d, want 429", code)
	}
	// Even the right token waits on the throttled address: were it let through, a 429 would only mean
	// "wrong" and the guessing would go on at full speed.
	if r := do(attacker, "POST", "/v1/scan", token, nil, nil); r.StatusCode != http.StatusTooManyRequests {
		t.Errorf("right token from the throttled address: %d, want 429 until its Retry-After", r.StatusCode)
	}
	// The colleague's session, from that same address, is not a token check: it keeps working.
	if r := do(attacker, "GET", "/console/live", "", session, nil); r.StatusCode != http.StatusOK {
		t.Errorf("logged-in browser on the throttled address: %d, want 200", r.StatusCode)
	}

	// The owner, on another address, is never refused for the attacker's guesses.
	if r := do(owner, "POST", "/v1/scan", token, nil, nil); r.StatusCode != http.StatusOK {
		t.Errorf("owner's /v1/scan with the right token during the attack: %d, want 200", r.StatusCode)
	}
	if r := do(owner, "GET", "/console/live", token, nil, nil); r.StatusCode != http.StatusOK {
		t.Errorf("owner's console with the right bearer token during the attack: %d, want 200", r.StatusCode)
	}
	if code, ck := login(owner, token); code != http.StatusSeeOther || ck == nil {
		t.Errorf("owner's console login during the attack: %d, want 303 with the session cookie", code)
	}
	if r := do(owner, "POST", "/v1/scan", "owner-typo", nil, nil); r.StatusCode != http.StatusUnauthorized {
		t.Errorf("owner's own typo during the attack: %d, want 401 (the owner's budget is untouched)", r.StatusCode)
	}
}
