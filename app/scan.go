package app

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/mediaworker/mediaworker/console"
	"github.com/mediaworker/mediaworker/objstore"
	"github.com/mediaworker/mediaworker/pipeline"
	"github.com/mediaworker/mediaworker/scanner"
	"github.com/mediaworker/mediaworker/slots"
	"github.com/rs/zerolog"
)

// ScanAPIConfig configures POST /v1/scan, the synchronous gate an API can call before it accepts an
// upload. It has its own slots: it never competes with queued jobs for theirs.
type ScanAPIConfig struct {
	Enabled     bool
	Token       string // bearer token; "" means no authentication (keep --http-addr on loopback then)
	MaxBytes    int64  // body cap; 0 means the worker's input cap
	Concurrency int    // scans at once
	QueueWait   time.Duration
	// StallTimeout is the longest a body may send nothing. Bodies are received into the scratch dir
	// before a scan slot is taken, so a slow or stalled upload never holds one.
	StallTimeout time.Duration
}

// DefaultScanAPIConfig: on, two scans at once, callers wait up to 10 s for a slot, a body may stall 10 s.
func DefaultScanAPIConfig() ScanAPIConfig {
	return ScanAPIConfig{Enabled: true, Concurrency: 2, QueueWait: 10 * time.Second, StallTimeout: 10 * time.Second}
}

// receivingPerSlot is how many bodies per scan slot may be received at once: enough that slow
// clients do not keep fast ones from the scanner, bounded so they cannot fill the scratch disk.
const receivingPerSlot = 4

type scanVerdict struct {
	Clean     bool   `json:"clean"`
	Infected  bool   `json:"infected"`
	VirusName string `json:"virusName,omitempty"`
	Bytes     int64  `json:"bytes"`
	Error     string `json:"error,omitempty"`
}

type scanHandler struct {
	cfg       ScanAPIConfig
	tmpDir    string
	minFree   int64 // scratch space bodies may not eat into (jobs need it)
	scanner   *scanner.Scanner
	pool      *slots.Pool // scans
	receiving *slots.Pool // bodies being received
	m         *metrics
	log       zerolog.Logger
}

func newScanHandler(cfg ScanAPIConfig, inputCap int64, tmpDir string, minFree int64, s *scanner.Scanner, m *metrics, log zerolog.Logger) *scanHandler {
	if cfg.MaxBytes <= 0 || cfg.MaxBytes > inputCap {
		cfg.MaxBytes = inputCap
	}
	if cfg.StallTimeout <= 0 {
		cfg.StallTimeout = DefaultScanAPIConfig().StallTimeout
	}
	return &scanHandler{cfg: cfg, tmpDir: tmpDir, minFree: minFree, scanner: s, m: m,
		pool:      slots.NewPool("scan-api", cfg.Concurrency),
		receiving: slots.NewPool("scan-api-receiving", receivingPerSlot*cfg.Concurrency)}
}

