package console

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"math"
	"net/http"
	"strconv"
	"time"
)

//go:embed assets templates
var files embed.FS

// actionTimeout bounds one page's reads or one action.
const actionTimeout = 5 * time.Second

// Handler serves the console. Mount it at "/": it answers the root, its own paths under /console/, and
// 404 for anything else.
type Handler struct {
	src     Source
	cfg     Config
	auth    *auth
	tmpl    *template.Template
	mux     *http.ServeMux
	refresh time.Duration
}

// New returns the console for src.
func New(src Source, cfg Config) (*Handler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if src == nil {
		return nil, errors.New("console: no source")
	}
	a, err := newAuth(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating console secret: %w", err)
	}
	tmpl, err := template.New("").Funcs(funcs).ParseFS(files, "templates/*.html")
	if err != nil {
		return nil, fmt.Errorf("parsing console templates: %w", err)
	}
	h := &Handler{src: src, cfg: cfg, auth: a, tmpl: tmpl, refresh: cfg.Refresh}
	if h.refresh == 0 {
		h.refresh = 3 * time.Second
	}
	assets, _ := fs.Sub(files, "assets")
	mux := http.NewServeMux()
	mux.Handle("GET /console/assets/", http.StripPrefix("/console/assets/", http.FileServerFS(assets)))
	mux.HandleFunc("GET /console/login", h.loginForm)
	mux.HandleFunc("POST /console/login", h.login)
	mux.HandleFunc("POST /console/logout", h.logout)
	mux.HandleFunc("GET /{$}", h.guard(h.page))
	mux.HandleFunc("GET /console/live", h.guard(h.live))
	mux.HandleFunc("GET /console/dlq/{seq}", h.guard(h.deadLetter))
	mux.HandleFunc("POST /console/dlq/{seq}/replay", h.guard(h.action(h.replay)))
	mux.HandleFunc("POST /console/dlq/{seq}/delete", h.guard(h.action(h.delete)))
	mux.HandleFunc("POST /console/dlq/purge", h.guard(h.action(h.purge)))
	h.mux = mux
	return h, nil
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	// Images may come from wherever the responses' URLs point (an S3, a CDN, this server's /objects),
	// and data: carries the previews' placeholders, PNGs the console draws from their ThumbHashes;
	// nothing else leaves this origin, and no other site may frame the page.
	hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' http: https: data:; "+
		"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("Cache-Control", "no-store")
	if h.auth.open {
		if no := checkNames(r); no != nil {
			http.Error(w, no.msg, no.code)
			return
		}
	}
	h.mux.ServeHTTP(w, r)
}

