package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
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
