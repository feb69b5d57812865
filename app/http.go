package app

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

const objectsPath = "/objects"

func (a *App) listenHTTP() error {
	if a.starting != nil {
		// Bound since start-up began (it answers there until Run): the same socket, never refused.
		a.httpLn = a.starting.ln
	} else {
		ln, err := net.Listen("tcp", a.cfg.HTTPAddr)
		if err != nil {
			return fmt.Errorf("listening for http on %s (HTTPAddr; is the port in use?): %w", a.cfg.HTTPAddr, err)
		}
		a.httpLn = ln
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health/live", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	// a.health is made once every part it reports on is (after the listener): look it up per request.
	mux.HandleFunc("GET /health/ready", func(w http.ResponseWriter, r *http.Request) { a.health.handleReady(w, r) })
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { a.health.handleHealth(w, r) })
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.metrics.reg, promhttp.HandlerOpts{}))
	// One budget of wrong operator tokens per client address, for the scan API and the console together.
	wrong := newThrottle()
	if a.cfg.ScanAPI.Enabled {
		// a.scan is made after the listener (it needs the scanner): look it up per request.
		mux.Handle("POST /v1/scan", scanGuard(a.cfg.ScanAPI.Token, wrong,
			http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { a.scan.ServeHTTP(w, r) })))
	}
	// /health, /metrics and /objects answer any Host: probes and scrapers name the worker however they
	// reach it, none of them holds a credential or changes anything, and /objects serves only variants,
	// which are public by design (any page may embed them).
	if a.servesObjects() {
		mux.HandleFunc("GET "+objectsPath+"/{bucket}/{key...}", a.handleObject)
	}
	mux.Handle("/", a.consoleHandler(wrong))
	// No ReadTimeout or WriteTimeout: they bound a whole request or response, which would cut a large
	// /v1/scan upload or MP4 download on a slow link. Those handlers set per-read and per-write
	// deadlines instead (a stall fails, a slow but moving transfer does not).
	a.http = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10}
	return nil
}

// servesObjects says whether /objects serves variants: always with the NATS object store (nothing else
// could), and with S3 when URLs are signed, so a private bucket's variants reach a browser through the
// worker (--public-base-url http://<worker>/objects/<bucket>) only by URLs the worker minted.
func (a *App) servesObjects() bool {
	return a.cfg.ServeObjects && (a.cfg.Storage == StorageNATS || a.cfg.Storage == StorageS3 && a.cfg.URLSigning.Key != "")
}

// publicHTTPBase is the base URL of this server as a client on this machine reaches it.
func (a *App) publicHTTPBase() string {
	host, port, _ := net.SplitHostPort(a.httpLn.Addr().String())
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
