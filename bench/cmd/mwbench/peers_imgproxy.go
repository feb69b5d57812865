package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mediaworker/mediaworker/bench"
	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/transcoder"
)

// The peers phase's second peer (issue 37 item 5): imgproxy, the Go image server on libvips, built by
// the benchmark from the Go module proxy (testenv.EnsureImgproxy) against the machine's libvips (the
// one the worker links), run as a service on loopback with the photos on its local filesystem. A job
// is what a site in front of imgproxy would do for an upload: `clamdscan --fdpass` of the file against
// the worker's clamd, then the three variants requested at once (as sharp's peer encodes them at
// once), at most `inflight` jobs at a time. imgproxy answers each request from the source: it decodes
// (shrink-on-load) once per variant, where the worker and sharp decode once per job; that is how
// imgproxy works, and the section says so.

// imgproxyPeer is the running imgproxy and the jobs' client side.
type imgproxyPeer struct {
	cmd      *exec.Cmd
	base     string // http://127.0.0.1:PORT
	root     string // IMGPROXY_LOCAL_FILESYSTEM_ROOT: the photos, linked or copied in
	client   *http.Client
	cfg      transcoder.ImageConfig
	scan     clamdScan
	slots    chan struct{} // jobs in flight
	scanCPU  atomic.Int64  // ns of user + system CPU of the clamdscan processes run so far
	versions string
	done     chan struct{}
}

// startImgproxyPeer builds (once, cached) and starts imgproxy with the worker's settings, serving the
// photos from a directory of its own under work.
func (b *bencher) startImgproxyPeer(cfg transcoder.ImageConfig, photos []Photo, inflight int, scan clamdScan, work string) (*imgproxyPeer, error) {
	bin, err := testenv.EnsureImgproxy(b.logf)
	if err != nil {
		return nil, fmt.Errorf("building imgproxy %s: %w", testenv.ImgproxyVersion, err)
	}
	root := filepath.Join(work, "imgproxy-src")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	for _, p := range photos {
		if err := linkOrCopy(p.Path, filepath.Join(root, filepath.Base(p.Path))); err != nil {
			return nil, fmt.Errorf("placing %s for imgproxy: %w", p.Name, err)
		}
	}
	var addr string
	if err := b.env.Do(func() { addr = testenv.FreeAddr(b.env) }); err != nil {
		return nil, err
	}
	logPath := filepath.Join(work, "imgproxy.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.CommandContext(b.ctx, bin)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + work,
		"IMGPROXY_BIND=" + addr,
		"IMGPROXY_LOCAL_FILESYSTEM_ROOT=" + root,
		"IMGPROXY_WORKERS=" + strconv.Itoa(inflight), // processing slots: the worker's image slots
		"IMGPROXY_WEBP_EFFORT=" + strconv.Itoa(cfg.Effort),
		"IMGPROXY_STRIP_METADATA=true",
		"IMGPROXY_KEEP_COPYRIGHT=false",     // the worker keeps no EXIF at all
		"IMGPROXY_STRIP_COLOR_PROFILE=true", // to sRGB, profile dropped, as the worker does
		"IMGPROXY_AUTO_ROTATE=true",
		"IMGPROXY_LOG_LEVEL=warn",
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting imgproxy: %w", err)
	}
	p := &imgproxyPeer{cmd: cmd, base: "http://" + addr, root: root, cfg: cfg, scan: scan,
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}, Timeout: 2 * time.Minute},
		slots:  make(chan struct{}, inflight), done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := p.client.Get(p.base + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case <-p.done:
			return nil, fmt.Errorf("imgproxy exited before it was ready: %s", tailFileText(logPath))
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("imgproxy did not answer /health within 30 s: %s", tailFileText(logPath))
		}
	}
	v, _ := exec.Command(bin, "version").Output()
	lv, _ := exec.Command("pkg-config", "--modversion", "vips").Output()
	p.versions = fmt.Sprintf("imgproxy %s, built by the benchmark against the machine's libvips %s", strings.TrimSpace(string(v)),
		strings.TrimSpace(string(lv)))
	return p, nil
}

