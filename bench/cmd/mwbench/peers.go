package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/mediaworker/mediaworker/bench"
	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/transcoder"
)

// The peers phase (issue 37): the worker beside another system doing the same job on the same photos,
// interleaved round by round in one run, each scanning every upload with the same clamd. The peer is
// sharp (npm, pinned in peers/sharp/package-lock.json, with its prebuilt libvips), driven by a small
// Node service (peers/sharp/peer.js) as a site using sharp would write it: it installs into the
// corpus cache with `npm ci`, as the tests install their npm reference code (testenv.NPMPackages).

// peerBurst is how many photos the burst submits at once (the 40); -quick halves it.
const peerBurst = 40

// peerPhotos are the photos of the comparison: the corpus's 12 MP JPEG and PNG and six of the noisy
// 12 MP JPEGs: eight different files, none of them made for this comparison. No HEIC: sharp's prebuilt
// libvips decodes AVIF but not HEVC ("Support for this compression format has not been built in").
func (b *bencher) peerPhotos() ([]Photo, error) {
	noisy, err := b.corpus.noisyPhotos(b.env, b.logf)
	if err != nil {
		return nil, err
	}
	photos := []Photo{b.corpus.photo("jpeg-12mp"), b.corpus.photo("png-12mp")}
	return append(photos, noisy[:6]...), nil
}

// peerSystem is one side of the comparison.
type peerSystem struct {
	name string
	// one runs photo i alone and returns when its variants are made.
	one func(i int) error
	// burst submits n jobs at once (photo i%len) and returns when all are done.
	burst func(n int) error
	cpu   func() time.Duration // the system's CPU so far, its clamd's included
	hwm   func() int64
}

// roundNums are one system's measures in one round.
type roundNums struct{ cpuOne, cpuBurst, wallOne, thr float64 }

