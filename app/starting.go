package app

import (
	"context"
	"errors"
	"fmt"
	"html"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
)

// Start-up can take minutes (clamd loads its database for a minute or two; an external NATS may be
// slow to answer), and until the App exists nothing listens on HTTPAddr: a probe, an operator's curl
// or the console would meet a refused connection and learn nothing. Starting serves HTTPAddr from the
// moment the local checks pass, saying what start-up waits for, and hands its listener to the App,
// which serves the real console and health on it: the port never closes between the two.

// Starting answers HTTP while the worker starts. Build it with ServeStarting; its zero value and nil
// are usable and serve nothing (HTTP disabled).
type Starting struct {
	ln     *net.TCPListener
	srv    *http.Server
	served chan struct{} // closed when srv.Serve has returned
	phase  atomic.Pointer[string]

	handOnce  sync.Once
	closeOnce sync.Once
}

// ServeStarting listens on addr and answers at once: /health/live, /health/ready and /health 503 with
// what start-up is doing, / a page saying the same. Live stays 503 until the App serves: "live" means
// started (connected, streams provisioned), which a startup probe and the test harness wait for; a
// liveness probe is not asked before the startup probe passes.
func ServeStarting(addr string) (*Starting, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, &SettingError{Field: "HTTPAddr", Err: fmt.Errorf("listening on %s: %w", addr, err),
			Fix: "stop what listens there, choose another address, or set it empty to disable HTTP"}
	}
	tcp, ok := ln.(*net.TCPListener)
	if !ok { // net.Listen("tcp") always gives one; refuse rather than hand over something unknown
		_ = ln.Close()
		return nil, fmt.Errorf("listening on %s: not a TCP listener", addr)
	}
	s := &Starting{ln: tcp, served: make(chan struct{})}
	s.Set("starting")
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health/live", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "starting: " + s.Phase(), "starting": s.Phase()})
	})
	notReady := func(w http.ResponseWriter, _ *http.Request) {
		p := s.Phase()
		// The shape of the App's answer, with one failing check: start-up itself.
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "not ready: starting: " + p, "starting": p,
			"checks": []check{{Name: "starting", OK: false, Error: p}}})
	}
	mux.HandleFunc("GET /health/ready", notReady)
	mux.HandleFunc("GET /health", notReady)
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Content-Security-Policy", "default-src 'none'")
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, `<!doctype html><meta charset="utf-8"><meta http-equiv="refresh" content="3">`+
			`<title>mediaworker: starting</title><h1>mediaworker is starting</h1><p>%s</p>`+
			`<p>This page reloads itself; the console appears once start-up is done.</p>`, html.EscapeString(s.Phase()))
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "starting: " + s.Phase()})
	})
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 30 * time.Second, MaxHeaderBytes: 64 << 10}
	go func() {
		defer close(s.served)
		_ = s.srv.Serve(keepOpen{s.ln})
	}()
	return s, nil
}

// Set says what start-up is doing now ("waiting for clamd at tcp://…: connection refused").
func (s *Starting) Set(phase string) {
	if s != nil {
		s.phase.Store(&phase)
	}
}

// Phase is what Set last said.
func (s *Starting) Phase() string {
	if s == nil {
		return ""
	}
	if p := s.phase.Load(); p != nil {
		return *p
	}
	return ""
}

// NewApp builds the App as New does, serving its HTTP on this listener once it runs; until then the
// start-up answers stay. With a nil s it is New.
func (s *Starting) NewApp(ctx context.Context, cfg Config, log zerolog.Logger) (*App, error) {
	return newApp(ctx, cfg, log, s)
}

// handOver stops the start-up answers and returns the listener, still open, for the App to serve.
func (s *Starting) handOver() net.Listener {
	s.handOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.srv.Shutdown(ctx) // closes keepOpen: Accept returns, Serve ends
		<-s.served
		_ = s.ln.SetDeadline(time.Time{})
	})
	return s.ln
}

// Close stops the start-up answers and closes the listener (the App closes it too once it has it). It
// is idempotent and safe on nil.
func (s *Starting) Close() {
	if s == nil {
		return
	}
	s.closeOnce.Do(func() {
		s.handOver()
		_ = s.ln.Close()
	})
}

// keepOpen is the listener as the start-up server sees it: its Close (which Shutdown calls) only
// wakes a waiting Accept, so the socket stays bound for the App and no connection is refused.
type keepOpen struct{ *net.TCPListener }

func (k keepOpen) Close() error {
	if err := k.SetDeadline(time.Unix(1, 0)); err != nil && !errors.Is(err, net.ErrClosed) {
		return err
	}
	return nil
}
