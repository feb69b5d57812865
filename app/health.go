package app

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	natsjs "github.com/mediaworker/mediaworker/jetstream"
	"github.com/mediaworker/mediaworker/objstore"
	"github.com/mediaworker/mediaworker/objstore/s3"
	"github.com/mediaworker/mediaworker/pipeline"
	"github.com/mediaworker/mediaworker/scanner"
)

// Health and readiness: /health/ready runs every dependency check (checkStore and checkScratch are
// also the intake watcher's probes, deps.go), /health reports the pools and what holds intake back.

// health answers /health and /health/ready from the parts of a built App.
type health struct {
	cfg     Config
	nc      *nats.Conn
	js      jetstream.JetStream
	store   objstore.Store
	scanner *scanner.Scanner
	sigs    *signatureWatch
	deps    *Deps // nil: no watcher, intake never paused
	worker  *natsjs.Worker
}

type check struct {
	Name  string `json:"name"`
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

// readiness runs every dependency check with a short timeout.
func (h *health) readiness(ctx context.Context) []check {
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
	if !h.nc.IsConnected() {
		natsErr = errors.New("not connected")
	}
	add("nats", natsErr)
	var consErr error // triage's consumer and those of the lanes served here
	for _, l := range h.worker.Slots() {
		if _, err := h.js.Consumer(ctx, h.cfg.Streams.RequestsStream(), l.Durable); err != nil {
			consErr = fmt.Errorf("consumer %s: %w", l.Durable, err)
			break
		}
	}
	add("consumer", consErr)
	add("object_store", checkStore(ctx, h.cfg, h.store))
	add("clamd", h.scanner.Ping(ctx))
	add("clamd_signatures", h.sigs.check(ctx))
	add("scratch_disk", checkScratch(h.cfg))
	return out
}

func checkScratch(cfg Config) error {
	free, err := pipeline.FreeBytes(cfg.Pipeline.TmpDir)
	if err != nil {
		return fmt.Errorf("reading the free space of %s: %w; check --tmp-dir (MW_TMP_DIR)", cfg.Pipeline.TmpDir, err)
	}
	if free < cfg.Pipeline.MinFreeBytes {
		return fmt.Errorf("%s free in %s, below the floor of %s: free space there, point --tmp-dir (MW_TMP_DIR) at a larger disk, or lower --scratch-min-free (MW_SCRATCH_MIN_FREE)",
			objstore.FormatBytes(free), cfg.Pipeline.TmpDir, objstore.FormatBytes(cfg.Pipeline.MinFreeBytes))
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
func checkStore(ctx context.Context, cfg Config, store objstore.Store) error {
	err := store.Ping(ctx)
	if err != nil || cfg.Storage != StorageS3 {
		return s3Fix(cfg, err)
	}
	if b := cfg.Pipeline.QuarantineBucket; b != "" {
		if _, serr := store.Stat(ctx, b, readinessKey); serr != nil && !errors.Is(serr, objstore.ErrNotFound) {
			return s3Fix(cfg, fmt.Errorf("reading the quarantine bucket %s (--quarantine-bucket, MW_QUARANTINE_BUCKET): %w", b, serr))
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

func (h *health) handleReady(w http.ResponseWriter, r *http.Request) {
	checks := h.readiness(r.Context())
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

func (h *health) handleHealth(w http.ResponseWriter, r *http.Request) {
	// One entry per pool of this instance: triage and each lane it serves, with the lane's consumer
	// (shared by every instance serving it) when NATS answers.
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	jobs := map[string]map[string]any{}
	consumers := map[string]any{}
	for _, l := range h.worker.Slots() {
		jobs[l.Name] = map[string]any{"active": l.Busy(), "max": l.Size}
		if c, err := h.js.Consumer(ctx, h.cfg.Streams.RequestsStream(), l.Durable); err == nil {
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
		"lanes":     servedLanes(h.cfg),
		"jobs":      jobs,
		"held":      map[string]int{"active": h.worker.Held(), "max": h.worker.Capacity()},
		"consumers": consumers,
		"clamd":     h.sigs.health(ctx),
		"intake":    h.intake(),
	}
	writeJSON(w, http.StatusOK, body)
}

// intake says whether the pull loops take work, and if not which dependency holds them back.
func (h *health) intake() map[string]any {
	if h.deps == nil {
		return map[string]any{"paused": false}
	}
	down := h.deps.Down()
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
