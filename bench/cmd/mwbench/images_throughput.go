package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mediaworker/mediaworker/bench"
	"github.com/mediaworker/mediaworker/transcoder"
)

// imageCase is one input of the throughput comparison: the photos of a timed batch (image i of a
// batch is photos[i%len(photos)]) and how many images a batch has.
type imageCase struct {
	name   string
	photos []Photo
	n      int
}

func (c imageCase) describe() string {
	p := c.photos[0]
	if len(c.photos) > 1 {
		return fmt.Sprintf("%d files of %s, %d×%d", len(c.photos), mib(float64(fileSize(p.Path))), p.W, p.H)
	}
	return fmt.Sprintf("%s, %d×%d", mib(float64(fileSize(p.Path))), p.W, p.H)
}

// imageMethod is one way of making the three variants of a batch of images.
type imageMethod struct {
	name string
	run  func(imageCase) (time.Duration, int64, error) // wall time, bytes of the variants of one image
	cpu  func() time.Duration                          // cumulative CPU time of whoever does the work (its clamd included)
	// clamd, for a method that scans, is its clamd's cumulative CPU time: its part of cpu.
	clamd func() time.Duration
}

// imageScripts are the forms of the naive script the comparison times (images_naive.go).
type imageScripts struct{ def, fuzzy, noScan, restricted naiveScript }

// imageThroughput is the images' throughput comparison (issue 13's baselines and black-box case),
// with what clamd costs per image (images_scan.go); alone it is the phase "image-throughput".
type imageThroughput struct{ *bencher }

