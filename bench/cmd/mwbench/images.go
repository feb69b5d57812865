package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mediaworker/mediaworker/bench"
	"github.com/mediaworker/mediaworker/transcoder"
)

// imagesPhase is the phase "images": peak RSS per format, the throughput comparison
// (images_throughput.go, alone the phase "image-throughput"), RSS over many jobs (leak.go, alone the
// phase "leak") and the WebP effort sweep.
type imagesPhase struct{ *bencher }

func (b imagesPhase) run() error {
	return errors.Join(
		b.peakRSS(),
		imageThroughput{b.bencher}.run(),
		leakPhase{b.bencher}.run(),
		b.webpEffortSweep(),
	)
}

// peakRSS runs two 24 MP jobs at once on a fresh worker per format and reads the worker's VmHWM
// (the most it was ever resident, start-up and the upload into its embedded store included) and the
// peak during the two jobs (sampled every 10 ms, and VmHWM if it rose during them).
func (b imagesPhase) peakRSS() (err error) {
	var rows [][]string
	worst := 0.0
	// Two jobs of each format; then, as evidence for the fixes, HEIC with glibc's malloc told to map
	// large blocks (≥ 128 KiB) on their own, so they go back to the kernel when freed (what
	// mallopt(M_MMAP_THRESHOLD) at start-up would do), two jobs and one.
	const mmapEnv = "MALLOC_MMAP_THRESHOLD_=131072"
	for i, pc := range []struct {
		name string
		jobs int
		env  string
	}{{"jpeg-24mp", 2, ""}, {"png-24mp", 2, ""}, {"heic-24mp", 2, ""}, {"heic-24mp", 2, mmapEnv}, {"heic-24mp", 1, mmapEnv}} {
		name := pc.name
		p := b.corpus.photo(name)
		var env []string
		if pc.env != "" {
			env = []string{pc.env}
		}
		w, werr := bench.StartWorker(b.ctx, bench.WorkerOptions{Bin: b.bin, Dir: b.phaseDir("images", fmt.Sprintf("peak-%d", i)),
			ClamdAddr: b.clamd.SocketAddr, ImageJobs: max(2, b.parallel), VideoJobs: 1, Env: env})
		if werr != nil {
			return werr
		}
		m0, m1, during, wall, jerr := func() (m0, m1 bench.Memory, during int64, wall time.Duration, err error) {
			defer stopWorker(w, &err)
			c, err := b.dial(w)
			if err != nil {
				return
			}
			defer c.Close()
			key := "peak/" + filepath.Base(p.Path)
			if err = c.Upload(b.ctx, key, p.Path); err != nil {
				return
			}
			if m0, err = w.Memory(); err != nil {
				return
			}
			s := bench.StartSampler(w.Pid(), 10*time.Millisecond)
			keys := []string{key}
			if pc.jobs == 2 {
				keys = append(keys, key)
			}
			_, wall, err = c.RunBatch(b.ctx, keys)
			during, _ = s.Stop()
			if err != nil {
				return
			}
			m1, err = w.Memory()
			if m1.HWM > m0.HWM {
				during = max(during, m1.HWM)
			}
			return
		}()
		if jerr != nil {
			return fmt.Errorf("peak RSS with %d %s jobs: %w", pc.jobs, name, jerr)
		}
		if pc.env == "" {
			worst = max(worst, float64(m1.HWM))
		}
		envCell := "(none)"
		if pc.env != "" {
			envCell = "`" + pc.env + "`"
		}
		rows = append(rows, []string{name, strconv.Itoa(pc.jobs), envCell, fmt.Sprintf("%d×%d, %s", p.W, p.H, mib(float64(fileSize(p.Path)))),
			mib(float64(m0.RSS)), mib(float64(m0.HWM)), mib(float64(during)), mib(float64(m1.HWM)), secs(wall.Seconds())})
	}
	b.rep.row("images", "peak RSS, 2 concurrent 24 MP jobs (worst of JPEG, PNG, HEIC)",
		"worker VmHWM over its whole life (fresh worker per format)", mib(worst), "≤ 300 MiB", atMost(worst, 300<<20))
	b.rep.section("Images: peak RSS with two concurrent 24 MP jobs",
		"A fresh `mediaworker run` per format, the photo uploaded into its embedded object store, then two requests "+
			"for it published at once (two image slots). *Before* is after start-up and the upload; *during* is the "+
			"largest VmRSS sampled every 10 ms while the two jobs ran (or VmHWM if it rose); *VmHWM* is the peak over "+
			"the process's life. The last two lines are evidence for a fix, not the worker as shipped: the environment "+
			"variable makes glibc's malloc serve blocks of 128 KiB and more with their own mappings, returned to the "+
			"kernel when freed (`mallopt(M_MMAP_THRESHOLD, 128 KiB)` at start-up does the same from code).\n\n%s",
		table([]string{"input", "jobs at once", "environment", "size", "RSS before", "VmHWM before", "peak during jobs", "VmHWM after", "jobs took"}, rows))
	return nil
}

// stageAgg is one stage's total time and job count between two scrapes.
type stageAgg struct{ sum, count float64 }

