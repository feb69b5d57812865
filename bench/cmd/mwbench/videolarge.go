package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/mediaworker/mediaworker/bench"
)

func (b videosPhase) large() (err error) {
	var extra []string
	if b.largeMiB > 480 {
		extra = []string{"--max-input-bytes", fmt.Sprintf("%dMiB", b.largeMiB+64)}
	}
	w, err := b.startWorker("videos", "large", b.parallel, 1, extra...)
	if err != nil {
		return err
	}
	defer stopWorker(w, &err)
	c, err := b.dial(w)
	if err != nil {
		return err
	}
	defer c.Close()
	m00, err := w.Memory()
	if err != nil {
		return err
	}
	t0 := time.Now()
	if err := c.Upload(b.ctx, "large/large.mov", b.corpus.Large); err != nil {
		return err
	}
	upload := time.Since(t0)
	m0, err := w.Memory()
	if err != nil {
		return err
	}
	s := bench.StartSampler(w.Pid(), 20*time.Millisecond)
	ctx, cancel := context.WithTimeout(b.ctx, 15*time.Minute)
	defer cancel()
	j, err := c.Submit(ctx, "large/large.mov")
	if err != nil {
		s.Stop()
		return err
	}
	a, err := c.Wait(ctx, j)
	peak, samples := s.Stop()
	if err != nil {
		return fmt.Errorf("large video: %w", err)
	}
	m1, err := w.Memory()
	if err != nil {
		return err
	}
	if m1.HWM > m0.HWM {
		peak = max(peak, m1.HWM)
	}
	rise := float64(peak - m0.RSS)
	size := fileSize(b.corpus.Large)
	b.rep.row("videos", fmt.Sprintf("RSS rise with a %s input", mib(float64(size))),
		fmt.Sprintf("peak during the job %s − before %s", mib(float64(peak)), mib(float64(m0.RSS))),
		mib(rise), "≤ 64 MiB", atMost(rise, 64<<20))
	b.rep.section("Videos: large input",
		"A %s uncompressed 1080p MOV (%d frames), uploaded into a fresh worker's embedded object store (%s; the "+
			"worker's RSS went from %s to %s and its VmHWM to %s during the upload, which is the embedded NATS server "+
			"receiving it, not the job), then one request. RSS sampled every 20 ms (%d samples) while the job ran "+
			"(%s: download, scan, probe, encode by ffmpeg in its own process, upload); VmHWM after: %s.",
		mib(float64(size)), b.corpus.LargeFrames, upload.Round(time.Millisecond), mib(float64(m00.RSS)), mib(float64(m0.RSS)),
		mib(float64(m0.HWM)), samples, a.At.Sub(j.Published).Round(time.Millisecond), mib(float64(m1.HWM)))
	if b.largeMiB < 1024 {
		b.rep.note("Large input: %s instead of 1 GB, to stay under the worker's default 500 MiB cap and the time "+
			"budget; `mwbench -large-mib 1024` raises clamd's limits and --max-input-bytes and measures 1 GiB.", mib(float64(size)))
	}
	return nil
}

func pick[T any](xs []T, f func(T) float64) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = f(x)
	}
	return out
}

func sums(a, b []float64) []float64 {
	out := make([]float64, min(len(a), len(b)))
	for i := range out {
		out[i] = a[i] + b[i]
	}
	return out
}

func shellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " '\"()$*?[]{};&|<>\\,") {
			q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		} else {
			q[i] = a
		}
	}
	return strings.Join(q, " ")
}

// linkOrCopy hard-links src to dst, copying when they are on different filesystems.
func linkOrCopy(src, dst string) error {
	_ = os.Remove(dst)
	if err := os.Link(src, dst); err == nil {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// last returns the last of xs, 0 for none.
func last(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	return xs[len(xs)-1]
}

func signedMS(s float64) string { return fmt.Sprintf("%+.0f ms", s*1000) }
