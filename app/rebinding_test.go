package app_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/app"
	"github.com/mediaworker/mediaworker/internal/testenv"
)

// TestConsoleRefusesReboundNames plays a web page that pointed its own name (evil.example) at 127.0.0.1
// (DNS rebinding): the browser then talks to the open console on loopback as "same origin", so it sends
// Host: evil.example:<port> and Origin: http://evil.example:<port>. The console must answer none of it:
// not the page (which carries the CSRF token), not its live part or a dead letter, and it must not purge
// or replay the dead letters even with a valid CSRF token. The operator's own names (127.0.0.1,
// localhost, [::1]) keep working, and a foreign Origin on a loopback Host is refused too. /v1/scan, open
// on loopback, refuses a browser from another origin but still serves a program (no Origin).
func TestConsoleRefusesReboundNames(t *testing.T) {
	clamd := testenv.StartClamd(t)
	w := startWorld(t, app.StorageNATS, clamd, nil)
	addr := w.app.HTTPAddr()
	_, port, _ := net.SplitHostPort(addr)
	base := "http://" + addr
	evil := "evil.example:" + port
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	// do sends a request to the worker's real address, naming host in Host and origin (if any) in Origin.
	do := func(method, path, host, origin, form string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(form))
		req.Host = host
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		if form != "" {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		resp, err := noFollow.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	// One dead letter to protect: a request with no mediaId is dead-lettered at once.
	w.publishRaw([]byte(`{"not": "a request"}`), "rebinding-junk")
	var seq string
	testenv.Eventually(t, 30*time.Second, func() error {
		_, live := get(t, base+"/console/live")
		if m := regexp.MustCompile(`href="/console/dlq/(\d+)"`).FindStringSubmatch(live); m != nil {
			seq = m[1]
			return nil
		}
		return fmt.Errorf("the junk request is not in the dead-letter stream yet")
	})
	_, page := get(t, base+"/")
	csrf := regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`).FindStringSubmatch(page)
	if csrf == nil {
		t.Fatal("the console page carries no CSRF token")
	}
	form := url.Values{"csrf": {csrf[1]}}.Encode()

	// The rebound page: every read and every action is refused, with a message that says why.
	for _, path := range []string{"/", "/console/live", "/console/dlq/" + seq, "/console/assets/console.js"} {
		code, body := do("GET", path, evil, "", "")
		if code != http.StatusMisdirectedRequest || !strings.Contains(body, "evil.example") || !strings.Contains(body, "loopback") {
			t.Errorf("GET %s as Host %s: %d %.200q, want 421 naming the host and the rule", path, evil, code, body)
		}
		if strings.Contains(body, csrf[1]) {
			t.Errorf("GET %s as Host %s leaked the CSRF token", path, evil)
		}
	}
	for _, path := range []string{"/console/dlq/purge", "/console/dlq/" + seq + "/replay", "/console/dlq/" + seq + "/delete"} {
		if code, body := do("POST", path, evil, "http://"+evil, form); code != http.StatusMisdirectedRequest {
			t.Errorf("POST %s as Host %s with a valid CSRF token: %d %.200q, want 421", path, evil, code, body)
		}
	}
	// The same names with other spellings a rebinding page could send.
	for _, host := range []string{"EVIL.example:" + port, "127.0.0.1.evil.example:" + port, "localhost.evil.example:" + port, "0.0.0.0:" + port} {
		if code, _ := do("GET", "/", host, "", ""); code != http.StatusMisdirectedRequest {
			t.Errorf("GET / as Host %q: %d, want 421", host, code)
		}
	}
	// A loopback Host with a foreign Origin: another site's page, not this console's.
	if code, body := do("POST", "/console/dlq/purge", addr, "http://"+evil, form); code != http.StatusForbidden || !strings.Contains(body, "evil.example") {
		t.Errorf("purge with Origin http://%s: %d %.200q, want 403 naming the origin", evil, code, body)
	}
	if code, _ := do("GET", "/console/live", addr, "http://"+evil, ""); code != http.StatusForbidden {
		t.Errorf("GET /console/live with Origin http://%s: %d, want 403", evil, code)
	}

	// Nothing was purged, replayed or deleted: the dead letter is still there, under its sequence.
	if code, body := get(t, base+"/console/dlq/"+seq); code != http.StatusOK || !strings.Contains(body, "a request") {
		t.Fatalf("dead letter %s after the rebound requests: %d, want it still there", seq, code)
	}

	// The operator's own names still work, the page and an action alike.
	for _, host := range []string{addr, "localhost:" + port, "[::1]:" + port, "127.0.0.2:" + port, "LocalHost:" + port} {
		if code, body := do("GET", "/", host, "", ""); code != http.StatusOK || !strings.Contains(body, csrf[1]) {
			t.Errorf("GET / as Host %s: %d, want the page", host, code)
		}
	}
	if code, _ := do("POST", "/console/dlq/"+seq+"/delete", "localhost:"+port, "http://localhost:"+port, form); code != http.StatusSeeOther {
		t.Fatalf("delete from http://localhost:%s: %d, want 303", port, code)
	}
	if code, _ := get(t, base+"/console/dlq/"+seq); code != http.StatusNotFound {
		t.Errorf("dead letter %s after the operator deleted it: %d, want 404", seq, code)
	}

	// /v1/scan without a token: a program (no Origin) is served, a browser on another origin is not.
	scan := func(host, origin string) int {
		req, _ := http.NewRequest("POST", base+"/v1/scan", strings.NewReader("hello"))
		req.Host = host
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := scan(evil, "http://"+evil); code != http.StatusForbidden {
		t.Errorf("POST /v1/scan from the rebound page: %d, want 403", code)
	}
	if code := scan(addr, "https://evil.example"); code != http.StatusForbidden {
		t.Errorf("POST /v1/scan from another site's page: %d, want 403", code)
	}
	if code := scan(addr, ""); code != http.StatusOK {
		t.Errorf("POST /v1/scan from a program: %d, want 200", code)
	}
}