// stageDeltas sums the worker's stage timings (mediaworker_stage_duration_seconds) between two scrapes.
func stageDeltas(before, after map[string]float64) map[string]*stageAgg {
	stages := map[string]*stageAgg{}
	for k, v := range after {
		name, labels, ok := strings.Cut(k, "{")
		if !ok || !strings.HasPrefix(name, "mediaworker_stage_duration_seconds_") {
			continue
		}
		stage := labelValue(labels, "stage")
		if stage == "" {
			continue
		}
		if stages[stage] == nil {
			stages[stage] = &stageAgg{}
		}
		switch name {
		case "mediaworker_stage_duration_seconds_sum":
			stages[stage].sum += v - before[k]
		case "mediaworker_stage_duration_seconds_count":
			stages[stage].count += v - before[k]
		}
	}
	return stages
}

// stageTable shows the worker's own stage timings (mediaworker_stage_duration_seconds) between two
// scrapes: where a job's time goes besides the transform.
func stageTable(before, after map[string]float64) string {
	return "The worker's own stage timings over the timed runs (`mediaworker_stage_duration_seconds`, mean per job; " +
		"uploads happen inside *transforming*):\n\n" + stageRows(stageDeltas(before, after))
}

// addStages adds the stage timings of more into sum.
func addStages(sum, more map[string]*stageAgg) {
	for st, a := range more {
		if sum[st] == nil {
			sum[st] = &stageAgg{}
		}
		sum[st].sum += a.sum
		sum[st].count += a.count
	}
}

// stageRows is the table of stage timings summed in stages.
func stageRows(stages map[string]*stageAgg) string {
	if len(stages) == 0 {
		return "(the worker exposed no stage metrics)"
	}
	var rows [][]string
	for _, s := range sortedKeys(stages) {
		a := stages[s]
		if a.count == 0 {
			continue
		}
		rows = append(rows, []string{s, fmt.Sprintf("%.0f", a.count), fmt.Sprintf("%.1f ms", 1000*a.sum/a.count)})
	}
	return table([]string{"stage", "jobs", "mean"}, rows)
}

func labelValue(labels, name string) string {
	for _, kv := range strings.Split(strings.TrimSuffix(labels, "}"), ",") {
		k, v, ok := strings.Cut(kv, "=")
		if ok && k == name {
			return strings.Trim(v, `"`)
		}
	}
	return ""
}

// runQuiet runs a tool and returns its stderr with a failure.
func runQuiet(ctx context.Context, env []string, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	if env != nil {
		cmd.Env = env
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

// parallel runs fn(0..n-1) on p goroutines and returns the wall time.
func parallel(ctx context.Context, p, n int, fn func(i int) error) (time.Duration, error) {
	start := time.Now()
	idx := make(chan int)
	errs := make(chan error, p)
	var wg sync.WaitGroup
	for range p {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range idx {
				if err := fn(i); err != nil {
					errs <- err
					for range idx { // drain, so the feeder ends
					}
					return
				}
			}
		}()
	}
feed:
	for i := range n {
		select {
		case idx <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(idx)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return 0, err
	}
	return time.Since(start), ctx.Err()
}

// webpEffortSweep measures the in-process transform of the 12 MP JPEG at several WebP efforts: the
// evidence for the effort default.
func (b imagesPhase) webpEffortSweep() error {
	p := b.corpus.photo("jpeg-12mp")
	n := 2 * b.parallel
	if b.quick {
		n = b.parallel
	}
	outRoot := filepath.Join(b.work, "images", "effort")
	if err := os.MkdirAll(outRoot, 0o755); err != nil {
		return err
	}
	efforts := []int{0, 2, 3, 4}
	walls := map[int][]float64{}
	bytesAt := map[int]int64{}
	for run := range b.runs {
		for k := range efforts {
			e := efforts[(k+run)%len(efforts)]
			cfg := transcoder.DefaultImageConfig()
			cfg.Effort = e
			im, err := transcoder.NewImages(cfg)
			if err != nil {
				return err
			}
			var mu sync.Mutex
			wall, err := parallel(b.ctx, b.parallel, n, func(int) error {
				dir, err := os.MkdirTemp(outRoot, "e-")
				if err != nil {
					return err
				}
				defer os.RemoveAll(dir)
				res, err := im.Transform(b.ctx, p.Path, dir)
				if err != nil {
					return err
				}
				var sum int64
				for _, v := range res.Variants {
					sum += v.Size
				}
				mu.Lock()
				bytesAt[e] = sum
				mu.Unlock()
				return nil
			})
			if err != nil {
				return err
			}
			walls[e] = append(walls[e], wall.Seconds())
		}
	}
	base := float64(n) / bench.Median(walls[4])
	var rows [][]string
	for _, e := range efforts {
		t := float64(n) / bench.Median(walls[e])
		rows = append(rows, []string{strconv.Itoa(e), fmt.Sprintf("%.2f", t), ratio(t / base),
			fmt.Sprintf("%d", bytesAt[e]>>10), fmt.Sprintf("%+.1f %%", 100*(float64(bytesAt[e])/float64(bytesAt[4])-1))})
	}
	b.rep.section("Images: WebP effort (evidence for the default)",
		"In-process transform of %s (%d×%d), %d images at a time, %d per run, medians of %d runs; bytes are the three "+
			"variants of one image.\n\n%s",
		p.Name, p.W, p.H, b.parallel, n, b.runs,
		table([]string{"effort", "img/s", "speed vs effort 4", "bytes (KiB)", "bytes vs effort 4"}, rows))
	return nil
}

// rusage returns the user + system CPU time of who (RUSAGE_SELF or RUSAGE_CHILDREN: waited-for children).
func rusage(who int) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(who, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