func (p *imgproxyPeer) pid() int { return p.cmd.Process.Pid }

// cpu is imgproxy's CPU so far, the clamdscan processes' and clamd's included.
func (p *imgproxyPeer) cpu() time.Duration {
	t, _ := bench.ProcessCPU(p.pid())
	return t + time.Duration(p.scanCPU.Load()) + p.scan.cpu()
}

// stop ends imgproxy (SIGTERM: it finishes what it serves) and waits.
func (p *imgproxyPeer) stop() {
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	p.client.CloseIdleConnections()
}

// url is the processing URL of one variant: fit inside size×size, never enlarged, WebP at quality.
// Unsigned ("insecure"): no key is configured, as on a loopback service.
func (p *imgproxyPeer) url(photo string, size, quality int) string {
	return fmt.Sprintf("%s/insecure/rs:fit:%d:%d:0/q:%d/plain/local:///%s@webp", p.base, size, size, quality, filepath.Base(photo))
}

// job scans photo, then requests its three variants at once; with out set, each is written there as
// <name>.webp. It returns the variants' bytes.
func (p *imgproxyPeer) job(ctx context.Context, photo, out string) (int64, error) {
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	defer func() { <-p.slots }()
	if err := p.clamdscan(ctx, photo); err != nil {
		return 0, err
	}
	vs := []struct {
		name          string
		size, quality int
	}{{"high", p.cfg.High, p.cfg.QualityHigh}, {"medium", p.cfg.Medium, p.cfg.QualityMedium}, {"low", p.cfg.Low, p.cfg.QualityLow}}
	sizes := make([]int64, len(vs))
	errs := make([]error, len(vs))
	var wg sync.WaitGroup
	for i, v := range vs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dst := ""
			if out != "" {
				dst = filepath.Join(out, v.name+".webp")
			}
			sizes[i], errs[i] = p.get(ctx, p.url(photo, v.size, v.quality), dst)
		}()
	}
	wg.Wait()
	var total int64
	for _, n := range sizes {
		total += n
	}
	return total, errors.Join(errs...)
}

// get fetches one variant; a status other than 200 or a body that is not WebP is an error.
func (p *imgproxyPeer) get(ctx context.Context, url, dst string) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("imgproxy %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 600))
		return 0, fmt.Errorf("imgproxy %s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	if ct := resp.Header.Get("Content-Type"); ct != "image/webp" {
		return 0, fmt.Errorf("imgproxy %s: Content-Type %q, want image/webp", url, ct)
	}
	var w io.Writer = io.Discard
	if dst != "" {
		f, err := os.Create(dst)
		if err != nil {
			return 0, err
		}
		defer f.Close()
		w = f
	}
	n, err := io.Copy(w, resp.Body)
	if err != nil {
		return n, fmt.Errorf("imgproxy %s: reading the body: %w", url, err)
	}
	return n, nil
}

