package app

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/mediaworker/mediaworker/objstore"
	"github.com/mediaworker/mediaworker/scanner"
	"github.com/mediaworker/mediaworker/slots"
)

// ScanAPIConfig configures POST /v1/scan, the synchronous gate an API can call before it accepts an
// upload. It has its own slots: it never competes with queued jobs for theirs.
type ScanAPIConfig struct {
	Enabled     bool
	Token       string // bearer token; "" means no authentication (keep --http-addr on loopback then)
	MaxBytes    int64  // body cap; 0 means the worker's input cap
	Concurrency int    // scans at once
	QueueWait   time.Duration
}

// DefaultScanAPIConfig: on, two scans at once, callers wait up to 10 s for a slot.
func DefaultScanAPIConfig() ScanAPIConfig {
	return ScanAPIConfig{Enabled: true, Concurrency: 2, QueueWait: 10 * time.Second}
}

type scanVerdict struct {
	Clean     bool   `json:"clean"`
	Infected  bool   `json:"infected"`
	VirusName string `json:"virusName,omitempty"`
	Bytes     int64  `json:"bytes"`
	Error     string `json:"error,omitempty"`
}

type scanHandler struct {
	cfg     ScanAPIConfig
	scanner *scanner.Scanner
	pool    *slots.Pool
	m       *metrics
}

func newScanHandler(cfg ScanAPIConfig, inputCap int64, s *scanner.Scanner, m *metrics) *scanHandler {
	if cfg.MaxBytes <= 0 || cfg.MaxBytes > inputCap {
		cfg.MaxBytes = inputCap
	}
	return &scanHandler{cfg: cfg, scanner: s, pool: slots.NewPool("scan-api", cfg.Concurrency), m: m}
}

func (h *scanHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.cfg.Token != "" {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(h.cfg.Token)) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="mediaworker"`)
			writeJSON(w, http.StatusUnauthorized, scanVerdict{Error: "missing or wrong bearer token"})
			return
		}
	}
	if r.ContentLength < 0 {
		writeJSON(w, http.StatusLengthRequired, scanVerdict{Error: "send Content-Length: clamd is told the exact size up front"})
		return
	}
	if r.ContentLength > h.cfg.MaxBytes {
		writeJSON(w, http.StatusRequestEntityTooLarge, scanVerdict{Bytes: r.ContentLength,
			Error: fmt.Sprintf("body is %s, limit is %s", objstore.FormatBytes(r.ContentLength), objstore.FormatBytes(h.cfg.MaxBytes))})
		return
	}
	wait, cancel := context.WithTimeout(r.Context(), h.cfg.QueueWait)
	release, err := h.pool.Acquire(wait)
	cancel()
	if err != nil {
		w.Header().Set("Retry-After", "5")
		writeJSON(w, http.StatusTooManyRequests, scanVerdict{Error: "all scan slots are busy; retry later"})
		return
	}
	defer release()

	body := http.MaxBytesReader(w, r.Body, r.ContentLength)
	v, err := h.scanner.Scan(r.Context(), body, r.ContentLength)
	switch {
	case err == nil:
	case scanner.IsRefused(err):
		h.m.scanned("refused")
		writeJSON(w, http.StatusUnprocessableEntity, scanVerdict{Bytes: r.ContentLength, Error: err.Error()})
		return
	case scanner.IsUnavailable(err) || errors.Is(err, context.DeadlineExceeded):
		h.m.scanned("error")
		w.Header().Set("Retry-After", "10")
		writeJSON(w, http.StatusServiceUnavailable, scanVerdict{Error: "clamd unavailable: " + err.Error()})
		return
	default:
		// A short body, a protocol surprise: never clean.
		h.m.scanned("error")
		writeJSON(w, http.StatusBadGateway, scanVerdict{Error: err.Error()})
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
