package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/mediaworker/mediaworker/bench"
	natsjs "github.com/mediaworker/mediaworker/jetstream"
	"github.com/mediaworker/mediaworker/objstore"
	"github.com/mediaworker/mediaworker/objstore/natsobj"
)

// storeFetch is the fetch part of the CPU-per-image baseline (issue 37 item 4: in-process transform +
// clamd + a fetch of the same upload from the same store): the upload downloaded from the worker's
// embedded JetStream object store into a local file, by the benchmark's own Go client through the
// same objstore.DownloadFile the worker's download is built on (Stat, then the chunks, the store's
// SHA-256 checked), over loopback TCP. Its CPU is the fetching client's (this process) plus the
// worker process's meanwhile, since the server that sends the chunks runs inside the worker. A site's
// service written in Go fetches the same way; `nats object get` would add a process start per file.
type storeFetch struct {
	close func()
	store *natsobj.Store
	pid   int // the worker whose embedded server holds the store
}

// newStoreFetch opens a connection of its own to w's embedded NATS, so the fetches share nothing with
// the client that publishes the worker's requests.
func newStoreFetch(w *bench.Worker) (*storeFetch, error) {
	nc, js, err := natsjs.Connect(natsjs.ConnectConfig{URL: w.NATSURL, Name: "mwbench-fetch"})
	if err != nil {
		return nil, fmt.Errorf("connecting the fetch baseline's client: %w", err)
	}
	store, err := natsobj.New(js, natsobj.DefaultConfig())
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("opening the object store for the fetch baseline: %w", err)
	}
	return &storeFetch{store: store, pid: w.Pid(), close: func() { _ = store.Close(); nc.Close() }}, nil
}

// Close is idempotent.
func (f *storeFetch) Close() {
	if f.close != nil {
		f.close()
		f.close = nil
	}
}

// cpu is the cumulative CPU time of the fetch's two sides: this process (the client) and the worker
// process (its embedded server).
func (f *storeFetch) cpu() time.Duration {
	w, _ := bench.ProcessCPU(f.pid)
	return rusage(syscall.RUSAGE_SELF) + w
}

// run fetches the batch's uploads from bucket, p at a time as the worker runs its jobs, each into a
// fresh file under dir (removed after), and returns the wall time.
func (f *storeFetch) run(ctx context.Context, p int, cs imageCase, bucket string, keys map[string]string, dir string) (time.Duration, error) {
	return parallel(ctx, p, cs.n, func(i int) error {
		tmp, err := os.MkdirTemp(dir, "fetch-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		key := keys[cs.photos[i%len(cs.photos)].Path]
		if _, err := objstore.DownloadFile(ctx, f.store, bucket, key, filepath.Join(tmp, "upload"), 0); err != nil {
			return fmt.Errorf("fetching %s: %w", key, err)
		}
		return nil
	})
}