// guard lets through only who may see the console; a browser is sent to the login form.
func (h *Handler) guard(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if h.auth.open || h.auth.loggedIn(r) {
			next(w, r)
			return
		}
		if h.auth.token != "" && r.Header.Get("Authorization") != "" {
			// The right token always passes; a client over its budget of wrong ones is slowed, and its
			// wrong ones (or those not checked) answered 429.
			ok, retry := h.auth.wrong.Check(r, func() bool { return h.auth.bearer(r) })
			if ok {
				next(w, r)
				return
			}
			if retry > 0 {
				tooManyWrong(w, retry)
				return
			}
		}
		if h.auth.token == "" {
			msg := fmt.Sprintf("The console listens beyond loopback and no operator token is set: set %s (then log in with it), or listen on 127.0.0.1.", h.cfg.TokenSetting)
			http.Error(w, msg, http.StatusForbidden)
			return
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="mediaworker"`)
		if r.Method == http.MethodGet && r.URL.Path == "/" {
			http.Redirect(w, r, "/console/login", http.StatusSeeOther)
			return
		}
		http.Error(w, "missing or wrong operator token: log in at /console/login or send Authorization: Bearer <token>", http.StatusUnauthorized)
	}
}

// tooManyWrong answers a token check from an address over its budget of wrong tokens whose token was
// wrong, or not checked because too many of its checks were waiting.
func tooManyWrong(w http.ResponseWriter, retry time.Duration) {
	secs := int(math.Ceil(retry.Seconds()))
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	http.Error(w, fmt.Sprintf("too many wrong operator tokens from your address: its tokens are checked one at a time, "+
		"a second each, for the next %d s; this one was wrong, or not checked because too many were waiting (retry; "+
		"the right token works, and a browser already logged in keeps working)", secs), http.StatusTooManyRequests)
}

// action checks a POST's origin and CSRF token before it runs.
func (h *Handler) action(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := h.auth.checkAction(r); err != nil {
			http.Error(w, err.Error(), http.StatusForbidden)
			return
		}
		next(w, r)
	}
}

// view is what the templates see.
type view struct {
	Snap      Snapshot
	Chart     chart
	CSRF      string
	RefreshMS int64
	Now       time.Time
	Flash     string
	FlashBad  bool
	LoggedIn  bool // through the cookie: show "log out"
	Dead      DeadLetter
	Error     string
	Sum       summary
}

// summary is the strip at the top: the state of things in one line, for a phone's first screen.
type summary struct {
	State      State
	Attention  []string // dependencies not OK
	Pending    uint64
	InFlight   int
	LastHour   int
	DeadLetter int
}

func summarize(s Snapshot, c chart) summary {
	sum := summary{State: overall(s.Dependencies), LastHour: c.Sum, DeadLetter: s.DeadLetters}
	for _, d := range s.Dependencies {
		if d.State != OK {
			sum.Attention = append(sum.Attention, d.Name)
		}
	}
	for _, q := range s.Queues {
		sum.Pending += q.Pending
		sum.InFlight += q.AckPending
	}
	return sum
}

func (h *Handler) view(r *http.Request) view {
	ctx, cancel := context.WithTimeout(r.Context(), actionTimeout)
	defer cancel()
	snap := h.src.Snapshot(ctx)
	now := time.Now()
	v := view{Snap: snap, CSRF: h.auth.csrf(), RefreshMS: h.refresh.Milliseconds(), Now: now}
	if snap.Throughput != nil {
		v.Chart = buildChart(snap.Throughput.Series(now))
	} else {
		v.Chart = buildChart((&Ring{}).Series(now))
	}
	v.Sum = summarize(snap, v.Chart)
	_, err := r.Cookie(sessionCookie)
	v.LoggedIn = err == nil && !h.auth.open
	v.Flash, v.FlashBad = flash(r)
	return v
}

func (h *Handler) render(w http.ResponseWriter, code int, name string, v any) {
	// Render to a buffer first: a template error must not leave half a page that looks complete.
	var buf bytes.Buffer
	if err := h.tmpl.ExecuteTemplate(&buf, name, v); err != nil {
		http.Error(w, "rendering the console failed: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_, _ = buf.WriteTo(w)
}

func (h *Handler) page(w http.ResponseWriter, r *http.Request) {
	h.render(w, http.StatusOK, "page.html", h.view(r))
}

// live is the part of the page the script replaces on every refresh.
func (h *Handler) live(w http.ResponseWriter, r *http.Request) {
	h.render(w, http.StatusOK, "live", h.view(r))
}

func (h *Handler) loginForm(w http.ResponseWriter, r *http.Request) {
	if h.auth.open {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	h.render(w, http.StatusOK, "login.html", view{})
}

func (h *Handler) login(w http.ResponseWriter, r *http.Request) {
	if h.auth.token == "" {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	if origin := r.Header.Get("Origin"); origin != "" && !sameOrigin(origin, r.Host) {
		http.Error(w, errCrossSite.Error(), http.StatusForbidden)
		return
	}
	// The form is read before the check, so a slow body never holds the client's turn in the tarpit.
	got := r.PostFormValue("token")
	ok, retry := h.auth.wrong.Check(r, func() bool { return equal(got, h.auth.token) })
	if !ok && retry > 0 {
		tooManyWrong(w, retry)
		return
	}
	if !ok {
		h.render(w, http.StatusUnauthorized, "login.html", view{Error: "That is not the operator token (" + h.cfg.TokenSetting + ")."})
		return
	}
	h.auth.setSession(w, r)
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

func (h *Handler) logout(w http.ResponseWriter, r *http.Request) {
	clearSession(w, r)
	http.Redirect(w, r, "/console/login", http.StatusSeeOther)
}

func (h *Handler) deadLetter(w http.ResponseWriter, r *http.Request) {
	seq, err := strconv.ParseUint(r.PathValue("seq"), 10, 64)
	if err != nil {
		http.Error(w, "dead letter sequence must be a number", http.StatusBadRequest)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), actionTimeout)
	defer cancel()
	dl, err := h.src.DeadLetter(ctx, seq)
	code := http.StatusOK
	v := view{CSRF: h.auth.csrf(), Now: time.Now(), Dead: dl}
	switch {
	case errors.Is(err, ErrNotFound):
		code, v.Error = http.StatusNotFound, fmt.Sprintf("Dead letter %d is not there (replayed or purged already?).", seq)
	case err != nil:
		code, v.Error = http.StatusServiceUnavailable, "Reading dead letter: "+err.Error()
	}
	h.render(w, code, "deadletter.html", v)
}

func (h *Handler) replay(w http.ResponseWriter, r *http.Request) {
	h.onSeq(w, r, "replayed", h.src.Replay)
}

func (h *Handler) delete(w http.ResponseWriter, r *http.Request) {
	h.onSeq(w, r, "deleted", h.src.Delete)
}

func (h *Handler) onSeq(w http.ResponseWriter, r *http.Request, done string, do func(context.Context, uint64) error) {
	seq, err := strconv.ParseUint(r.PathValue("seq"), 10, 64)
	if err != nil {
		http.Error(w, "dead letter sequence must be a number", http.StatusBadRequest)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), actionTimeout)
	defer cancel()
	if err := do(ctx, seq); err != nil {
		code := "failed"
		if errors.Is(err, ErrNotFound) {
			code = "missing"
		}
		redirectFlash(w, r, code, seq, 0)
		return
	}
	redirectFlash(w, r, done, seq, 0)
}

func (h *Handler) purge(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), actionTimeout)
	defer cancel()
	n, err := h.src.Purge(ctx)
	if err != nil {
		redirectFlash(w, r, "purge-failed", 0, 0)
		return
	}
	redirectFlash(w, r, "purged", 0, n)
}

// redirectFlash sends the browser back to the page with a fixed message code: the page never echoes
// text from the query string.
func redirectFlash(w http.ResponseWriter, r *http.Request, code string, seq, n uint64) {
	http.Redirect(w, r, fmt.Sprintf("/?done=%s&seq=%d&n=%d#dlq", code, seq, n), http.StatusSeeOther)
}

func flash(r *http.Request) (string, bool) {
	q := r.URL.Query()
	seq, _ := strconv.ParseUint(q.Get("seq"), 10, 64)
	n, _ := strconv.ParseUint(q.Get("n"), 10, 64)
	switch q.Get("done") {
	case "replayed":
		return fmt.Sprintf("Dead letter %d was published to the request subject again.", seq), false
	case "deleted":
		return fmt.Sprintf("Dead letter %d was deleted.", seq), false
	case "purged":
		return fmt.Sprintf("The dead-letter stream was purged (%d entries).", n), false
	case "failed":
		return fmt.Sprintf("Dead letter %d: the action failed (is NATS reachable? see the log).", seq), true
	case "missing":
		return fmt.Sprintf("Dead letter %d is not there any more (replayed or purged already?).", seq), true
	case "purge-failed":
		return "Purging the dead-letter stream failed (is NATS reachable? see the log).", true
	}
	return "", false
}
