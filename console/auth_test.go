package console

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// The token console (auth.go): logging in, refusing to open beyond loopback without a token, and
// throttling wrong tokens through the Limiter.

func TestTokenConsole(t *testing.T) {
	srv, _ := newServer(t, Config{Token: "op-token", TokenSetting: "http.scan_api_token"})
	c := noRedirect()
	req, _ := http.NewRequest("GET", srv.URL+"/", nil)
	if code, _, hdr := fetch(t, c, req); code != http.StatusSeeOther || hdr.Get("Location") != "/console/login" {
		t.Fatalf("GET / without a token: %d → %q, want the login form", code, hdr.Get("Location"))
	}
	req, _ = http.NewRequest("GET", srv.URL+"/console/live", nil)
	if code, _, _ := fetch(t, c, req); code != 401 {
		t.Fatalf("GET /console/live without a token: %d, want 401", code)
	}
	req, _ = http.NewRequest("POST", srv.URL+"/console/dlq/purge", nil)
	if code, _, _ := fetch(t, c, req); code != 401 {
		t.Fatalf("purge without a token: %d, want 401", code)
	}
	req, _ = http.NewRequest("GET", srv.URL+"/", nil)
	req.Header.Set("Authorization", "Bearer op-token")
	if code, body, _ := fetch(t, c, req); code != 200 || !strings.Contains(body, "photo-1") {
		t.Fatalf("GET / with the bearer token: %d", code)
	}
	// A script with the bearer token needs no CSRF token: no browser adds that header by itself.
	req, _ = http.NewRequest("POST", srv.URL+"/console/dlq/7/replay", nil)
	req.Header.Set("Authorization", "Bearer op-token")
	if code, _, _ := fetch(t, c, req); code != http.StatusSeeOther {
		t.Fatalf("replay with the bearer token: %d", code)
	}

	login := func(token string) *http.Response {
		resp, err := c.PostForm(srv.URL+"/console/login", url.Values{"token": {token}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if resp := login("wrong"); resp.StatusCode != 401 || len(resp.Cookies()) != 0 {
		t.Fatalf("wrong token: %d, cookies %v", resp.StatusCode, resp.Cookies())
	}
	resp := login("op-token")
	var session *http.Cookie
	for _, ck := range resp.Cookies() {
		if ck.Name == sessionCookie {
			session = ck
		}
	}
	if resp.StatusCode != http.StatusSeeOther || session == nil || !session.HttpOnly || session.SameSite != http.SameSiteStrictMode {
		t.Fatalf("login: %d, cookie %+v", resp.StatusCode, session)
	}
	if strings.Contains(session.Value, "op-token") {
		t.Fatal("the cookie carries the token itself")
	}
	req, _ = http.NewRequest("GET", srv.URL+"/", nil)
	req.AddCookie(session)
	if code, body, _ := fetch(t, c, req); code != 200 || !strings.Contains(body, "log out") {
		t.Fatalf("GET / with the cookie: %d", code)
	}
}

func TestNoTokenBeyondLoopbackRefuses(t *testing.T) {
	srv, _ := newServer(t, Config{TokenSetting: "http.scan_api_token"})
	req, _ := http.NewRequest("GET", srv.URL+"/", nil)
	code, body, _ := fetch(t, noRedirect(), req)
	if code != 403 || !strings.Contains(body, "http.scan_api_token") {
		t.Fatalf("open to the network without a token: %d %q, want 403 naming the setting", code, body)
	}
}

// fakeLimiter budgets wrong tokens per client, the client named by the X-Client header (every test
// client is 127.0.0.1), the app's way without its tarpit: a right token always passes, a wrong one over
// the budget gets 42 s. The client "flooded" stands for one with too many checks waiting: never checked,
// 7 s. The app's real limiter is tested in app.
type fakeLimiter struct {
	mu     sync.Mutex
	fails  map[string]int
	checks int // calls of right
}

const fakeBudget = 3

func (l *fakeLimiter) checked() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.checks
}

func (l *fakeLimiter) Check(r *http.Request, right func() bool) (bool, time.Duration) {
	client := r.Header.Get("X-Client")
	if client == "flooded" {
		return false, 7 * time.Second
	}
	ok := right()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.checks++
	if ok {
		return true, 0
	}
	if l.fails == nil {
		l.fails = map[string]int{}
	}
	l.fails[client]++
	if l.fails[client] > fakeBudget {
		return false, 42 * time.Second
	}
	return false, 0
}

// TestWrongTokensAreThrottled: the console checks every token (bearer or login form) through the
// limiter, once each; answers a wrong one 401 (or the login form) within the budget and 429 with the
// limiter's Retry-After over it, or when the limiter did not check it; and serves the right token from
// the throttled client at once, even after 30 wrong guesses, as well as another client's right token and
// a logged-in browser on the throttled client.
func TestWrongTokensAreThrottled(t *testing.T) {
	lim := &fakeLimiter{}
	srv, _ := newServer(t, Config{Token: "op-token", TokenSetting: "http.scan_api_token", Limiter: lim})
	c := noRedirect()
	login := func(client, token string) *http.Response {
		req, _ := http.NewRequest("POST", srv.URL+"/console/login", strings.NewReader(url.Values{"token": {token}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("X-Client", client)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	cookie := func(resp *http.Response) *http.Cookie {
		for _, ck := range resp.Cookies() {
			if ck.Name == sessionCookie && ck.Value != "" {
				return ck
			}
		}
		return nil
	}
	bearer := func(client, token string, cookie *http.Cookie) (int, http.Header) {
		req, _ := http.NewRequest("GET", srv.URL+"/", nil)
		req.Header.Set("X-Client", client)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if cookie != nil {
			req.AddCookie(cookie)
		}
		code, _, hdr := fetch(t, c, req)
		return code, hdr
	}
	// An operator on the attacker's address logged in before the attack.
	session := cookie(login("attacker", "op-token"))
	if session == nil {
		t.Fatal("no session cookie")
	}
	if code := login("attacker", "guess-1").StatusCode; code != http.StatusUnauthorized {
		t.Fatalf("wrong token by form: %d, want 401", code)
	}
	for i := 2; i <= fakeBudget; i++ {
		if code, _ := bearer("attacker", fmt.Sprintf("guess-%d", i), nil); code != http.StatusSeeOther {
			t.Fatalf("wrong bearer token %d: %d, want the login form", i, code)
		}
	}
	// Over budget: wrong tokens get 429 with the limiter's Retry-After, by form and by header.
	for i := range 30 {
		if resp := login("attacker", fmt.Sprintf("guess-form-%d", i)); resp.StatusCode != http.StatusTooManyRequests ||
			resp.Header.Get("Retry-After") != "42" || cookie(resp) != nil {
			t.Fatalf("wrong login over budget: %d, Retry-After %q; want 429, 42", resp.StatusCode, resp.Header.Get("Retry-After"))
		}
	}
	if code, hdr := bearer("attacker", "guess-bearer", nil); code != http.StatusTooManyRequests || hdr.Get("Retry-After") != "42" {
		t.Fatalf("wrong bearer over budget: %d, Retry-After %q; want 429, 42", code, hdr.Get("Retry-After"))
	}
	// The right token from that client still works at once, by form and by header.
	if resp := login("attacker", "op-token"); resp.StatusCode != http.StatusSeeOther || cookie(resp) == nil {
		t.Fatalf("right login after 30 wrong ones from the same client: %d, want 303 with the session cookie", resp.StatusCode)
	}
	if code, _ := bearer("attacker", "op-token", nil); code != http.StatusOK {
		t.Fatalf("right bearer token after the wrong ones from the same client: %d, want 200", code)
	}
	// The session from before still works, and is not a token check.
	before := lim.checked()
	if code, _ := bearer("attacker", "", session); code != http.StatusOK {
		t.Fatalf("logged-in operator during the attack: %d, want 200", code)
	}
	if lim.checked() != before {
		t.Fatal("a logged-in browser's request was a token check")
	}
	// Another client is not refused for the attacker's guesses.
	if code, _ := bearer("owner", "op-token", nil); code != http.StatusOK {
		t.Fatalf("the owner's right token during the attack: %d, want 200", code)
	}
	if code := login("owner", "op-token").StatusCode; code != http.StatusSeeOther {
		t.Fatalf("the owner's login during the attack: %d, want 303", code)
	}
	// A check the limiter refused to run is a 429 with its Retry-After, never a pass, whatever the token.
	if resp := login("flooded", "op-token"); resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "7" || cookie(resp) != nil {
		t.Fatalf("login the limiter did not check: %d, Retry-After %q; want 429, 7", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if code, hdr := bearer("flooded", "op-token", nil); code != http.StatusTooManyRequests || hdr.Get("Retry-After") != "7" {
		t.Fatalf("bearer the limiter did not check: %d, Retry-After %q; want 429, 7", code, hdr.Get("Retry-After"))
	}
	// One check per request that carried a token: the login before the attack, the wrong ones within the
	// budget and over it, the right ones after them, the owner's; none for the session or the unchecked.
	if got, want := lim.checked(), 1+fakeBudget+31+2+2; got != want {
		t.Fatalf("%d token checks, want %d (one per request that carried a token)", got, want)
	}
	if _, err := New(&fakeSource{}, Config{Token: "op-token"}); err == nil {
		t.Fatal("a token console without a limiter was accepted")
	}
}
