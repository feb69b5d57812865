package app_test

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/app"
	"github.com/mediaworker/mediaworker/internal/testenv"
)

// clientFrom is an HTTP client whose connections leave from ip, a loopback address (Linux routes all of
// 127.0.0.0/8 to lo), so the worker sees a different client address per client. It follows no redirects,
// and gives up on a request after 30 s.
func clientFrom(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	return &http.Client{
		Transport:     &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 32},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Timeout:       30 * time.Second,
	}
}

// tokenWorld is a worker with an operator token and helpers to send it tokens.
type tokenWorld struct {
	t    *testing.T
	base string
}

const throttleToken = "operator-token-of-the-throttle-test"

func startTokenWorld(t *testing.T) *tokenWorld {
	clamd := testenv.StartClamd(t)
	w := startWorld(t, app.StorageNATS, clamd, func(c *app.Config) { c.ScanAPI.Token = throttleToken })
	return &tokenWorld{t: t, base: "http://" + w.app.HTTPAddr()}
}

// do sends one request: a bearer token (or none), a cookie (or none), a form (or the body "hello").
func (tw *tokenWorld) do(c *http.Client, method, path, bearer string, cookie *http.Cookie, form url.Values) *http.Response {
	tw.t.Helper()
	body := "hello"
	if form != nil {
		body = form.Encode()
	}
	req, _ := http.NewRequest(method, tw.base+path, strings.NewReader(body))
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
		tw.t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// login posts tok to the console's login form: its status and the session cookie it set, if any.
func (tw *tokenWorld) login(c *http.Client, tok string) (int, *http.Cookie) {
	tw.t.Helper()
	resp := tw.do(c, "POST", "/console/login", "", nil, url.Values{"token": {tok}})
	for _, ck := range resp.Cookies() {
		if ck.Name == "mw_console" && ck.Value != "" {
			return resp.StatusCode, ck
		}
	}
	return resp.StatusCode, nil
}

// guess sends n wrong tokens from c, workers at a time, each by send (which returns the response), and
// counts the answers: 401 (checked within the budget) and 429 (with a Retry-After of 1–60 s). Any other
// answer fails the test.
func (tw *tokenWorld) guess(n, workers int, send func(i int) *http.Response) (unauthorized, throttled int) {
	tw.t.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	next := 0
	var bad []string
	for range workers {
		wg.Go(func() {
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= n {
					return
				}
				resp := send(i)
				mu.Lock()
				switch s, err := strconv.Atoi(resp.Header.Get("Retry-After")); {
				case resp.StatusCode == http.StatusUnauthorized:
					unauthorized++
				case resp.StatusCode == http.StatusTooManyRequests && err == nil && s >= 1 && s <= 60:
					throttled++
				default:
					bad = append(bad, fmt.Sprintf("guess %d: %d, Retry-After %q; want 401, or 429 with 1–60 s", i, resp.StatusCode, resp.Header.Get("Retry-After")))
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(bad) > 0 {
		tw.t.Fatalf("%d of %d guesses answered otherwise: %s", len(bad), n, bad[0])
	}
	return unauthorized, throttled
}

// TestWrongTokensAreThrottledPerAddress: an address that guesses the operator token gets 10 wrong ones
// checked (401), then 429 with Retry-After, on /v1/scan and the console alike (one budget for both),
// however many it sends at once; the right token from that address still works, on both surfaces;
// another address is never refused (its right token works, its own typo is a 401, not a 429), and a
// browser that logged in before the attack keeps working even from the attacker's address.
func TestWrongTokensAreThrottledPerAddress(t *testing.T) {
	tw := startTokenWorld(t)
	attacker, owner := clientFrom("127.0.0.2"), clientFrom("127.0.0.1")

	// A colleague on the attacker's address (one office NAT) logged in to the console before the attack.
	code, session := tw.login(attacker, throttleToken)
	if code != http.StatusSeeOther || session == nil {
		t.Fatalf("login before the attack: %d, cookie %v", code, session)
	}

	// The attack: 200 wrong tokens, 20 at a time. Exactly 10 are checked within the budget (401); the
	// rest get 429, checked one at a time a second each, or not checked with too many waiting.
	unauthorized, throttled := tw.guess(200, 20, func(i int) *http.Response {
		return tw.do(attacker, "POST", "/v1/scan", "guess-"+strconv.Itoa(i), nil, nil)
	})
	if unauthorized != 10 || throttled != 190 {
		t.Fatalf("200 wrong tokens: %d answered 401, %d 429; want 10 and 190", unauthorized, throttled)
	}

	// The console shares the budget: the attacker gets no fresh one there, by header or by login form.
	if r := tw.do(attacker, "GET", "/console/live", "guess-console", nil, nil); r.StatusCode != http.StatusTooManyRequests || r.Header.Get("Retry-After") == "" {
		t.Errorf("console bearer guess from the throttled address: %d, want 429 with Retry-After", r.StatusCode)
	}
	if code, ck := tw.login(attacker, "guess-login"); code != http.StatusTooManyRequests || ck != nil {
		t.Errorf("console login guess from the throttled address: %d, want 429", code)
	}
	// The right token works from the throttled address too, on both surfaces.
	if r := tw.do(attacker, "POST", "/v1/scan", throttleToken, nil, nil); r.StatusCode != http.StatusOK {
		t.Errorf("right token on /v1/scan from the throttled address: %d, want 200", r.StatusCode)
	}
	if r := tw.do(attacker, "GET", "/console/live", throttleToken, nil, nil); r.StatusCode != http.StatusOK {
		t.Errorf("right bearer token on the console from the throttled address: %d, want 200", r.StatusCode)
	}
	if code, ck := tw.login(attacker, throttleToken); code != http.StatusSeeOther || ck == nil {
		t.Errorf("console login with the right token from the throttled address: %d, want 303 with the session cookie", code)
	}
	// The colleague's session, from that same address, is not a token check: it keeps working.
	if r := tw.do(attacker, "GET", "/console/live", "", session, nil); r.StatusCode != http.StatusOK {
		t.Errorf("logged-in browser on the throttled address: %d, want 200", r.StatusCode)
	}

	// The owner, on another address, is never refused for the attacker's guesses.
	if r := tw.do(owner, "POST", "/v1/scan", throttleToken, nil, nil); r.StatusCode != http.StatusOK {
		t.Errorf("owner's /v1/scan with the right token during the attack: %d, want 200", r.StatusCode)
	}
	if r := tw.do(owner, "GET", "/console/live", throttleToken, nil, nil); r.StatusCode != http.StatusOK {
		t.Errorf("owner's console with the right bearer token during the attack: %d, want 200", r.StatusCode)
	}
	if code, ck := tw.login(owner, throttleToken); code != http.StatusSeeOther || ck == nil {
		t.Errorf("owner's console login during the attack: %d, want 303 with the session cookie", code)
	}
	if r := tw.do(owner, "POST", "/v1/scan", "owner-typo", nil, nil); r.StatusCode != http.StatusUnauthorized {
		t.Errorf("owner's own typo during the attack: %d, want 401 (the owner's budget is untouched)", r.StatusCode)
	}
}

// TestRightTokenWorksAfterGuessesFromTheSameAddress: the guesser and the owner are one address
// (127.0.0.1, as on a single host): after 30 wrong tokens on /v1/scan the right one is answered 200 (not
// 429), within a few seconds; after 30 more by the console's login form (the same budget, long used up),
// the right token logs in.
func TestRightTokenWorksAfterGuessesFromTheSameAddress(t *testing.T) {
	tw := startTokenWorld(t)
	c := clientFrom("127.0.0.1")

	unauthorized, throttled := tw.guess(30, 6, func(i int) *http.Response {
		return tw.do(c, "POST", "/v1/scan", "guess-"+strconv.Itoa(i), nil, nil)
	})
	if unauthorized != 10 || throttled != 20 {
		t.Fatalf("30 wrong tokens on /v1/scan: %d answered 401, %d 429; want 10 and 20", unauthorized, throttled)
	}
	start := time.Now()
	if r := tw.do(c, "POST", "/v1/scan", throttleToken, nil, nil); r.StatusCode != http.StatusOK {
		t.Fatalf("the right token after 30 wrong ones from the same address: %d, want 200", r.StatusCode)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the right token took %s", d)
	}

	_, throttled = tw.guess(30, 6, func(i int) *http.Response {
		return tw.do(c, "POST", "/console/login", "", nil, url.Values{"token": {"guess-login-" + strconv.Itoa(i)}})
	})
	if throttled != 30 {
		t.Fatalf("30 wrong logins from an address over its budget: %d answered 429, want all", throttled)
	}
	start = time.Now()
	code, session := tw.login(c, throttleToken)
	if code != http.StatusSeeOther || session == nil {
		t.Fatalf("console login with the right token after 60 wrong ones from the same address: %d, want 303 with the session cookie", code)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the right login took %s", d)
	}
	if r := tw.do(c, "GET", "/console/live", "", session, nil); r.StatusCode != http.StatusOK {
		t.Errorf("the console with the session just set: %d, want 200", r.StatusCode)
	}
}
