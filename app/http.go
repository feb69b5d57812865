package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/mediaworker/mediaworker/objstore"
	"github.com/mediaworker/mediaworker/objstore/s3"
	"github.com/mediaworker/mediaworker/pipeline"
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
	mux.HandleFunc("GET /health/ready", a.handleReady)
	mux.HandleFunc("GET /health", a.handleHealth)
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

type check struct {
	Name  string `json:"name"`
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

// readiness runs every dependency check with a short timeout.
func (a *App) readiness(ctx context.Context) []check {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	var out []check
	add := func(name string, err error) {
		c := check{Name: name, OK: err == nil}
		if err != nil {
			c.Error = err.Error()
		}
		out = append(out, c)
	}
	var natsErr error
	if !a.nc.IsConnected() {
		natsErr = errors.New("not connected")
	}
	add("nats", natsErr)
	var consErr error // triage's consumer and those of the lanes served here
	for _, l := range a.worker.Slots() {
		if _, err := a.js.Consumer(ctx, a.cfg.Streams.RequestsStream(), l.Durable); err != nil {
			consErr = fmt.Errorf("consumer %s: %w", l.Durable, err)
			break
		}
	}
	add("consumer", consErr)
	add("object_store", a.checkStore(ctx))
	add("clamd", a.scanner.Ping(ctx))
	add("clamd_signatures", a.sigs.check(ctx))
	add("scratch_disk", a.checkScratch())
	return out
}

func (a *App) checkScratch() error {
	free, err := pipeline.FreeBytes(a.cfg.Pipeline.TmpDir)
	if err != nil {
		return fmt.Errorf("reading the free space of %s: %w; check --tmp-dir (MW_TMP_DIR)", a.cfg.Pipeline.TmpDir, err)
	}
	if free < a.cfg.Pipeline.MinFreeBytes {
		return fmt.Errorf("%s free in %s, below the floor of %s: free space there, point --tmp-dir (MW_TMP_DIR) at a larger disk, or lower --scratch-min-free (MW_SCRATCH_MIN_FREE)",
			objstore.FormatBytes(free), a.cfg.Pipeline.TmpDir, objstore.FormatBytes(a.cfg.Pipeline.MinFreeBytes))
	}
	return nil
}

// readinessKey is the object checkStore looks up in the quarantine bucket: its absence proves the
// credentials may read there.
const readinessKey = ".mediaworker-readiness"

// checkStore pings the object store (readiness and the intake watcher). With S3 it also looks into the
// configured quarantine bucket with the configured credentials, and a failure names the setting to
// change: the credentials when S3 refuses them or what they may do (else every job would retry "Access
// Denied" until it is dead-lettered), the endpoint when S3 does not answer.
func (a *App) checkStore(ctx context.Context) error {
	err := a.store.Ping(ctx)
	if err != nil || a.cfg.Storage != StorageS3 {
		return s3Fix(a.cfg, err)
	}
	if b := a.cfg.Pipeline.QuarantineBucket; b != "" {
		if _, serr := a.store.Stat(ctx, b, readinessKey); serr != nil && !errors.Is(serr, objstore.ErrNotFound) {
			return s3Fix(a.cfg, fmt.Errorf("reading the quarantine bucket %s (--quarantine-bucket, MW_QUARANTINE_BUCKET): %w", b, serr))
		}
	}
	return nil
}

// s3Fix adds to an S3 error which settings to check.
func s3Fix(cfg Config, err error) error {
	if err == nil || cfg.Storage != StorageS3 {
		return err
	}
	if s3.IsCredentialError(err) || cfg.S3.AccessKey == "" {
		return fmt.Errorf("%w; check the S3 credentials --s3-access-key and --s3-secret-key (MW_S3_ACCESS_KEY and MW_S3_SECRET_KEY, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY): the key must exist and may read and write the buckets requests name", err)
	}
	return fmt.Errorf("%w; check --s3-endpoint (MW_S3_ENDPOINT) and --s3-tls (MW_S3_TLS), and that the store is up", err)
}

func (a *App) handleReady(w http.ResponseWriter, r *http.Request) {
	checks := a.readiness(r.Context())
	status, code := "ready", http.StatusOK
	var failing []string
	for _, c := range checks {
		if !c.OK {
			failing = append(failing, c.Name)
		}
	}
	if len(failing) > 0 {
		status, code = "not ready: "+strings.Join(failing, ", "), http.StatusServiceUnavailable
	}
	writeJSON(w, code, map[string]any{"status": status, "checks": checks})
}

func (a *App) handleHealth(w http.ResponseWriter, r *http.Request) {
	// One entry per pool of this instance: triage and each lane it serves, with the lane's consumer
	// (shared by every instance serving it) when NATS answers.
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	jobs := map[string]map[string]any{}
	consumers := map[string]any{}
	for _, l := range a.worker.Slots() {
		jobs[l.Name] = map[string]any{"active": l.Busy(), "max": l.Size}
		if c, err := a.js.Consumer(ctx, a.cfg.Streams.RequestsStream(), l.Durable); err == nil {
			if info, err := c.Info(ctx); err == nil {
				consumers[l.Name] = map[string]any{
					"durable":     l.Durable,
					"pending":     info.NumPending,
					"ackPending":  info.NumAckPending,
					"redelivered": info.NumRedelivered,
				}
			}
		}
	}
	body := map[string]any{
		"status":    "ok",
		"lanes":     a.cfg.Lanes,
		"jobs":      jobs,
		"held":      map[string]int{"active": a.worker.Held(), "max": a.worker.Capacity()},
		"consumers": consumers,
		"clamd":     a.sigs.health(ctx),
		"intake":    a.intake(),
	}
	writeJSON(w, http.StatusOK, body)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// intake says whether the pull loops take work, and if not which dependency holds them back.
func (a *App) intake() map[string]any {
	if a.deps == nil {
		return map[string]any{"paused": false}
	}
	down := a.deps.Down()
	out := map[string]any{"paused": len(down) > 0}
	if len(down) > 0 {
		names := make([]string, 0, len(down))
		for _, c := range down {
			names = append(names, c.Name+": "+c.Error)
		}
		out["down"] = names
	}
	return out
}
