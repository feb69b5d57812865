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

func (b *bencher) imagesPhase() error {
	return errors.Join(
		b.imagePeakRSS(),
		b.imageThroughput(),
		b.imageLeak(),
		b.webpEffortSweep(),
	)
}

// imagePeakRSS runs two 24 MP jobs at once on a fresh worker per format and reads the worker's VmHWM
// (the most it was ever resident, start-up and the upload into its embedded store included) and the
// peak during the two jobs (sampled every 10 ms, and VmHWM if it rose during them).
func (b *bencher) imagePeakRSS() (err error) {
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
			ClamdAddr: b.clamd.Addr, ImageJobs: max(2, b.parallel), VideoJobs: 1, Env: env})
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

// imageCase is one input of the throughput comparison and how many images a timed batch has.
type imageCase struct {
	photo Photo
	n     int
}

// imageThroughput compares, per format, images/s of the worker end to end (publish → response,
// through the embedded JetStream, the object store and clamd) with the in-process transform
// (transcoder.Images.Transform, the library calls the worker makes) and with a naive script (three
// `vips thumbnail` processes per image, one per variant), all with the same parallelism.
func (b *bencher) imageThroughput() (err error) {
	// Images per timed batch on 2 cores (scaled with the core count): HEIC (libheif decodes the full
	// image) and PNG are the slow ones.
	cases := []imageCase{
		{b.corpus.photo("jpeg-12mp"), 4}, {b.corpus.photo("jpeg-24mp"), 4},
		{b.corpus.photo("png-12mp"), 2}, {b.corpus.photo("heic-12mp"), 2},
	}
	for i := range cases {
		cases[i].n = max(b.parallel, cases[i].n*b.parallel/2)
		if b.quick {
			cases[i].n = max(b.parallel, cases[i].n/2)
		}
	}
	cfg := transcoder.DefaultImageConfig()
	images, err := transcoder.NewImages(cfg)
	if err != nil {
		return err
	}
	w, err := b.startWorker("images", "throughput", b.parallel, 1)
	if err != nil {
		return err
	}
	defer stopWorker(w, &err)
	c, err := b.dial(w)
	if err != nil {
		return err
	}
	defer c.Close()
	keys := map[string]string{}
	for _, cs := range cases {
		keys[cs.photo.Name] = "tp/" + filepath.Base(cs.photo.Path)
		if err := c.Upload(b.ctx, keys[cs.photo.Name], cs.photo.Path); err != nil {
			return err
		}
	}
	outRoot := filepath.Join(b.work, "images", "out")

	inproc := func(p Photo, n int) (time.Duration, int64, error) {
		var bytes int64
		var mu sync.Mutex
		wall, err := parallel(b.ctx, b.parallel, n, func(i int) error {
			dir, err := os.MkdirTemp(outRoot, "inproc-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			res, err := images.Transform(b.ctx, p.Path, dir)
			if err != nil {
				return err
			}
			mu.Lock()
			bytes = 0
			for _, v := range res.Variants {
				bytes += v.Size
			}
			mu.Unlock()
			return nil
		})
		return wall, bytes, err
	}
	naive := func(p Photo, n int) (time.Duration, int64, error) {
		var bytes int64
		var mu sync.Mutex
		wall, err := parallel(b.ctx, b.parallel, n, func(i int) error {
			dir, err := os.MkdirTemp(outRoot, "cli-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			var sum int64
			for _, v := range vipsVariants(cfg) {
				out := filepath.Join(dir, v.quality+".webp")
				if err := runQuiet(b.ctx, vipsEnv(), "vips", vipsThumbnailArgs(p.Path, out, v, cfg.Effort)...); err != nil {
					return err
				}
				sum += fileSize(out)
			}
			mu.Lock()
			bytes = sum
			mu.Unlock()
			return nil
		})
		return wall, bytes, err
	}
	worker := func(p Photo, n int) (time.Duration, int64, error) {
		ks := make([]string, n)
		for i := range ks {
			ks[i] = keys[p.Name]
		}
		res, wall, err := c.RunBatch(b.ctx, ks)
		var bytes int64
		if len(res) > 0 {
			for _, v := range res[0].Answer.Resp.Processed {
				bytes += v.Size
			}
		}
		return wall, bytes, err
	}
	// CPU time, which other load on the machine disturbs less than wall time: the benchmark process for
	// the in-process transform, the vips processes for the naive script, and the worker plus clamd (the
	// scan's CPU is spent there) for the worker.
	clamdPid, err := bench.FindProcess("--config-file=" + b.clamd.ConfigPath)
	if err != nil {
		return err
	}
	selfCPU := func() time.Duration { return rusage(syscall.RUSAGE_SELF) }
	childCPU := func() time.Duration { return rusage(syscall.RUSAGE_CHILDREN) }
	workerCPU := func() time.Duration {
		a, _ := bench.ProcessCPU(w.Pid())
		c, _ := bench.ProcessCPU(clamdPid)
		return a + c
	}
	type method struct {
		name string
		run  func(Photo, int) (time.Duration, int64, error)
		cpu  func() time.Duration
	}
	methods := []method{{"in-process", inproc, selfCPU}, {"naive CLI", naive, childCPU}, {"worker", worker, workerCPU}}
	if err := os.MkdirAll(outRoot, 0o755); err != nil {
		return err
	}

	// Warm-up: one image per format through libvips in-process and through the worker (page cache,
	// loaders, the worker's first jobs). The naive script starts fresh processes every time anyway.
	for _, cs := range cases {
		for _, m := range methods {
			if m.name == "naive CLI" {
				continue
			}
			if _, _, err := m.run(cs.photo, 1); err != nil {
				return fmt.Errorf("warm-up %s %s: %w", m.name, cs.photo.Name, err)
			}
		}
	}
	metricsBefore, _ := w.Metrics(b.ctx)

	walls := map[string]map[string][]float64{} // format → method → seconds per run
	cpus := map[string]map[string][]float64{}  // format → method → CPU seconds per image, per run
	bytesOut := map[string]map[string]int64{}
	total := map[string][]float64{} // method → seconds for all formats, per run
	images1 := 0
	for _, cs := range cases {
		walls[cs.photo.Name] = map[string][]float64{}
		cpus[cs.photo.Name] = map[string][]float64{}
		bytesOut[cs.photo.Name] = map[string]int64{}
		images1 += cs.n
	}
	for run := range b.runs {
		sum := map[string]float64{}
		for ci, cs := range cases {
			// Rotate the order so no method always runs first (or right after another's burst).
			for k := range methods {
				m := methods[(k+run+ci)%len(methods)]
				c0 := m.cpu()
				wall, by, err := m.run(cs.photo, cs.n)
				if err != nil {
					return fmt.Errorf("%s %s: %w", m.name, cs.photo.Name, err)
				}
				cpus[cs.photo.Name][m.name] = append(cpus[cs.photo.Name][m.name], (m.cpu()-c0).Seconds()/float64(cs.n))
				walls[cs.photo.Name][m.name] = append(walls[cs.photo.Name][m.name], wall.Seconds())
				bytesOut[cs.photo.Name][m.name] = by
				sum[m.name] += wall.Seconds()
				b.logf("images run %d %s %s: %d in %s (%.2f img/s)", run+1, cs.photo.Name, m.name, cs.n, wall.Round(time.Millisecond), float64(cs.n)/wall.Seconds())
			}
		}
		for k, v := range sum {
			total[k] = append(total[k], v)
		}
	}
	metricsAfter, _ := w.Metrics(b.ctx)

	thr := func(n int, secs []float64) float64 { return float64(n) / bench.Median(secs) }
	var rows [][]string
	var worstInproc, worstNaive float64 = 1e9, 1e9
	for _, cs := range cases {
		f := walls[cs.photo.Name]
		ip, nv, wk := thr(cs.n, f["in-process"]), thr(cs.n, f["naive CLI"]), thr(cs.n, f["worker"])
		worstInproc, worstNaive = min(worstInproc, wk/ip), min(worstNaive, wk/nv)
		by := bytesOut[cs.photo.Name]
		cp := cpus[cs.photo.Name]
		rows = append(rows, []string{cs.photo.Name, fmt.Sprintf("%s, %d×%d", mib(float64(fileSize(cs.photo.Path))), cs.photo.W, cs.photo.H),
			strconv.Itoa(cs.n), fmt.Sprintf("%.2f", ip), fmt.Sprintf("%.2f", nv), fmt.Sprintf("%.2f", wk),
			ratio(wk / ip), ratio(wk / nv),
			fmt.Sprintf("%.2f / %.2f / %.2f", bench.Median(cp["in-process"]), bench.Median(cp["naive CLI"]), bench.Median(cp["worker"])),
			fmt.Sprintf("%d / %d / %d", by["worker"]>>10, by["in-process"]>>10, by["naive CLI"]>>10)})
	}
	ip, nv, wk := thr(images1, total["in-process"]), thr(images1, total["naive CLI"]), thr(images1, total["worker"])
	rows = append(rows, []string{"**all**", "", strconv.Itoa(images1), fmt.Sprintf("%.2f", ip), fmt.Sprintf("%.2f", nv),
		fmt.Sprintf("%.2f", wk), ratio(wk / ip), ratio(wk / nv), "", ""})

	b.rep.row("images", "throughput, worker end to end ÷ in-process transform",
		fmt.Sprintf("%.2f vs %.2f img/s, all formats (worst format %s)", wk, ip, ratio(worstInproc)),
		ratio(wk/ip), "≥ 0.9×", atLeast(wk/ip, 0.9))
	b.rep.row("images", "throughput, worker end to end ÷ naive 3× `vips thumbnail` per image",
		fmt.Sprintf("%.2f vs %.2f img/s, all formats (worst format %s)", wk, nv, ratio(worstNaive)),
		ratio(wk/nv), "≥ 1.5×", atLeast(wk/nv, 1.5))

	b.rep.section("Images: throughput",
		"%d images at a time (`--max-image-jobs %d`; the baselines run %d at a time too), medians of %d runs, methods "+
			"interleaved and rotated. *worker*: `mediaworker run` subprocess, requests published at once, timed from the "+
			"first publish to the last response (download from the embedded object store, clamd INSTREAM, detection, "+
			"transform, three uploads, response). *in-process*: `transcoder.Images.Transform` (the library calls the "+
			"worker makes) in the benchmark process on the local file. *naive CLI*: three `vips thumbnail` processes per "+
			"image, one per variant, with the worker's sizes, qualities and effort (`VIPS_CONCURRENCY=1`, as the "+
			"worker's libvips). Sizes and WebP settings are `transcoder.DefaultImageConfig()`: %d/%d/%d px, Q %d/%d/%d, "+
			"effort %d.\n\n%s\n*CPU s/img*: user + system CPU seconds per image (in-process / naive CLI / worker + clamd), "+
			"less disturbed by other load than wall time. *bytes*: the three variants of one image in KiB (worker / "+
			"in-process / naive CLI).\n\n%s",
		b.parallel, b.parallel, b.parallel, b.runs, cfg.High, cfg.Medium, cfg.Low, cfg.QualityHigh, cfg.QualityMedium,
		cfg.QualityLow, cfg.Effort,
		table([]string{"input", "file", "images per run", "in-process img/s", "naive CLI img/s", "worker img/s",
			"worker ÷ in-process", "worker ÷ naive", "CPU s/img", "bytes (KiB)"}, rows),
		stageTable(metricsBefore, metricsAfter))
	v := vipsVariants(cfg)[0]
	b.rep.command("# naive image baseline, per image (x3: high, medium, low), %d images at a time:\nVIPS_CONCURRENCY=1 vips %s",
		b.parallel, strings.Join(vipsThumbnailArgs("INPUT", "OUT/high.webp", v, cfg.Effort), " "))
	return nil
}

// stageTable shows the worker's own stage timings (mediaworker_stage_duration_seconds) between two
// scrapes: where a job's time goes besides the transform.
func stageTable(before, after map[string]float64) string {
	type agg struct{ sum, count float64 }
	stages := map[string]*agg{}
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
			stages[stage] = &agg{}
		}
		switch name {
		case "mediaworker_stage_duration_seconds_sum":
			stages[stage].sum += v - before[k]
		case "mediaworker_stage_duration_seconds_count":
			stages[stage].count += v - before[k]
		}
	}
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
	return "The worker's own stage timings over the timed runs (`mediaworker_stage_duration_seconds`, mean per job; " +
		"uploads happen inside *transforming*):\n\n" + table([]string{"stage", "jobs", "mean"}, rows)
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

type vipsVariant struct {
	quality string
	size, q int
}

func vipsVariants(cfg transcoder.ImageConfig) []vipsVariant {
	return []vipsVariant{{"high", cfg.High, cfg.QualityHigh}, {"medium", cfg.Medium, cfg.QualityMedium}, {"low", cfg.Low, cfg.QualityLow}}
}

// vipsThumbnailArgs is the CLI form of what the worker asks libvips for: shrink-on-load thumbnail to
// fit size×size, never enlarged, sRGB, fail on errors, WebP with metadata stripped.
func vipsThumbnailArgs(src, out string, v vipsVariant, effort int) []string {
	return []string{"thumbnail", src, fmt.Sprintf("%s[Q=%d,effort=%d,strip]", out, v.q, effort),
		strconv.Itoa(v.size), "--height", strconv.Itoa(v.size), "--size", "down",
		"--export-profile", "srgb", "--fail-on", "error"}
}

func vipsEnv() []string {
	return []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "VIPS_CONCURRENCY=1"}
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
func (b *bencher) webpEffortSweep() error {
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
