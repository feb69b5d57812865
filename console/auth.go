package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"net/http"
	"net/url"
	"strings"
)

// sessionCookie holds proof of the token, never the token itself.
const sessionCookie = "mw_console"

// auth decides who may see the console and guards its actions against cross-site requests.
type auth struct {
	token   string
	open    bool
	setting string
	// secret signs the CSRF token: random per process, so a page on another site cannot know it (it
	// cannot read ours), and a restart invalidates forms rendered before it.
	secret []byte
	wrong  Limiter
}

func newAuth(cfg Config) (*auth, error) {
	a := &auth{token: cfg.Token, open: cfg.Open, setting: cfg.TokenSetting, secret: make([]byte, 32), wrong: cfg.Limiter}
	if _, err := rand.Read(a.secret); err != nil {
		return nil, err
	}
	return a, nil
}

func mac(key []byte, msg string) string {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(msg))
	return hex.EncodeToString(h.Sum(nil))
}

// session is the cookie value the login form sets: derived from the token, so it changes with it.
func (a *auth) session() string { return mac([]byte(a.token), "mediaworker console session") }

func (a *auth) csrf() string { return mac(a.secret, "mediaworker console csrf") }

func equal(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

// bearer reports whether r carries the token in its Authorization header.
func (a *auth) bearer(r *http.Request) bool {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && a.token != "" && equal(got, a.token)
}

// loggedIn reports whether r carries the login cookie. It is checked even while r's address is
// throttled for wrong tokens: it is a 256-bit value, not something to guess, so an attack from the
// operator's own address (one NAT, one proxy) does not lock out a browser that is logged in.
func (a *auth) loggedIn(r *http.Request) bool {
	if a.token == "" {
		return false
	}
	c, err := r.Cookie(sessionCookie)
	return err == nil && equal(c.Value, a.session())
}

// errCrossSite is why an action was refused.
var errCrossSite = errors.New("refused: the form did not come from this console (reload the page and try again)")

// checkAction guards a POST. A request with the bearer header is a script, not a browser a foreign page
// could drive, so it needs no CSRF token; anything else needs the token of a form this console rendered
// and, when the browser says where it comes from, to come from this origin.
func (a *auth) checkAction(r *http.Request) error {
	if a.bearer(r) {
		return nil
	}
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return errCrossSite
	}
	if origin := r.Header.Get("Origin"); origin != "" && !sameOrigin(origin, r.Host) {
		return errCrossSite
	}
	if !equal(r.PostFormValue("csrf"), a.csrf()) {
		return errCrossSite
	}
	return nil
}

// setSession sets the login cookie: HttpOnly (no script reads it), SameSite=Strict (no other site's
// page sends it), Secure when the console is reached over TLS.
func (a *auth) setSession(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: a.session(), Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
}

func clearSession(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
}

// sameOrigin reports whether an Origin header names the host the request was sent to.
func sameOrigin(origin, host string) bool {
	u, err := url.Parse(origin)
	return err == nil && u.Host != "" && u.Host == host
}
