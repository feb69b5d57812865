package main

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"time"
)

// burstMemory is issue 37's memory case: a fresh worker on its embedded store, n photos uploaded into
// the store at once (the photos in turn, each under its own key), then n requests published at once.
// It returns the worker's VmHWM after the uploads and after the jobs (the process's peak: what the
// embedded server held for the uploads counts), and the jobs' wall time.
func (b *bencher) burstMemory(photos []Photo, n, imageJobs int) (afterUploads, afterJobs int64, wall time.Duration, err error) {
	w, err := b.startWorker("peers", "burst-memory", imageJobs, 1)
	if err != nil {
		return 0, 0, 0, err
	}
	defer stopWorker(w, &err)
	c, err := b.dial(w)
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