// peersPhase compares the worker with sharp (peers.go's doc).
func (b *bencher) peersPhase() (err error) {
	photos, err := b.peerPhotos()
	if err != nil {
		return err
	}
	root, err := testenv.CacheDir()
	if err != nil {
		return err
	}
	dir, node, err := b.installSharp(filepath.Join(root, "bench"))
	if err != nil {
		return fmt.Errorf("installing sharp: %w", err)
	}
	cfg := transcoder.DefaultImageConfig()
	work := b.phaseDir("peers", "out")
	scan, err := newClamdScan(b.clamd, "deploy", filepath.Join(work, "clamdscan"))
	if err != nil {
		return err
	}
	inflight := b.parallel
	peer, err := startSharpPeer(b.ctx, node, dir, cfg, inflight, scan, filepath.Join(work, "sharp.log"))
	if err != nil {
		return err
	}
	defer peer.stop()
	w, err := b.startWorker("peers", "worker", inflight, 1)
	if err != nil {
		return err
	}
	defer stopWorker(w, &err)
	c, err := b.dial(w)
	if err != nil {
		return err
	}
	defer c.Close()
	share, err := newStoreFetch(w)
	if err != nil {
		return err
	}
	defer share.Close()
	// imgproxy where it can be built and started; where not, its rows say why and sharp's go on.
	imgproxy, imgproxyErr := b.startImgproxyPeer(cfg, photos, inflight, scan, work)
	if imgproxyErr != nil {
		b.logf("peers: imgproxy left out: %v", imgproxyErr)
	} else {
		defer func() {
			if imgproxy != nil {
				imgproxy.stop()
			}
		}()
	}
	keys := make([]string, len(photos))
	for i, p := range photos {
		keys[i] = "peers/" + filepath.Base(p.Path)
		if err := c.Upload(b.ctx, keys[i], p.Path); err != nil {
			return err
		}
	}
	burstN := peerBurst
	if b.quick {
		burstN /= 2
	}

	// Outputs: the first round's of each photo are kept for the comparison of bytes and SSIM.
	sharpOut := func(i int, keep bool) (string, error) {
		if keep {
			d := filepath.Join(work, "sharp", strconv.Itoa(i))
			return d, os.MkdirAll(d, 0o755)
		}
		return os.MkdirTemp(work, "sharp-")
	}
	workerBytes := make([]int64, len(photos))
	oneStages, burstStages := map[string]*stageAgg{}, map[string]*stageAgg{} // the worker's stage timings
	systems := []peerSystem{
		{name: "worker",
			one: func(i int) error {
				m0, _ := w.Metrics(b.ctx)
				defer func() { m1, _ := w.Metrics(b.ctx); addStages(oneStages, stageDeltas(m0, m1)) }()
				res, _, err := c.RunBatch(b.ctx, []string{keys[i]})
				if err == nil && len(res) == 1 {
					workerBytes[i] = 0
					for _, v := range res[0].Answer.Resp.Processed {
						workerBytes[i] += v.Size
					}
				}
				return err
			},
			burst: func(n int) error {
				ks := make([]string, n)
				for k := range ks {
					ks[k] = keys[k%len(keys)]
				}
				m0, _ := w.Metrics(b.ctx)
				_, _, err := c.RunBatch(b.ctx, ks)
				m1, _ := w.Metrics(b.ctx)
				addStages(burstStages, stageDeltas(m0, m1))
				return err
			},
			cpu: func() time.Duration { t, _ := bench.ProcessCPU(w.Pid()); return t + scan.cpu() },
			hwm: func() int64 { m, _ := w.Memory(); return m.HWM },
		},
		{name: "sharp",
			one: func(i int) error {
				out, err := sharpOut(i, true)
				if err != nil {
					return err
				}
				ch, err := peer.submit(photos[i].Path, out)
				if err != nil {
					return err
				}
				_, err = peer.wait(b.ctx, ch)
				return err
			},
			burst: func(n int) error {
				var chs []<-chan peerAnswer
				var dirs []string
				defer func() {
					for _, d := range dirs {
						_ = os.RemoveAll(d)
					}
				}()
				for k := range n {
					out, err := sharpOut(k, false)
					if err != nil {
						return err
					}
					dirs = append(dirs, out)
					ch, err := peer.submit(photos[k%len(photos)].Path, out)
					if err != nil {
						return err
					}
					chs = append(chs, ch)
				}
				for _, ch := range chs {
					if _, err := peer.wait(b.ctx, ch); err != nil {
						return err
					}
				}
				return nil
			},
			// The Node process and the clamdscan processes it ran (waited for), and clamd's scans.
			cpu: func() time.Duration { t, _ := bench.ProcessTreeCPU(peer.pid()); return t + scan.cpu() },
			hwm: func() int64 { m, _ := bench.ReadMemory(peer.pid()); return m.HWM },
		},
	}
	if imgproxy != nil {
		systems = append(systems, imgproxy.system(b.ctx, photos, work))
	}

	// Warm-up: every photo once through each (loaders, page cache, the worker's first jobs, V8's JIT).
	for k := 0; k < len(systems); k++ {
		s := systems[k]
		for i := range photos {
			if err := s.one(i); err != nil {
				if s.name == "imgproxy" { // a peer that does not answer here is left out, as one that does not build
					imgproxyErr = fmt.Errorf("warm-up %s: %w", photos[i].Name, err)
					b.logf("peers: imgproxy left out: %v", imgproxyErr)
					imgproxy.stop()
					imgproxy, systems = nil, systems[:k]
					break
				}
				return fmt.Errorf("warm-up %s %s: %w", s.name, photos[i].Name, err)
			}
		}
	}

	nums := map[string][]roundNums{}
	var shareCPU []float64 // the worker's store work alone, CPU-s per photo, per round (peers_store.go)
	variantDirs := make([]string, len(photos))
	for i := range photos {
		variantDirs[i] = filepath.Join(work, "sharp", strconv.Itoa(i)) // sharp's first outputs: the same sizes as the worker's
	}
	for run := range b.runs {
		sc, err := storeShare(b.ctx, share, c.Bucket, keys, variantDirs, work)
		if err != nil {
			return err
		}
		shareCPU = append(shareCPU, sc)
		for k := range systems {
			s := systems[(k+run)%len(systems)] // rotate who goes first
			var r roundNums
			c0, t0 := s.cpu(), time.Now()
			for i := range photos {
				if err := s.one(i); err != nil {
					return fmt.Errorf("%s one at a time %s: %w", s.name, photos[i].Name, err)
				}
			}
			r.wallOne = time.Since(t0).Seconds() / float64(len(photos))
			r.cpuOne = (s.cpu() - c0).Seconds() / float64(len(photos))
			c0, t0 = s.cpu(), time.Now()
			if err := s.burst(burstN); err != nil {
				return fmt.Errorf("%s burst: %w", s.name, err)
			}
			wall := time.Since(t0).Seconds()
			r.thr = float64(burstN) / wall
			r.cpuBurst = (s.cpu() - c0).Seconds() / float64(burstN)
			nums[s.name] = append(nums[s.name], r)
			b.logf("peers run %d %s: one at a time %.2f s/img (%.2f CPU-s/img); burst of %d: %.2f img/s, %.2f CPU-s/img, %.0f %% of %d cores",
				run+1, s.name, r.wallOne, r.cpuOne, burstN, r.thr, r.cpuBurst, 100*r.cpuBurst*r.thr/float64(b.parallel), b.parallel)
		}
	}

	// Memory: a fresh worker given the burst as the issue states it, every photo uploaded at once.
	upHWM, jobsHWM, memWall, err := b.burstMemory(photos, burstN, inflight, "nats")
	if err != nil {
		return fmt.Errorf("burst memory: %w", err)
	}
	b.logf("peers burst memory: VmHWM %s after %d uploads at once, %s after the %d jobs (%s)", mib(float64(upHWM)), burstN,
		mib(float64(jobsHWM)), burstN, memWall.Round(time.Millisecond))

	// The same with the worker on S3 (MinIO, as the leak run uses): the photos put in the bucket
	// first, then the requests at once.
	s3Rest, s3HWM, s3Wall, s3Err := b.burstMemory(photos, burstN, inflight, "s3")
	if s3Err != nil {
		b.logf("peers burst memory on S3 FAILED: %v", s3Err)
	} else {
		b.logf("peers burst memory on S3: VmHWM %s after the %d jobs (%s)", mib(float64(s3HWM)), burstN, s3Wall.Round(time.Millisecond))
	}

	// Same pictures? Bytes per photo and SSIM per variant against a lossless reference.
	peerNames := []string{"sharp"}
	if imgproxy != nil {
		peerNames = append(peerNames, "imgproxy")
	}
	qualities, qtables, err := b.peerQuality(cfg, photos, work, workerBytes, peerNames)
	if err != nil {
		return err
	}
	quality, qrows := qualities["sharp"], qtables["sharp"]

	ratios := func(f func(r roundNums) float64) []float64 {
		var xs []float64
		for i := range nums["worker"] {
			xs = append(xs, f(nums["worker"][i])/f(nums["sharp"][i]))
		}
		return xs
	}
	spread := func(xs []float64) (float64, string) {
		lo, hi := bench.MinMax(xs)
		return bench.Median(xs), fmt.Sprintf("%s (%s–%s)", ratio(bench.Median(xs)), ratio(lo), ratio(hi))
	}
	cpuMed, cpuCell := spread(ratios(func(r roundNums) float64 { return r.cpuBurst }))
	cpuOneMed, cpuOneCell := spread(ratios(func(r roundNums) float64 { return r.cpuOne }))
	wallMed, wallCell := spread(ratios(func(r roundNums) float64 { return r.wallOne }))
	thrMed, thrCell := spread(ratios(func(r roundNums) float64 { return r.thr }))
	whwm, shwm := systems[0].hwm(), systems[1].hwm()
	util := func(name string) string {
		var xs []float64
		for _, r := range nums[name] {
			xs = append(xs, r.cpuBurst*r.thr/float64(b.parallel))
		}
		return fmt.Sprintf("%.0f %%", 100*bench.Median(xs))
	}
	med := func(name string, f func(r roundNums) float64) float64 {
		var xs []float64
		for _, r := range nums[name] {
			xs = append(xs, f(r))
		}
		return bench.Median(xs)
	}

	b.rep.own("peers", "sharp:")
	b.rep.row("peers", fmt.Sprintf("sharp: CPU per image, worker + clamd ÷ sharp + clamdscan + clamd, burst of %d, %d in flight", burstN, inflight),
		fmt.Sprintf("median (range) of %d rounds %s; one at a time %s; %s", b.runs, cpuCell, cpuOneCell, quality),
		ratio(cpuMed), "≤ 1.0×", atMost(cpuMed, 1.0))
	_ = cpuOneMed
	var netRatios []float64
	for i := range nums["worker"] {
		netRatios = append(netRatios, (nums["worker"][i].cpuBurst-shareCPU[i])/nums["sharp"][i].cpuBurst)
	}
	netMed, netCell := spread(netRatios)
	b.rep.row("peers", "sharp: CPU per image for the work both do, (worker + clamd − the worker's store work) ÷ sharp + clamdscan + clamd, burst",
		fmt.Sprintf("median (range) %s; the store work (fetch the upload from the embedded store, SHA-256 checked; put the three variants), "+
			"measured alone in each round: %.3f CPU-s/img, %.0f %% of the worker's %.2f", netCell, bench.Median(shareCPU),
			100*bench.Median(shareCPU)/med("worker", func(r roundNums) float64 { return r.cpuBurst }),
			med("worker", func(r roundNums) float64 { return r.cpuBurst })),
		ratio(netMed), "reported (the peers read and write local files)", "reported")
	b.rep.row("peers", "sharp: wall per image, one photo at a time, worker ÷ sharp",
		fmt.Sprintf("median (range) %s", wallCell), ratio(wallMed), "≤ 1.0×", atMost(wallMed, 1.0))
	b.rep.row("peers", fmt.Sprintf("sharp: throughput, %d photos at once, %d in flight, worker ÷ sharp", burstN, inflight),
		fmt.Sprintf("median (range) %s; %.2f vs %.2f img/s; cores busy %s vs %s", thrCell,
			med("worker", func(r roundNums) float64 { return r.thr }), med("sharp", func(r roundNums) float64 { return r.thr }),
			util("worker"), util("sharp")),
		ratio(thrMed), "≥ 1.1×", atLeast(thrMed, 1.1))
	b.rep.row("peers", fmt.Sprintf("sharp: worker VmHWM, a fresh worker, %d photos uploaded at once into its embedded store, then %d requests at once", burstN, burstN),
		fmt.Sprintf("%s after the uploads, %s after the jobs (%.2f img/s); over the whole comparison: worker %s, sharp's Node process %s",
			mib(float64(upHWM)), mib(float64(jobsHWM)), float64(burstN)/memWall.Seconds(), mib(float64(whwm)), mib(float64(shwm))),
		mib(float64(jobsHWM)), "≤ 300 MiB", atMost(float64(jobsHWM), 300<<20))
	b.s3MemoryRow(burstN, inflight, s3Rest, s3HWM, s3Wall, s3Err)

	var rrows [][]string
	for i := range nums["worker"] {
		wk, sh := nums["worker"][i], nums["sharp"][i]
		rrows = append(rrows, []string{strconv.Itoa(i + 1),
			fmt.Sprintf("%.3f", shareCPU[i]),
			fmt.Sprintf("%.2f / %.2f: %s", wk.cpuBurst, sh.cpuBurst, ratio(wk.cpuBurst/sh.cpuBurst)),
			fmt.Sprintf("%.2f / %.2f: %s", wk.cpuOne, sh.cpuOne, ratio(wk.cpuOne/sh.cpuOne)),
			fmt.Sprintf("%.2f / %.2f: %s", wk.wallOne, sh.wallOne, ratio(wk.wallOne/sh.wallOne)),
			fmt.Sprintf("%.2f / %.2f: %s", wk.thr, sh.thr, ratio(wk.thr/sh.thr)),
			fmt.Sprintf("%.0f %% / %.0f %%", 100*wk.cpuBurst*wk.thr/float64(b.parallel), 100*sh.cpuBurst*sh.thr/float64(b.parallel))})
	}
	var names []string
	for _, p := range photos {
		names = append(names, p.Name)
	}
	b.rep.section("Peers: sharp",
		"The worker beside sharp (%s; npm, installed by the benchmark with `npm ci` from bench/cmd/mwbench/peers/sharp/package-lock.json "+
			"into the corpus cache, its prebuilt libvips from the registry), in one run, interleaved round by round (who goes first "+
			"rotates, imgproxy included where it runs), on %d photos (%s). Both make the default trio: WebP %d/%d/%d px (fit inside, never enlarged), Q %d/%d/%d, "+
			"effort %d, metadata stripped, sRGB. *worker*: `mediaworker run`, the photos in its embedded store, `--max-image-jobs %d`, "+
			"requests published, timed to the last response. *sharp*: a Node service (peers/sharp/peer.js) fed the same jobs on stdin, at "+
			"most %d at once: `clamdscan --fdpass` of the file against the worker's clamd (deploy config), one decode shrunk to 2048 px "+
			"held raw, the three encodes at once (`Promise.all`), sharp's defaults otherwise. *one at a time*: the %d photos one after "+
			"another, wall and CPU per image; *burst*: %d jobs submitted at once (the photos in turn), %d in flight. CPU: user + system "+
			"seconds of the worker process, or of the Node process and the clamdscan processes it waited for, plus what clamd spent "+
			"meanwhile. *cores busy*: CPU seconds ÷ wall ÷ %d cores. Worker / sharp: ratio, per round. *store work alone*: what the "+
			"worker's job holds that the peers' do not (they read the photo from a local file and write local files), measured in each "+
			"round by the benchmark's Go client against the worker's embedded store: each upload fetched as the worker's download "+
			"does it (chunks through the embedded server, SHA-256 checked) and three variants of its size put back; CPU of the client "+
			"and of the worker process (its server) meanwhile (bench/cmd/mwbench/peers_store.go).\n\n%s\n"+
			"Output: bytes of the three variants, worker ÷ sharp, per photo, and SSIM (ffmpeg's `ssim` filter, all planes) of each "+
			"variant against a lossless reference made from the same photo by `vips thumbnail` at that size.\n\n%s\n"+
			"The worker's own stage timings over its bursts (`mediaworker_stage_duration_seconds`, mean per job; uploads happen "+
			"inside *transforming*; *waiting for memory* is time a job held a slot's turn but waited for the lane's memory budget), one at a time "+
			"(warm-up included) and over the bursts:\n\n%s\n%s",
		peer.versions, len(photos), strings.Join(names, ", "), cfg.High, cfg.Medium, cfg.Low, cfg.QualityHigh, cfg.QualityMedium,
		cfg.QualityLow, cfg.Effort, inflight, inflight, len(photos), burstN, inflight, b.parallel,
		table([]string{"round", "worker's store work alone, CPU s/img", "CPU s/img, burst", "CPU s/img, one at a time", "wall s/img, one at a time", "burst img/s", "cores busy in the burst"}, rrows),
		qrows, stageRows(oneStages), stageRows(burstStages))
	b.rep.command("# peers: sharp (bench/cmd/mwbench/peers/sharp/peer.js, fed JSON jobs on stdin), per job:\n"+
		"clamdscan --config-file=<LocalSocket of the worker's clamd> --fdpass --no-summary <photo>\n"+
		"sharp(photo).rotate().resize(%d, %d, {fit: 'inside', withoutEnlargement: true}).raw() → "+
		"3 × sharp(raw).resize(size).webp({quality, effort: %d}), at once", cfg.High, cfg.High, cfg.Effort)
	var imgproxyHWM int64
	if imgproxy != nil {
		m, _ := bench.ReadMemory(imgproxy.pid())
		imgproxyHWM = m.HWM
	}
	b.imgproxyReport(imgproxy, imgproxyErr, nums, burstN, inflight, qualities["imgproxy"], qtables["imgproxy"], imgproxyHWM)
	return nil
}