// run compares, per input, images/s of the worker end to end (publish → response,
// through the embedded JetStream, the object store and clamd) with the in-process transform
// (transcoder.Images.Transform, the library calls the worker makes) and with the naive script in its
// two forms (images_naive.go), all with the same parallelism, interleaved run by run. Then the
// black-box case cold: a fresh worker's first batch.
func (b imageThroughput) run() (err error) {
	noisy, err := b.corpus.noisyPhotos(b.env, b.logf)
	if err != nil {
		return err
	}
	// Images per timed batch on 2 cores (scaled with the core count): HEIC (libheif decodes the full
	// image) and PNG are the slow ones. The noisy case is the issue's: eight different files.
	one := func(name string, n int) imageCase {
		return imageCase{name: name, photos: []Photo{b.corpus.photo(name)}, n: n}
	}
	cases := []imageCase{one("jpeg-12mp", 4), one("jpeg-24mp", 4), one("png-12mp", 2), one("heic-12mp", 2)}
	for i := range cases {
		cases[i].n = max(b.parallel, cases[i].n*b.parallel/2)
		if b.quick {
			cases[i].n = max(b.parallel, cases[i].n/2)
		}
	}
	cases = append(cases, imageCase{name: fmt.Sprintf("noisy-12mp ×%d", noisyCount), photos: noisy, n: noisyCount})

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
	keys := map[string]string{} // photo path → key in the store
	for _, cs := range cases {
		for _, p := range cs.photos {
			keys[p.Path] = "tp/" + filepath.Base(p.Path)
			if err := c.Upload(b.ctx, keys[p.Path], p.Path); err != nil {
				return err
			}
		}
	}
	// The fetch baseline's own client on the same store (images_fetch.go).
	fetch, err := newStoreFetch(w)
	if err != nil {
		return err
	}
	defer fetch.Close()
	// The same worker against a clamd with image fuzzy hashing, ClamAV's default (images_scan.go): what
	// that one clamd setting costs end to end.
	fuzzy, err := startClamdFuzzy(b.env)
	if err != nil {
		return err
	}
	defer fuzzy.Stop()
	w2, err := bench.StartWorker(b.ctx, bench.WorkerOptions{Bin: b.bin, Dir: b.phaseDir("images", "throughput-fuzzy"),
		ClamdAddr: fuzzy.SocketAddr, ImageJobs: b.parallel, VideoJobs: 1, Env: b.workerEnv})
	if err != nil {
		return fmt.Errorf("starting worker against clamd with fuzzy hashing: %w", err)
	}
	defer stopWorker(w2, &err)
	c2, err := b.dial(w2)
	if err != nil {
		return err
	}
	defer c2.Close()
	for _, cs := range cases {
		for _, p := range cs.photos {
			if err := c2.Upload(b.ctx, keys[p.Path], p.Path); err != nil {
				return err
			}
		}
	}
	// The baselines' scans: clamdscan --fdpass against each worker's own clamd (clamdscan.go).
	deployScan, err := newClamdScan(b.clamd, "deploy", filepath.Join(b.work, "images", "clamdscan"))
	if err != nil {
		return err
	}
	fuzzyScan, err := newClamdScan(fuzzy, "fuzzy hash", filepath.Join(b.work, "images", "clamdscan"))
	if err != nil {
		return err
	}
	naiveDef, naiveFuzzy, naiveNoScan, naiveRes := naiveScripts(&deployScan, &fuzzyScan)
	scripts := imageScripts{def: naiveDef, fuzzy: naiveFuzzy, noScan: naiveNoScan, restricted: naiveRes}
	outRoot := filepath.Join(b.work, "images", "out")
	if err := os.MkdirAll(outRoot, 0o755); err != nil {
		return err
	}

	inproc := func(cs imageCase) (time.Duration, int64, error) {
		var bytes int64
		var mu sync.Mutex
		wall, err := parallel(b.ctx, b.parallel, cs.n, func(i int) error {
			dir, err := os.MkdirTemp(outRoot, "inproc-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			res, err := images.Transform(b.ctx, cs.photos[i%len(cs.photos)].Path, dir)
			if err != nil {
				return err
			}
			if i == 0 {
				mu.Lock()
				bytes = variantBytes(res.Variants)
				mu.Unlock()
			}
			return nil
		})
		return wall, bytes, err
	}
	naive := func(script naiveScript) func(imageCase) (time.Duration, int64, error) {
		return func(cs imageCase) (time.Duration, int64, error) {
			var bytes int64
			var mu sync.Mutex
			wall, err := parallel(b.ctx, b.parallel, cs.n, func(i int) error {
				src := cs.photos[i%len(cs.photos)].Path
				if script.scan != nil { // the upload is scanned first, as the worker scans it before it transforms
					if _, err := script.scan.scan(b.ctx, src); err != nil {
						return err
					}
				}
				dir, err := os.MkdirTemp(outRoot, "cli-")
				if err != nil {
					return err
				}
				defer os.RemoveAll(dir)
				var sum int64
				for _, v := range vipsVariants(cfg) {
					out := filepath.Join(dir, v.quality+".webp")
					if err := runQuiet(b.ctx, script.env(), "vips", script.args(src, out, v)...); err != nil {
						return err
					}
					sum += fileSize(out)
				}
				if i == 0 {
					mu.Lock()
					bytes = sum
					mu.Unlock()
				}
				return nil
			})
			return wall, bytes, err
		}
	}
	worker := func(c *bench.Client) func(cs imageCase) (time.Duration, int64, error) {
		return func(cs imageCase) (time.Duration, int64, error) { return runWorkerBatch(b.ctx, c, cs, keys) }
	}
	// CPU time, which other load on the machine disturbs less than wall time: the benchmark process for
	// the in-process transform, the vips and clamdscan processes plus their clamd for the naive script,
	// and the worker plus its clamd (the scan's CPU is spent there) for the worker.
	selfCPU := func() time.Duration { return rusage(syscall.RUSAGE_SELF) }
	childCPU := func() time.Duration { return rusage(syscall.RUSAGE_CHILDREN) }
	workerCPU := func(w *bench.Worker, clamd clamdScan) func() time.Duration {
		return func() time.Duration {
			a, _ := bench.ProcessCPU(w.Pid())
			return a + clamd.cpu()
		}
	}
	script := func(s naiveScript) imageMethod {
		m := imageMethod{name: s.name, run: naive(s), cpu: childCPU}
		if s.scan != nil {
			m.clamd = s.scan.cpu
			m.cpu = func() time.Duration { return childCPU() + s.scan.cpu() }
		}
		return m
	}
	fetchUploads := func(cs imageCase) (time.Duration, int64, error) {
		wall, err := fetch.run(b.ctx, b.parallel, cs, c.Bucket, keys, outRoot)
		return wall, 0, err
	}
	// Groups run back to back: each worker right beside the scanning script it is judged against (and
	// the script without a scan beside the shipped worker's pair), so that a change in the machine's
	// other load between them weighs as little as it can; the groups' order rotates run by run and the
	// order within a group alternates. The fetch from the shipped worker's store goes in its group, at
	// the end: in neither order does it run right after the worker, whose last writes after its
	// last response (the settled records) would be charged to the fetch.
	groups := [][]imageMethod{
		{{name: "in-process", run: inproc, cpu: selfCPU}},
		{script(naiveRes)},
		{script(naiveDef), {name: "worker", run: worker(c), cpu: workerCPU(w, deployScan), clamd: deployScan.cpu}, script(naiveNoScan),
			{name: methodFetch, run: fetchUploads, cpu: fetch.cpu}},
		{script(naiveFuzzy), {name: workerFuzzy, run: worker(c2), cpu: workerCPU(w2, fuzzyScan), clamd: fuzzyScan.cpu}},
	}
	var methods []imageMethod
	for _, g := range groups {
		methods = append(methods, g...)
	}
	order := func(run, ci int) []imageMethod {
		var out []imageMethod
		for k := range groups {
			g := slices.Clone(groups[(k+run+ci)%len(groups)])
			if (run+ci)%2 == 1 {
				slices.Reverse(g)
			}
			out = append(out, g...)
		}
		return out
	}

	// Warm-up: one image per input through libvips in-process and through both workers (page cache,
	// loaders, the worker's first jobs). The naive script starts fresh processes every time anyway.
	for _, cs := range cases {
		for _, m := range methods {
			if strings.HasPrefix(m.name, "naive") { // fresh processes every time anyway
				continue
			}
			if _, _, err := m.run(imageCase{name: cs.name, photos: cs.photos, n: 1}); err != nil {
				return fmt.Errorf("warm-up %s %s: %w", m.name, cs.name, err)
			}
		}
	}
	metricsBefore, _ := w.Metrics(b.ctx)

	walls := map[string]map[string][]float64{} // input → method → seconds per run
	cpus := map[string]map[string][]float64{}  // input → method → CPU seconds per image, per run
	bytesOut := map[string]map[string]int64{}
	total := map[string][]float64{} // method → seconds for all inputs, per run
	allImages := 0
	for _, cs := range cases {
		walls[cs.name] = map[string][]float64{}
		cpus[cs.name] = map[string][]float64{}
		bytesOut[cs.name] = map[string]int64{}
		allImages += cs.n
	}
	for run := range b.runs {
		sum := map[string]float64{}
		for ci, cs := range cases {
			// Rotate the order so no method always runs first (or right after another's burst).
			for _, m := range order(run, ci) {
				var k0 time.Duration
				if m.clamd != nil {
					k0 = m.clamd()
				}
				c0 := m.cpu()
				wall, by, err := m.run(cs)
				if err != nil {
					return fmt.Errorf("%s %s: %w", m.name, cs.name, err)
				}
				cpus[cs.name][m.name] = append(cpus[cs.name][m.name], (m.cpu()-c0).Seconds()/float64(cs.n))
				if m.clamd != nil { // the part of it its clamd spent
					k := (m.clamd() - k0).Seconds() / float64(cs.n)
					cpus[cs.name][m.name+"/clamd"] = append(cpus[cs.name][m.name+"/clamd"], k)
					if m.name == "worker" {
						cpus[cs.name]["clamd"] = append(cpus[cs.name]["clamd"], k)
					}
				}
				walls[cs.name][m.name] = append(walls[cs.name][m.name], wall.Seconds())
				bytesOut[cs.name][m.name] = by
				sum[m.name] += wall.Seconds()
				b.logf("images run %d %s %s: %d in %s (%.2f img/s, %.2f CPU-s/img)", run+1, cs.name, m.name, cs.n,
					wall.Round(time.Millisecond), float64(cs.n)/wall.Seconds(), cpus[cs.name][m.name][run])
			}
		}
		for k, v := range sum {
			total[k] = append(total[k], v)
		}
	}
	metricsAfter, _ := w.Metrics(b.ctx)

	cold, err := b.cold(cases[len(cases)-1])
	if err != nil {
		return err
	}

	scanCost, cpuPerFile, err := b.scanCost(cases, fuzzy)
	if err != nil {
		return err
	}
	b.report(cfg, scripts, cases, walls, cpus, bytesOut, total, allImages, cold, stageTable(metricsBefore, metricsAfter))
	b.whereTimeGoes(scripts, cases, cpus, scanCost)
	nw := walls[cases[len(cases)-1].name]
	b.fuzzyHashTradeOff(cases[len(cases)-1].name, cpuPerFile, bench.Median(nw["worker"]), bench.Median(nw[workerFuzzy]),
		bench.Median(nw[naiveDef.name]), bench.Median(nw[naiveFuzzy.name]))
	return nil
}

// cold times the black-box case on fresh workers: started, the photos uploaded, then the first
// batch published, so libvips is loaded and clamd's first scans of the process happen inside the
// timing. One fresh worker per run; the median.
func (b imageThroughput) cold(cs imageCase) (cold []float64, err error) {
	for run := range b.runs {
		wall, err := func() (wall time.Duration, err error) {
			w, err := b.startWorker("images", fmt.Sprintf("cold-%d", run), b.parallel, 1)
			if err != nil {
				return 0, err
			}
			defer stopWorker(w, &err)
			c, err := b.dial(w)
			if err != nil {
				return 0, err
			}
			defer c.Close()
			var ks []string
			for i := range cs.n {
				p := cs.photos[i%len(cs.photos)]
				k := "cold/" + filepath.Base(p.Path)
				if i < len(cs.photos) {
					if err := c.Upload(b.ctx, k, p.Path); err != nil {
						return 0, err
					}
				}
				ks = append(ks, k)
			}
			_, wall, err = c.RunBatch(b.ctx, ks)
			return wall, err
		}()
		if err != nil {
			return nil, fmt.Errorf("cold worker %s: %w", cs.name, err)
		}
		b.logf("images cold run %d %s: %d in %s", run+1, cs.name, cs.n, wall.Round(time.Millisecond))
		cold = append(cold, wall.Seconds())
	}
	return cold, nil
}

func variantBytes(vs []transcoder.ImageVariant) int64 {
	var n int64
	for _, v := range vs {
		n += v.Size
	}
	return n
}

// report writes the targets and the section of the throughput comparison.
func (b imageThroughput) report(cfg transcoder.ImageConfig, sc imageScripts, cases []imageCase, walls, cpus map[string]map[string][]float64,
	bytesOut map[string]map[string]int64, total map[string][]float64, allImages int, cold []float64, stages string) {
	b.rep.own("images", "throughput", "black box", "CPU per image", "output bytes")
	thr := func(n int, secs []float64) float64 { return float64(n) / bench.Median(secs) }
	nd, nf, nn, nr := sc.def.name, sc.fuzzy.name, sc.noScan.name, sc.restricted.name
	var rows [][]string
	worst := map[string]float64{"inproc": math.Inf(1), "naive": math.Inf(1), "noScan": math.Inf(1), "fuzzy": math.Inf(1), "cpu": 0, "cpuScan": 0,
		"cpuFetch": 0, "bytes": 0}
	var fetchCells []string // per input: the ratio against the baseline with the fetch
	worstName := map[string]string{}
	note := func(key, name string, v float64, higherIsWorse bool) {
		if (higherIsWorse && v > worst[key]) || (!higherIsWorse && v < worst[key]) {
			worst[key], worstName[key] = v, name
		}
	}
	med := func(xs []float64) string { return fmt.Sprintf("%.2f", bench.Median(xs)) }
	for _, cs := range cases {
		f, cp, by := walls[cs.name], cpus[cs.name], bytesOut[cs.name]
		ip, d, n, r, wk := thr(cs.n, f["in-process"]), thr(cs.n, f[nd]), thr(cs.n, f[nn]), thr(cs.n, f[nr]), thr(cs.n, f["worker"])
		fz, wf := thr(cs.n, f[nf]), thr(cs.n, f[workerFuzzy])
		cpuRatio := bench.Median(cp["worker"]) / bench.Median(cp["in-process"])
		// The same worker CPU against the two parts no worker can skip: the transform and clamd's scan of
		// the file (clamd's CPU measured in the same runs). Reported beside the target, not instead of it.
		cpuScanRatio := bench.Median(cp["worker"]) / (bench.Median(cp["in-process"]) + bench.Median(cp["clamd"]))
		// Issue 37's restatement of issue 23's bar: the same, plus a fetch of the same upload from the same
		// store (images_fetch.go), the part of a job's I/O no worker can skip either.
		cpuFetchRatio := bench.Median(cp["worker"]) / (bench.Median(cp["in-process"]) + bench.Median(cp["clamd"]) + bench.Median(cp[methodFetch]))
		fetchCells = append(fetchCells, fmt.Sprintf("%s %s (%.3f ÷ (%.3f + %.3f + %.3f))", cs.name, ratio(cpuFetchRatio),
			bench.Median(cp["worker"]), bench.Median(cp["in-process"]), bench.Median(cp["clamd"]), bench.Median(cp[methodFetch])))
		bytesRatio := float64(by["worker"]) / float64(by[nd])
		note("inproc", cs.name, wk/ip, false)
		note("naive", cs.name, wk/d, false)
		note("noScan", cs.name, wk/n, false)
		note("fuzzy", cs.name, wf/fz, false)
		note("cpu", cs.name, cpuRatio, true)
		note("cpuScan", cs.name, cpuScanRatio, true)
		note("cpuFetch", cs.name, cpuFetchRatio, true)
		note("bytes", cs.name, bytesRatio, true)
		rows = append(rows, []string{cs.name, cs.describe(), strconv.Itoa(cs.n),
			fmt.Sprintf("%.2f", ip), fmt.Sprintf("%.2f / %.2f", d, n), fmt.Sprintf("%.2f", r), fmt.Sprintf("%.2f", wk),
			ratio(wk / ip), fmt.Sprintf("%s / %s", ratio(wk/d), ratio(wk/n)), ratio(wk / r),
			fmt.Sprintf("%.2f / %.2f: %s", wf, fz, ratio(wf/fz)),
			fmt.Sprintf("%s / %s / %s / %s / %s", med(cp["in-process"]), med(cp[nn]), med(cp[nd]), med(cp[nr]), med(cp["worker"])),
			fmt.Sprintf("%s / %s; %s / %s", med(cp[nd+"/clamd"]), med(cp["clamd"]), med(cp[nf+"/clamd"]), med(cp[workerFuzzy+"/clamd"])),
			fmt.Sprintf("%s / %s", med(cp[nf]), med(cp[workerFuzzy])),
			fmt.Sprintf("%d / %d / %d (%+.1f %%)", by["worker"]>>10, by[nd]>>10, by[nr]>>10, 100*(bytesRatio-1))})
	}
	all := func(m string) float64 { return thr(allImages, total[m]) }
	ip, d, n, r, wk := all("in-process"), all(nd), all(nn), all(nr), all("worker")
	rows = append(rows, []string{"**all**", "", strconv.Itoa(allImages), fmt.Sprintf("%.2f", ip), fmt.Sprintf("%.2f / %.2f", d, n),
		fmt.Sprintf("%.2f", r), fmt.Sprintf("%.2f", wk), ratio(wk / ip), fmt.Sprintf("%s / %s", ratio(wk/d), ratio(wk/n)), ratio(wk / r),
		fmt.Sprintf("%.2f / %.2f: %s", all(workerFuzzy), all(nf), ratio(all(workerFuzzy)/all(nf))), "", "", "", ""})

	noisy := cases[len(cases)-1]
	nw := walls[noisy.name]
	// Issue 13's judgement: the worker against the fastest run of the script without a scan.
	bestNoScan := slicesMin(nw[nn])
	warm, coldMed := bench.Median(nw["worker"]), bench.Median(cold)
	// Issue 23's: the script with its clamdscan ÷ the worker, run by run (the two ran in the same
	// interleaved run, against the same clamd), with clamd at ClamAV's defaults and as shipped.
	perRun := func(script, worker string) (ratios []float64, cells []string) {
		for i := range min(len(nw[script]), len(nw[worker])) {
			ratios = append(ratios, nw[script][i]/nw[worker][i])
			cells = append(cells, fmt.Sprintf("%s (%s vs %s)", ratio(ratios[i]), secs(nw[script][i]), secs(nw[worker][i])))
		}
		return ratios, cells
	}
	fuzzyRatios, fuzzyCells := perRun(nf, workerFuzzy)
	deployRatios, deployCells := perRun(nd, "worker")
	noScanRatios, _ := perRun(nn, "worker")

	b.rep.row("images", "throughput, worker end to end ÷ in-process transform, worst input",
		fmt.Sprintf("all inputs %s (%.2f vs %.2f img/s); worst %s", ratio(wk/ip), wk, ip, worstName["inproc"]),
		ratio(worst["inproc"]), "≥ 0.95×", atLeast(worst["inproc"], 0.95))
	b.rep.row("images", "throughput, worker end to end ÷ naive script with libvips' defaults (`clamdscan` + 3× `vips thumbnail` per image, the worker's clamd), worst input",
		fmt.Sprintf("all inputs %s (%.2f vs %.2f img/s); worst %s; against the restricted script %s; against the script without its scan: all inputs %s, worst %s (%s)",
			ratio(wk/d), wk, d, worstName["naive"], ratio(wk/r), ratio(wk/n), ratio(worst["noScan"]), worstName["noScan"]),
		ratio(worst["naive"]), "≥ 1.5×", atLeast(worst["naive"], 1.5))
	b.rep.row("images", fmt.Sprintf("black box, clamd at ClamAV's defaults (`ScanImageFuzzyHash yes`) for worker and script: %d noisy 12 MP JPEGs, 2 at a time, "+
		"`clamdscan` + naive default script ÷ worker publish → last response, the lowest of the %d interleaved runs", noisy.n, len(fuzzyRatios)),
		fmt.Sprintf("run by run %s; all inputs %s", strings.Join(fuzzyCells, ", "), ratio(all(workerFuzzy)/all(nf))),
		ratio(slicesMin(fuzzyRatios)), "≥ 1.5× in each run (issue 23)", atLeast(slicesMin(fuzzyRatios), 1.5))
	b.rep.row("images", fmt.Sprintf("black box, clamd as shipped (deploy/clamav/clamd.conf, `ScanImageFuzzyHash no`) for worker and script: the same, the lowest of the %d runs", len(deployRatios)),
		fmt.Sprintf("run by run %s", strings.Join(deployCells, ", ")),
		ratio(slicesMin(deployRatios)), "≥ 1.5× in each run", atLeast(slicesMin(deployRatios), 1.5))
	b.rep.row("images", fmt.Sprintf("black box without a scan in the script (issue 13's bar): %d noisy 12 MP JPEGs in the store, 2 at a time, worker (clamd as shipped) publish → last response ÷ naive default script without `clamdscan` (its fastest run)", noisy.n),
		fmt.Sprintf("warm worker %s vs script %s (median %s; run by run %s); cold worker (fresh, first batch) %s: %s",
			secs(warm), secs(bestNoScan), secs(bench.Median(nw[nn])), ratiosList(noScanRatios), secs(coldMed), ratio(bestNoScan/coldMed)),
		ratio(bestNoScan/warm), "≥ 1.5×", atLeast(bestNoScan/warm, 1.5))
	b.rep.row("images", "CPU per image, worker + clamd ÷ in-process transform (decode + resize + encode alone), worst input",
		fmt.Sprintf("worst %s; for comparison, worker + clamd ÷ (in-process transform + clamd's CPU for the same scans), the "+
			"least a worker that scans every upload spends: worst %s (%s)", worstName["cpu"], ratio(worst["cpuScan"]), worstName["cpuScan"]),
		ratio(worst["cpu"]), "≤ 1.2×", atMost(worst["cpu"], 1.2))
	b.rep.row("images", "CPU per image, worker + clamd ÷ (in-process transform + clamd's CPU for the same scans + a fetch of the same upload "+
		"from the same store: the benchmark's Go client downloading it from the worker's embedded object store, its CPU and the worker process's "+
		"meanwhile), worst input",
		fmt.Sprintf("worst %s; per input, CPU s/img worker + clamd ÷ (transform + clamd + fetch): %s", worstName["cpuFetch"], strings.Join(fetchCells, "; ")),
		ratio(worst["cpuFetch"]), "≤ 1.05× (issue 37, restating issue 23)", atMost(worst["cpuFetch"], 1.05))
	b.rep.row("images", "output bytes, worker ÷ naive default script (three variants of one image), worst input",
		fmt.Sprintf("worst %s", worstName["bytes"]), fmt.Sprintf("%+.1f %%", 100*(worst["bytes"]-1)), "≤ +5 %", atMost(worst["bytes"], 1.05))

	var runRows [][]string
	for i := range len(nw["worker"]) {
		at := func(m string) string {
			if i < len(nw[m]) {
				return secs(nw[m][i])
			}
			return "–"
		}
		runRows = append(runRows, []string{strconv.Itoa(i + 1), at(nf), at(workerFuzzy), ratio(fuzzyRatios[i]),
			at(nd), at("worker"), ratio(deployRatios[i]), at(nn), ratio(noScanRatios[i])})
	}
	runRows = append(runRows, []string{"median", secs(bench.Median(nw[nf])), secs(bench.Median(nw[workerFuzzy])),
		ratio(bench.Median(nw[nf]) / bench.Median(nw[workerFuzzy])), secs(bench.Median(nw[nd])), secs(warm),
		ratio(bench.Median(nw[nd]) / warm), secs(bench.Median(nw[nn])), ratio(bench.Median(nw[nn]) / warm)})

	b.rep.section("Images: throughput",
		"%d images at a time (`--max-image-jobs %d`; every baseline runs %d at a time too), medians of %d runs, methods "+
			"interleaved: each worker runs right beside the scanning script it is compared with (the shipped one's also beside the "+
			"script without a scan), the groups rotated and the order within them alternated run by run. *worker*: `mediaworker run` subprocess, warm, the files already in its embedded "+
			"object store, requests published at once, timed from the first publish to the last response (download, "+
			"clamd scan of the finished file, detection, transform, three uploads, response). *in-process*: `transcoder.Images.Transform` "+
			"(the library calls the worker makes) in the benchmark process on the local file. *naive default*: the script a "+
			"site writes: `clamdscan` of the upload (against the worker's clamd, exit status checked), then three "+
			"`vips thumbnail` processes, one per variant, with libvips' own threading "+
			"(no `VIPS_CONCURRENCY`) and WebP defaults (no effort); *no scan*: the same without `clamdscan` (the bar before issue 23). "+
			"*naive restricted*: the scanning script with `VIPS_CONCURRENCY=1` and the worker's effort %d. *worker*'s clamd runs deploy/clamav/clamd.conf "+
			"(`ScanImageFuzzyHash no`), reached on its unix socket as `scripts/run.sh` sets it up, so the worker hands it "+
			"each downloaded file (FILDES, see *Scanning*), and the scripts' `clamdscan --fdpass` hands it theirs the same way; *fuzzy hash on*: a second worker and the script, "+
			"both against a second clamd that differs only by `ScanImageFuzzyHash yes`, ClamAV's default (see below). Both clamds run with `DisableCache yes`, "+
			"so every scan is a first scan, as every upload a site receives is new. Sizes and qualities are `transcoder.DefaultImageConfig()`: "+
			"%d/%d/%d px, Q %d/%d/%d. The commands are at the end of this file.\n\n%s\n"+
			"*CPU s/img*: user + system CPU seconds per image (in-process / naive default, no scan / naive default + `clamdscan` / "+
			"naive restricted + `clamdscan` / worker), each with the CPU its clamd spent on its scans, less disturbed by other load "+
			"than wall time; *clamd CPU s/img*: that clamd part, the script's / the worker's, with fuzzy hash off; then on. *bytes*: the three variants of one image in KiB "+
			"(worker / naive default / naive restricted), and the worker's against the naive default's.\n\n"+
			"**Black box, run by run** (issue 23: the %d noisy files, the script with its `clamdscan` ÷ the worker in each interleaved run, "+
			"against the same clamd): seconds per batch of %d.\n\n%s\n"+
			"Cold: %d fresh workers (clamd as shipped, one per run), each given the %d noisy files and timed over its first batch "+
			"(libvips loads and clamd sees the process's first scans inside it): median %s, vs %s warm.\n\n%s",
		b.parallel, b.parallel, b.parallel, b.runs, cfg.Effort, cfg.High, cfg.Medium, cfg.Low, cfg.QualityHigh,
		cfg.QualityMedium, cfg.QualityLow,
		table([]string{"input", "file", "images per run", "in-process img/s", "naive default img/s (+ clamdscan / no scan)", "naive restricted + clamdscan img/s",
			"worker img/s", "worker ÷ in-process", "worker ÷ naive default (+ clamdscan / no scan)", "worker ÷ naive restricted + clamdscan",
			"fuzzy hash on: worker / naive default + clamdscan img/s: ratio", "CPU s/img", "clamd CPU s/img", "CPU s/img, fuzzy hash on: script / worker", "bytes (KiB)"}, rows),
		noisy.n, noisy.n,
		table([]string{"run", "fuzzy hash on (ClamAV's default): script + clamdscan", "worker", "script ÷ worker",
			"as shipped (fuzzy hash off): script + clamdscan", "worker", "script ÷ worker", "script without a scan", "÷ worker (as shipped)"}, runRows),
		len(cold), noisy.n, secs(coldMed), secs(warm), stages)
	for _, s := range []naiveScript{sc.def, sc.restricted} {
		b.rep.command("# %s image baseline, per image, %d images at a time:\n"+
			"# (clamdscan.conf holds only LocalSocket, the compared worker's clamd: with fuzzy hash on, that clamd's; "+
			"the no-scan baseline is the same script without the clamdscan line)\n%s",
			s.name, b.parallel, strings.Join(s.commandLines(cfg), "\n"))
	}
}

// ratiosList is "1.62×, 1.70×, 1.55×".
func ratiosList(xs []float64) string {
	var s []string
	for _, x := range xs {
		s = append(s, ratio(x))
	}
	return strings.Join(s, ", ")
}

func slicesMin(xs []float64) float64 {
	m := math.Inf(1)
	for _, x := range xs {
		m = min(m, x)
	}
	return m
}

// whereTimeGoes splits the worker's CPU per image into the transform (the in-process figure),
// clamd, and the rest of the worker process (download from the object store, triage, uploads, the
// embedded NATS server), and adds clamd's cost per file with and without image fuzzy hashing.
func (b imageThroughput) whereTimeGoes(sc imageScripts, cases []imageCase, cpus map[string]map[string][]float64, scanCost string) {
	var rows [][]string
	for _, cs := range cases {
		cp := cpus[cs.name]
		ip, wk, cl, fe := bench.Median(cp["in-process"]), bench.Median(cp["worker"]), bench.Median(cp["clamd"]), bench.Median(cp[methodFetch])
		rest := wk - cl - ip
		rows = append(rows, []string{cs.name, fmt.Sprintf("%.2f", wk), fmt.Sprintf("%.2f (%.0f %%)", ip, 100*ip/wk),
			fmt.Sprintf("%.2f (%.0f %%)", cl, 100*cl/wk), fmt.Sprintf("%.2f (%.0f %%)", rest, 100*rest/wk),
			fmt.Sprintf("%.3f", fe), fmt.Sprintf("%+.3f", rest-fe),
			fmt.Sprintf("%.2f", bench.Median(cp[sc.noScan.name])),
			fmt.Sprintf("%.2f (clamd %.2f)", bench.Median(cp[sc.def.name]), bench.Median(cp[sc.def.name+"/clamd"]))})
	}
	b.rep.section("Images: where the worker's time goes",
		"CPU seconds per image from the timed runs above: the worker process plus clamd, split into the transform "+
			"(the in-process figure: decode, resize, encode), clamd's scan, and the rest of the worker process "+
			"(object store download and uploads, triage, the embedded NATS server, Go). *fetch*: the CPU of a fetch of the same upload "+
			"from the same store, measured in the same interleaved runs (the benchmark's Go client downloading it from the worker's embedded "+
			"object store with objstore.DownloadFile, as the worker's download does, over loopback TCP: the client's CPU plus the worker "+
			"process's, whose embedded server sends the chunks), and *rest beyond the fetch*: the rest of the worker minus that fetch, "+
			"what the worker spends that the baseline of issue 37 (transform + clamd + fetch) does not. The naive script's CPU is "+
			"beside it, without its scan and with it (vips, clamdscan and what clamd spent on the scan). On 2 cores, "+
			"2 jobs at a time, images/s is about 2 ÷ these seconds when the cores are busy.\n\n%s\n%s\n"+
			"The transform itself, profiled with `perf record` on the noisy JPEG (docs/operations.md, *Image tuning*): "+
			"WebP encoding about a third, the Lanczos resize to 2048 px about a quarter, JPEG decoding a fifth, page "+
			"faults of fresh buffers most of the rest.",
		table([]string{"input", "worker + clamd", "transform", "clamd", "rest of the worker", "fetch", "rest beyond the fetch",
			"naive default, no scan", "naive default + clamdscan"}, rows), scanCost)
}

// runWorkerBatch publishes a batch of cs through the worker behind c and returns the wall time from
// the first publish to the last response and the bytes of the first image's variants.
func runWorkerBatch(ctx context.Context, c *bench.Client, cs imageCase, keys map[string]string) (time.Duration, int64, error) {
	ks := make([]string, cs.n)
	for i := range ks {
		ks[i] = keys[cs.photos[i%len(cs.photos)].Path]
	}
	res, wall, err := c.RunBatch(ctx, ks)
	var bytes int64
	for _, r := range res {
		if r.Job.Key == ks[0] {
			for _, v := range r.Answer.Resp.Processed {
				bytes += v.Size
			}
			break
		}
	}
	return wall, bytes, err
}

// workerFuzzy is the method name of the worker whose clamd computes image fuzzy hashes (ClamAV's
// default, which deploy/clamav/clamd.conf turns off).
const workerFuzzy = "worker, clamd with fuzzy hash"

// methodFetch is the method name of the fetch baseline: the uploads downloaded from the shipped
// worker's store (images_fetch.go).
const methodFetch = "fetch"