// scanGuard decides who may use the scan API, before a byte of the body is read. With a token, the
// bearer token, checked through the client's budget of wrong tokens (wrong, shared with the console;
// see throttle.go): the right one always passes, a guesser is slowed. Without one (allowed on loopback
// only) no browser on another origin: the API is for programs, which send no Origin, and a web page the
// operator visits could otherwise post uploads to it, or, pointing its own name at 127.0.0.1, read the
// verdicts too.
func scanGuard(token string, wrong *throttle, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if token == "" {
			if origin := r.Header.Get("Origin"); origin != "" && !loopbackOrigin(origin) {
				writeJSON(w, http.StatusForbidden, scanVerdict{Error: fmt.Sprintf("refused: a page on %q may not use the scan API "+
					"(it is for programs; a browser's request carries its page's origin)", origin)})
				return
			}
			next.ServeHTTP(w, r)
			return
		}
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="mediaworker"`)
			writeJSON(w, http.StatusUnauthorized, scanVerdict{Error: "missing bearer token (" + operatorTokenSetting + ")"})
			return
		}
		// Within its budget a client's token is checked at once; over it, after the tarpit, one at a time,
		// and a wrong one (or one not checked, with too many waiting) gets 429: see throttle.go.
		ok, retry := wrong.Check(r, func() bool { return subtle.ConstantTimeCompare([]byte(got), []byte(token)) == 1 })
		if !ok && retry > 0 {
			w.Header().Set("Retry-After", retryAfter(retry))
			writeJSON(w, http.StatusTooManyRequests, scanVerdict{Error: fmt.Sprintf("too many wrong tokens from this address: "+
				"its tokens are checked one at a time, a second each, for the next %s s; this one was wrong, "+
				"or not checked because too many were waiting (retry)", retryAfter(retry))})
			return
		}
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="mediaworker"`)
			writeJSON(w, http.StatusUnauthorized, scanVerdict{Error: "wrong bearer token"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// loopbackOrigin reports whether an Origin header names a page served from this machine's loopback.
func loopbackOrigin(origin string) bool {
	u, err := url.Parse(origin)
	return err == nil && console.LoopbackHost(u.Host)
}

func (h *scanHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength < 0 {
		writeJSON(w, http.StatusLengthRequired, scanVerdict{Error: "send Content-Length: clamd is told the exact size up front"})
		return
	}
	if r.ContentLength > h.cfg.MaxBytes {
		writeJSON(w, http.StatusRequestEntityTooLarge, scanVerdict{Bytes: r.ContentLength,
			Error: fmt.Sprintf("body is %s, limit is %s", objstore.FormatBytes(r.ContentLength), objstore.FormatBytes(h.cfg.MaxBytes))})
		return
	}
	body, rerr := h.receive(w, r)
	if rerr != nil {
		if rerr.status == http.StatusTooManyRequests || rerr.status == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", "5")
		}
		if rerr.cause != nil { // the scratch path and the system's words are the operator's, not the caller's
			h.log.Warn().Err(rerr.cause).Msg("scan API: " + rerr.public)
		}
		writeJSON(w, rerr.status, scanVerdict{Error: rerr.public})
		return
	}
	defer body.Close()

	wait, cancel := context.WithTimeout(r.Context(), h.cfg.QueueWait)
	release, err := h.pool.Acquire(wait)
	cancel()
	if err != nil {
		w.Header().Set("Retry-After", "5")
		writeJSON(w, http.StatusTooManyRequests, scanVerdict{Error: "all scan slots are busy; retry later"})
		return
	}
	defer release()

	v, err := h.scanner.Scan(r.Context(), body, r.ContentLength)
	switch {
	case err == nil:
	case scanner.IsRefused(err):
		h.m.scanned("refused")
		h.log.Info().Err(err).Msg("scan API: clamd refused the body under its limits")
		writeJSON(w, http.StatusUnprocessableEntity, scanVerdict{Bytes: r.ContentLength, Error: pipeline.PublicMessage(err)})
		return
	case scanner.IsUnavailable(err) || errors.Is(err, context.DeadlineExceeded):
		h.m.scanned("error")
		w.Header().Set("Retry-After", "10")
		// The caller hears what failed, in words; clamd's address and the error chain go to the log.
		h.log.Warn().Err(err).Msg("scan API: clamd unavailable")
		writeJSON(w, http.StatusServiceUnavailable, scanVerdict{Error: pipeline.PublicMessage(err)})
		return
	default:
		// A short body, a protocol surprise: never clean.
		h.m.scanned("error")
		h.log.Warn().Err(err).Msg("scan API: scanning failed")
		writeJSON(w, http.StatusBadGateway, scanVerdict{Error: pipeline.PublicMessage(err)})
		return
	}
	if v.Infected {
		h.m.scanned("infected")
		writeJSON(w, http.StatusOK, scanVerdict{Infected: true, VirusName: v.Signature, Bytes: r.ContentLength})
		return
	}
	h.m.scanned("clean")
	writeJSON(w, http.StatusOK, scanVerdict{Clean: true, Bytes: r.ContentLength})
}

// receive copies the body into an unlinked file in the scratch dir (gone when closed, even after a
// crash) and returns it rewound. The body must keep moving: a read that waits longer than StallTimeout
// fails the request with 408. A failure carries the HTTP status and the sentence to answer with, set here
// where it is made; its cause (a scratch path, the system's words) is only logged.
func (h *scanHandler) receive(w http.ResponseWriter, r *http.Request) (*os.File, *receiveError) {
	release, ok := h.receiving.TryAcquire()
	if !ok {
		return nil, &receiveError{status: http.StatusTooManyRequests, public: "too many uploads in progress; retry later"}
	}
	defer release()
	if free, err := pipeline.FreeBytes(h.tmpDir); err == nil && free-r.ContentLength < h.minFree {
		return nil, &receiveError{status: http.StatusServiceUnavailable, public: fmt.Sprintf("scratch space is low (%s free, %s kept for jobs); retry later",
			objstore.FormatBytes(free), objstore.FormatBytes(h.minFree))}
	}
	f, err := os.CreateTemp(h.tmpDir, "mw-scan-*")
	if err != nil {
		return nil, &receiveError{http.StatusInternalServerError, "the worker could not store the body to scan it", fmt.Errorf("creating a scratch file: %w", err)}
	}
	_ = os.Remove(f.Name())
	fail := func(status int, public string, cause error) (*os.File, *receiveError) {
		f.Close()
		return nil, &receiveError{status, public, cause}
	}
	rc := http.NewResponseController(w)
	body := http.MaxBytesReader(w, r.Body, r.ContentLength)
	buf := make([]byte, 64<<10)
	var n int64
	for {
		_ = rc.SetReadDeadline(time.Now().Add(h.cfg.StallTimeout))
		k, rerr := body.Read(buf)
		if k > 0 {
			if _, err := f.Write(buf[:k]); err != nil {
				return fail(http.StatusInsufficientStorage, "the worker could not store the body to scan it", fmt.Errorf("writing the body to the scratch dir: %w", err))
			}
			n += int64(k)
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			var ne net.Error
			if errors.As(rerr, &ne) && ne.Timeout() {
				return fail(http.StatusRequestTimeout, fmt.Sprintf("the body stalled: nothing arrived for %s", h.cfg.StallTimeout), nil)
			}
			return fail(http.StatusBadRequest, "the body could not be read to its end", fmt.Errorf("reading the body: %w", rerr))
		}
	}
	_ = rc.SetReadDeadline(time.Time{})
	if n != r.ContentLength {
		return fail(http.StatusBadRequest, fmt.Sprintf("body ended after %d of the %d bytes of Content-Length", n, r.ContentLength), nil)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return fail(http.StatusInternalServerError, "the worker could not store the body to scan it", fmt.Errorf("rewinding the scratch file: %w", err))
	}
	return f, nil
}

// receiveError is a body that could not be taken: the status and sentence the caller gets, and the
// cause only the log sees.
type receiveError struct {
	status int
	public string
	cause  error
}
