package main

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/mediaworker/mediaworker/bench"
	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/objstore"
	"github.com/mediaworker/mediaworker/objstore/s3"
)

// burstMemory is issue 37's memory case: a fresh worker on its embedded store ("nats") or on S3
// ("s3": the MinIO the benchmark runs, started on first use as the leak run does), n photos uploaded
// into the store at once (the photos in turn, each under its own key), then n requests published at
// once. It returns the worker's VmHWM after the uploads and after the jobs (the process's peak: on the
// embedded store, what the embedded server held for the uploads counts; on S3 the uploads go to
// MinIO, another process, so the first is the worker at rest), and the jobs' wall time.
func (b *bencher) burstMemory(photos []Photo, n, imageJobs int, storage string) (afterUploads, afterJobs int64, wall time.Duration, err error) {
	var args []string
	var store objstore.Store // nil: the worker's embedded store
	if storage == "s3" {
		if b.minio == nil {
			if err := b.env.Do(func() { b.minio = testenv.StartMinIO(b.env) }); err != nil {
				return 0, 0, 0, fmt.Errorf("starting MinIO: %w", err)
			}
		}
		m := b.minio
		cfg := s3.DefaultConfig()
		cfg.Endpoint, cfg.AccessKey, cfg.SecretKey = m.Endpoint, m.AccessKey, m.SecretKey
		if store, err = s3.New(cfg); err != nil {
			return 0, 0, 0, err
		}
		args = []string{"--storage", "s3", "--s3-endpoint", m.Endpoint, "--s3-access-key", m.AccessKey, "--s3-secret-key", m.SecretKey}
	}
	w, err := b.startWorker("peers", "burst-memory-"+storage, imageJobs, 1, args...)
	if err != nil {
		if store != nil {
			store.Close()
		}
		return 0, 0, 0, err
	}
	defer stopWorker(w, &err)
	c, err := bench.DialWith(b.ctx, w.NATSURL, "media", store) // c owns store
	if err != nil {
		return 0, 0, 0, err
	}
	defer c.Close()
	keys := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		keys[i] = fmt.Sprintf("burst/%02d-%s", i, filepath.Base(photos[i%len(photos)].Path))
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(b.ctx, 5*time.Minute)
			defer cancel()
			errs[i] = c.Upload(ctx, keys[i], photos[i%len(photos)].Path)
		}()
	}
	wg.Wait()
	for _, e := range errs {
		if e != nil {
			return 0, 0, 0, fmt.Errorf("uploading %d photos at once: %w", n, e)
		}
	}
	m, err := w.Memory()
	if err != nil {
		return 0, 0, 0, err
	}
	afterUploads = m.HWM
	if _, wall, err = c.RunBatch(b.ctx, keys); err != nil {
		return 0, 0, 0, err
	}
	if m, err = w.Memory(); err != nil {
		return 0, 0, 0, err
	}
	return afterUploads, m.HWM, wall, nil
}

// s3MemoryRow is the targets row of the burst on S3 (issue 37 item 3), or of its failure. rest is the
// worker's VmHWM once the photos were in the bucket (they went to MinIO, not through the worker).
func (b *bencher) s3MemoryRow(n, imageJobs int, rest, hwm int64, wall time.Duration, err error) {
	b.rep.own("peers", "S3:")
	what := fmt.Sprintf("S3: worker VmHWM, a fresh worker on S3 (MinIO), %d photos put in the bucket first, then %d requests at once, %d in flight", n, n, imageJobs)
	if err != nil {
		b.rep.row("peers", what, "failed: "+oneLine(err.Error()), "—", "≤ 300 MiB", "**MISS**")
		return
	}
	b.rep.row("peers", what, fmt.Sprintf("%s at rest with the photos in the bucket, %s after the jobs (%.2f img/s)", mib(float64(rest)),
		mib(float64(hwm)), float64(n)/wall.Seconds()), mib(float64(hwm)), "≤ 300 MiB", atMost(float64(hwm), 300<<20))
}