var ssimAll = regexp.MustCompile(`All:([0-9.]+)`)

// ssim is ffmpeg's SSIM (all planes) of a against ref, ref scaled to a's size if they differ.
func ssim(ctx context.Context, a, ref string) (float64, error) {
	out, err := exec.CommandContext(ctx, "ffmpeg", "-nostdin", "-hide_banner", "-nostats", "-i", a, "-i", ref,
		"-lavfi", "[1:v][0:v]scale2ref=flags=lanczos[r][c];[c][r]ssim", "-f", "null", "-").CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("ffmpeg ssim %s: %v: %s", a, err, tailString(string(out)))
	}
	m := ssimAll.FindAllStringSubmatch(string(out), -1)
	if m == nil {
		return 0, fmt.Errorf("ffmpeg ssim %s: no SSIM in its output: %s", a, tailString(string(out)))
	}
	return strconv.ParseFloat(m[len(m)-1][1], 64)
}

func tailString(s string) string {
	if len(s) > 600 {
		return s[len(s)-600:]
	}
	return s
}

// peerQuality compares the outputs: the worker's (made again in-process by the same library calls, and
// checked to weigh what the worker's response said) and each peer's kept from its first one-at-a-time
// run (work/<peer>/<photo index>/<variant>.webp). It returns, per peer, a one-line summary and a table.
func (b *bencher) peerQuality(cfg transcoder.ImageConfig, photos []Photo, work string, workerBytes []int64, peers []string) (summary, tbl map[string]string, err error) {
	images, err := transcoder.NewImages(cfg)
	if err != nil {
		return nil, nil, err
	}
	rows := map[string][][]string{}
	worstBytes, worstSSIM := map[string]float64{}, map[string]float64{}
	for i, p := range photos {
		wdir := filepath.Join(work, "worker", strconv.Itoa(i))
		if err := os.MkdirAll(wdir, 0o755); err != nil {
			return nil, nil, err
		}
		res, err := images.Transform(b.ctx, p.Path, wdir)
		if err != nil {
			return nil, nil, fmt.Errorf("in-process transform of %s: %w", p.Name, err)
		}
		if got := variantBytes(res.Variants); got != workerBytes[i] {
			return nil, nil, fmt.Errorf("%s: the in-process transform made %d bytes, the worker's response said %d", p.Name, got, workerBytes[i])
		}
		peerBytes := map[string]int64{}
		ssims := map[string][]string{}
		for _, v := range res.Variants {
			ref := filepath.Join(wdir, v.Quality+"-ref.png")
			size := strconv.Itoa(max(v.Width, v.Height))
			if err := runQuiet(b.ctx, nil, "vips", "thumbnail", p.Path, ref, size, "--height", size, "--size", "down"); err != nil {
				return nil, nil, err
			}
			sw, err := ssim(b.ctx, v.Path, ref)
			if err != nil {
				return nil, nil, err
			}
			for _, peer := range peers {
				sp := filepath.Join(work, peer, strconv.Itoa(i), v.Quality+".webp")
				peerBytes[peer] += fileSize(sp)
				ss, err := ssim(b.ctx, sp, ref)
				if err != nil {
					return nil, nil, err
				}
				if math.Abs(sw-ss) > math.Abs(worstSSIM[peer]) {
					worstSSIM[peer] = sw - ss
				}
				ssims[peer] = append(ssims[peer], fmt.Sprintf("%s %.4f / %.4f", v.Quality, sw, ss))
			}
		}
		for _, peer := range peers {
			br := float64(workerBytes[i])/float64(peerBytes[peer]) - 1
			if math.Abs(br) > math.Abs(worstBytes[peer]) {
				worstBytes[peer] = br
			}
			rows[peer] = append(rows[peer], []string{p.Name, fmt.Sprintf("%d / %d (%+.1f %%)", workerBytes[i]>>10, peerBytes[peer]>>10, 100*br),
				strings.Join(ssims[peer], "; ")})
		}
	}
	summary, tbl = map[string]string{}, map[string]string{}
	for _, peer := range peers {
		same := "same pictures"
		if math.Abs(worstBytes[peer]) > 0.03 || math.Abs(worstSSIM[peer]) > 0.002 {
			same = "NOT the same pictures (bytes beyond ±3 % or SSIM beyond ±0.002)"
		}
		summary[peer] = fmt.Sprintf("outputs: bytes worker ÷ %s worst %+.1f %%, SSIM worker − %s worst %+.4f: %s", peer, 100*worstBytes[peer],
			peer, worstSSIM[peer], same)
		tbl[peer] = table([]string{"photo", "bytes KiB, worker / " + peer, "SSIM worker / " + peer}, rows[peer]) + "\n" + summary[peer] + "\n"
	}
	return summary, tbl, nil
}
