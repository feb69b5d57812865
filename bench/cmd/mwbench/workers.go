package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/mediaworker/mediaworker/bench"
	"github.com/mediaworker/mediaworker/internal/testenv"
)

// workers starts the `mediaworker run` subprocesses the phases measure: each in a fresh directory
// under the run's scratch space, against the benchmark's clamd, with -worker-env added. A phase that
// needs other options (another clamd, the reuse memory) calls bench.StartWorker with these fields.
type workers struct {
	ctx   context.Context
	bin   string         // the built mediaworker binary (-bin)
	work  string         // scratch space (-work): phases' worker data dirs and outputs
	clamd *testenv.Clamd // the benchmark's clamd (main.go)
	// workerEnv is added to the environment of the workers startWorker starts (-worker-env).
	workerEnv []string
}

// phaseDir returns a fresh directory for a phase's workers and outputs.
func (r workers) phaseDir(phase, name string) string {
	dir := filepath.Join(r.work, phase, name)
	_ = os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fatal(err)
	}
	return dir
}

// startWorker starts a `mediaworker run` subprocess for a phase.
func (r workers) startWorker(phase, name string, imageJobs, videoJobs int, args ...string) (*bench.Worker, error) {
	w, err := bench.StartWorker(r.ctx, bench.WorkerOptions{
		Bin: r.bin, Dir: r.phaseDir(phase, name), ClamdAddr: r.clamd.SocketAddr,
		ImageJobs: imageJobs, VideoJobs: videoJobs, Args: args, Env: r.workerEnv,
	})
	if err != nil {
		return nil, fmt.Errorf("starting worker %s/%s: %w", phase, name, err)
	}
	return w, nil
}

// dial connects the API side to a worker's embedded NATS.
func (r workers) dial(w *bench.Worker) (*bench.Client, error) {
	ctx, cancel := context.WithTimeout(r.ctx, 30*time.Second)
	defer cancel()
	return bench.Dial(ctx, w.NATSURL, "media")
}

// stopWorker stops w and turns an unclean exit into an error.
func stopWorker(w *bench.Worker, err *error) {
	if serr := w.Stop(); serr != nil && *err == nil {
		*err = serr
	}
}