// clamdscan scans photo as clamdScan.scan does, keeping the process's CPU for cpu().
func (p *imgproxyPeer) clamdscan(ctx context.Context, photo string) error {
	cmd := exec.CommandContext(ctx, "clamdscan", p.scan.args(photo)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	out, err := cmd.CombinedOutput()
	if cmd.ProcessState != nil {
		p.scanCPU.Add(int64(cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()))
	}
	if err != nil {
		return fmt.Errorf("clamdscan %s: %v: %s", filepath.Base(photo), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// imgproxySystem is the peer as one side of the comparison; the first round's outputs of photo i are
// kept in work/imgproxy/<i> for peerQuality.
func (p *imgproxyPeer) system(ctx context.Context, photos []Photo, work string) peerSystem {
	return peerSystem{name: "imgproxy",
		one: func(i int) error {
			out := filepath.Join(work, "imgproxy", strconv.Itoa(i))
			if err := os.MkdirAll(out, 0o755); err != nil {
				return err
			}
			_, err := p.job(ctx, photos[i].Path, out)
			return err
		},
		burst: func(n int) error {
			errs := make([]error, n)
			var wg sync.WaitGroup
			for k := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, errs[k] = p.job(ctx, photos[k%len(photos)].Path, "")
				}()
			}
			wg.Wait()
			return errors.Join(errs...)
		},
		cpu: p.cpu,
		hwm: func() int64 { m, _ := bench.ReadMemory(p.pid()); return m.HWM },
	}
}

// imgproxyReport writes imgproxy's targets rows (reported; the bars are against sharp) and its section,
// or, when it could not be built or started, one row saying why.
func (b *bencher) imgproxyReport(p *imgproxyPeer, startErr error, nums map[string][]roundNums, burstN, inflight int,
	quality, qtable string, hwm int64) {
	b.rep.own("peers", "imgproxy:")
	const target, status = "reported (no bar: the bars are against sharp)", "reported"
	if startErr != nil {
		b.rep.row("peers", "imgproxy: not measured", oneLine(startErr.Error()), "—", target, "n/a (imgproxy could not run here)")
		return
	}
	rs := func(f func(r roundNums) float64) []float64 {
		var xs []float64
		for i := range nums["worker"] {
			xs = append(xs, f(nums["worker"][i])/f(nums["imgproxy"][i]))
		}
		return xs
	}
	cell := func(xs []float64) string {
		lo, hi := bench.MinMax(xs)
		return fmt.Sprintf("%s (%s–%s)", ratio(bench.Median(xs)), ratio(lo), ratio(hi))
	}
	med := func(name string, f func(r roundNums) float64) float64 {
		var xs []float64
		for _, r := range nums[name] {
			xs = append(xs, f(r))
		}
		return bench.Median(xs)
	}
	busy := func(r roundNums) float64 { return r.cpuBurst * r.thr / float64(b.parallel) }
	cpuB := rs(func(r roundNums) float64 { return r.cpuBurst })
	cpuO := rs(func(r roundNums) float64 { return r.cpuOne })
	wall := rs(func(r roundNums) float64 { return r.wallOne })
	thr := rs(func(r roundNums) float64 { return r.thr })
	b.rep.row("peers", fmt.Sprintf("imgproxy: CPU per image, worker + clamd ÷ imgproxy + clamdscan + clamd, burst of %d, %d in flight", burstN, inflight),
		fmt.Sprintf("median (range) of %d rounds %s; one at a time %s; %s", len(cpuB), cell(cpuB), cell(cpuO), quality),
		ratio(bench.Median(cpuB)), target, status)
	b.rep.row("peers", "imgproxy: wall per image, one photo at a time, worker ÷ imgproxy",
		fmt.Sprintf("median (range) %s", cell(wall)), ratio(bench.Median(wall)), target, status)
	b.rep.row("peers", fmt.Sprintf("imgproxy: throughput, %d photos at once, %d in flight, worker ÷ imgproxy", burstN, inflight),
		fmt.Sprintf("median (range) %s; %.2f vs %.2f img/s; cores busy %.0f %% vs %.0f %%; imgproxy's VmHWM over the comparison %s", cell(thr),
			med("worker", func(r roundNums) float64 { return r.thr }), med("imgproxy", func(r roundNums) float64 { return r.thr }),
			100*med("worker", busy), 100*med("imgproxy", busy), mib(float64(hwm))),
		ratio(bench.Median(thr)), target, status)

	var rows [][]string
	for i := range nums["worker"] {
		wk, ip := nums["worker"][i], nums["imgproxy"][i]
		rows = append(rows, []string{strconv.Itoa(i + 1),
			fmt.Sprintf("%.2f / %.2f: %s", wk.cpuBurst, ip.cpuBurst, ratio(wk.cpuBurst/ip.cpuBurst)),
			fmt.Sprintf("%.2f / %.2f: %s", wk.cpuOne, ip.cpuOne, ratio(wk.cpuOne/ip.cpuOne)),
			fmt.Sprintf("%.2f / %.2f: %s", wk.wallOne, ip.wallOne, ratio(wk.wallOne/ip.wallOne)),
			fmt.Sprintf("%.2f / %.2f: %s", wk.thr, ip.thr, ratio(wk.thr/ip.thr)),
			fmt.Sprintf("%.0f %% / %.0f %%", 100*busy(wk), 100*busy(ip))})
	}
	cfg := p.cfg
	b.rep.section("Peers: imgproxy",
		"The worker beside imgproxy (%s: `go mod download` of github.com/imgproxy/imgproxy/v3@%s from the Go module proxy and "+
			"`go build` in it, cached beside the other tools the benchmark builds), in the same run and rounds as *Peers: sharp* "+
			"(worker, sharp and imgproxy take turns going first), on the same photos. imgproxy runs as a service on loopback, the "+
			"photos on its local filesystem (`IMGPROXY_LOCAL_FILESYSTEM_ROOT`), `IMGPROXY_WORKERS=%d` (its processing slots: the "+
			"worker's image slots; libvips runs one thread per request, imgproxy's default), `IMGPROXY_WEBP_EFFORT=%d`, metadata "+
			"stripped (copyright too), colour profile applied to sRGB and dropped, EXIF orientation applied. A job, at most %d at "+
			"once (the benchmark's client): `clamdscan --fdpass` of the file against the worker's clamd, then the three variants "+
			"requested at once, `rs:fit:S:S:0/q:Q` as WebP (fit inside, never enlarged) with the worker's sizes and qualities; "+
			"the bodies are read to the end (kept on disk in the first one-at-a-time round, for the output check). "+
			"What is not equal: imgproxy makes each variant from the source, so it decodes the photo (shrunk on load) three times "+
			"per job where the worker and sharp decode it once; it gets its files from a local directory where the worker "+
			"downloads from its object store and uploads the variants; its three requests of a job share its %d slots with the "+
			"other job's. CPU: user + system seconds of the imgproxy process, the clamdscan processes and clamd. Worker / "+
			"imgproxy: ratio, per round; no bar (the issue's bars are against sharp).\n\n%s\n"+
			"Output: as for sharp, against the same lossless references. imgproxy's pictures differ from the worker's (and "+
			"sharp's) more than sharp's do, and not from its settings: its 2048 px variant is byte for byte what Debian's "+
			"libvips 8.14 makes with `vips resize` or `vips thumbnail` at Q 82, effort 2 (checked by hand on noisy-12mp-1 and "+
			"-3), whose 8-bit reduce is a 6-bit approximation of Lanczos, where the worker resizes with the exact Lanczos "+
			"that sharp's libvips 8.17 uses (transcoder/vips); its smaller variants are made from the source, not from the "+
			"2048 px one.\n\n%s",
		p.versions, testenv.ImgproxyVersion, inflight, cfg.Effort, inflight, inflight,
		table([]string{"round", "CPU s/img, burst", "CPU s/img, one at a time", "wall s/img, one at a time", "burst img/s", "cores busy in the burst"}, rows),
		qtable)
	b.rep.command("# peers: imgproxy %s (go mod download github.com/imgproxy/imgproxy/v3@%s; go build in its directory), run as\n"+
		"IMGPROXY_BIND=127.0.0.1:PORT IMGPROXY_LOCAL_FILESYSTEM_ROOT=<photos> IMGPROXY_WORKERS=%d IMGPROXY_WEBP_EFFORT=%d "+
		"IMGPROXY_STRIP_METADATA=true IMGPROXY_KEEP_COPYRIGHT=false IMGPROXY_STRIP_COLOR_PROFILE=true IMGPROXY_AUTO_ROTATE=true imgproxy\n"+
		"# per job, at most %d at once:\n"+
		"clamdscan --config-file=<LocalSocket of the worker's clamd> --fdpass --no-summary <photo>\n"+
		"3 × GET /insecure/rs:fit:S:S:0/q:Q/plain/local:///<photo>@webp, at once (S/Q: %d/%d, %d/%d, %d/%d)",
		testenv.ImgproxyVersion, testenv.ImgproxyVersion, inflight, cfg.Effort, inflight,
		cfg.High, cfg.QualityHigh, cfg.Medium, cfg.QualityMedium, cfg.Low, cfg.QualityLow)
}

// oneLine makes an error fit a table cell: one line, no pipe, at most 300 bytes.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(strings.ReplaceAll(s, "|", "/")), " ")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}
