package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/mediaworker/mediaworker/bench"
)

// The memory phase (issue 10, item 6): a worker with the default slots takes three passes of a mixed,
// real-world-ish corpus — the image test files Go and golang.org/x/image ship (odd subsamplings,
// CMYK, 16-bit PNG, truncated and corrupt files, TIFF, WebP, BMP), the benchmark's 12/24 MP JPEG,
// PNG and HEIC photos and its 720p/1080p H.264/HEVC/VP9 clips — and reports its VmHWM (peak resident
// memory: what an edge box must have) and its goroutines before and after.

// memoryHWMTarget is the goal for VmHWM.
const memoryHWMTarget = 300 << 20

// xImageVersion is the golang.org/x/image whose testdata the corpus uses (fetched with `go mod
// download`, from the Go module proxy, like any module).
const xImageVersion = "golang.org/x/image@v0.47.0"

// memoryPasses is how often the corpus goes through the worker (the three; one with -quick).
const memoryPasses = 3

// mediaExt are the files of the test-data directories that are media (the rest are checksums,
// archives and Go files).
var mediaExt = []string{".jpeg", ".jpg", ".png", ".gif", ".bmp", ".tif", ".tiff", ".webp"}

// realWorldFiles lists the media files of Go's and golang.org/x/image's image test data.
func realWorldFiles(ctx context.Context) ([]string, error) {
	goroot, err := exec.CommandContext(ctx, "go", "env", "GOROOT").Output()
	if err != nil {
		return nil, fmt.Errorf("finding GOROOT: %w", err)
	}
	dirs := []string{filepath.Join(strings.TrimSpace(string(goroot)), "src", "image", "testdata")}
	out, err := exec.CommandContext(ctx, "go", "mod", "download", "-json", xImageVersion).Output()
	if err != nil {
		return nil, fmt.Errorf("downloading %s for its testdata: %w", xImageVersion, err)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		return nil, fmt.Errorf("reading `go mod download` of %s: %v", xImageVersion, err)
	}
	dirs = append(dirs, filepath.Join(mod.Dir, "testdata"))
	var files []string
	for _, d := range dirs {
		entries, err := os.ReadDir(d)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", d, err)
		}
		for _, e := range entries {
			if !e.IsDir() && slices.Contains(mediaExt, strings.ToLower(filepath.Ext(e.Name()))) {
				files = append(files, filepath.Join(d, e.Name()))
			}
		}
	}
	if len(files) < 50 {
		return nil, fmt.Errorf("found only %d test images in %v", len(files), dirs)
	}
	return files, nil
}

// memoryPoint is one reading of the worker.
type memoryPoint struct {
	label      string
	rss, hwm   int64
	goroutines float64
	cpu        time.Duration // the worker process's CPU time so far (its GC included; ffmpeg's not)
	ok, failed int
}

func (b *bencher) memoryPhase() (err error) {
	real, err := realWorldFiles(b.ctx)
	if err != nil {
		return err
	}
	files := slices.Clone(real)
	for _, p := range b.corpus.Photos {
		files = append(files, p.Path)
	}
	files = append(files, b.corpus.Small.Path)
	for _, c := range b.corpus.Clips {
		files = append(files, c.Path)
	}
	// The defaults of `run` on this machine (app.DefaultConfig), spelled out because the bench starts
	// the worker with explicit slots.
	imageJobs, videoJobs := runtime.NumCPU(), 1
	if runtime.NumCPU() > 2 {
		videoJobs = runtime.NumCPU() / 2
	}
	w, err := b.startWorker("memory", "mixed", imageJobs, videoJobs)
	if err != nil {
		return err
	}
	defer stopWorker(w, &err)
	c, err := b.dial(w)
	if err != nil {
		return err
	}
	defer c.Close()
	keys := make([]string, len(files))
	for i, f := range files {
		keys[i] = fmt.Sprintf("corpus/%03d/%s", i, filepath.Base(f))
		if err := c.Upload(b.ctx, keys[i], f); err != nil {
			return fmt.Errorf("uploading %s: %w", f, err)
		}
	}
	read := func(label string) (memoryPoint, error) {
		m, err := w.Memory()
		if err != nil {
			return memoryPoint{}, err
		}
		p := memoryPoint{label: label, rss: m.RSS, hwm: m.HWM}
		met, err := w.Metrics(b.ctx)
		if err != nil {
			return memoryPoint{}, err
		}
		p.goroutines = met["go_goroutines"]
		if p.cpu, err = bench.ProcessCPU(w.Pid()); err != nil {
			return memoryPoint{}, err
		}
		return p, nil
	}
	first, err := read("idle, after start")
	if err != nil {
		return err
	}
	points := []memoryPoint{first}
	passes := memoryPasses
	if b.quick {
		passes = 1
	}
	start := time.Now()
	for pass := 1; pass <= passes; pass++ {
		p := memoryPoint{}
		// The whole pass is queued at once, as an API with a backlog would: the slots bound what runs.
		jobs := make([]*bench.Job, 0, len(keys))
		for _, k := range keys {
			j, err := c.Submit(b.ctx, k)
			if err != nil {
				return err
			}
			jobs = append(jobs, j)
		}
		wctx, cancel := context.WithTimeout(b.ctx, 30*time.Minute)
		for _, j := range jobs {
			a, err := c.Wait(wctx, j)
			switch {
			case err == nil:
				p.ok++
			case a.Resp.MediaID != "": // answered, with a failure (corrupt, truncated, unsupported)
				p.failed++
			default:
				cancel()
				return err
			}
		}
		cancel()
		r, err := read(fmt.Sprintf("after pass %d", pass))
		if err != nil {
			return err
		}
		r.ok, r.failed = p.ok, p.failed
		points = append(points, r)
		b.logf("memory: pass %d: %d ok, %d failed; VmRSS %s, VmHWM %s, %v goroutines, worker CPU %s", pass, r.ok, r.failed,
			mib(float64(r.rss)), mib(float64(r.hwm)), r.goroutines, r.cpu.Round(time.Millisecond))
	}
	took := time.Since(start)
	last := points[len(points)-1]
	b.sizing.idleRSS, b.sizing.mixedHWM, b.sizing.imageSlots = first.rss, last.hwm, imageJobs
	b.rep.row("memory", fmt.Sprintf("VmHWM over %d passes of a %d-file mixed corpus, default slots (%d image, %d video)",
		passes, len(files), imageJobs, videoJobs),
		fmt.Sprintf("VmHWM %s, VmRSS after %s; goroutines %v idle → %v after", mib(float64(last.hwm)), mib(float64(last.rss)),
			first.goroutines, last.goroutines),
		mib(float64(last.hwm)), "≤ 300 MiB", atMost(float64(last.hwm), memoryHWMTarget))
	var rows [][]string
	for _, p := range points {
		rows = append(rows, []string{p.label, fmt.Sprint(p.ok), fmt.Sprint(p.failed), mib(float64(p.rss)), mib(float64(p.hwm)),
			fmt.Sprint(p.goroutines), secs(p.cpu.Seconds())})
	}
	b.rep.section("Memory: peak RSS over a mixed corpus",
		"One worker with the default slots (%d image, %d video), %d passes of %d files queued at once: %d test "+
			"images that Go and %s ship (some truncated or corrupt on purpose: those end in failure responses), "+
			"the %d generated 12–24 MP photos, the small photo and the %d clips. %s in all. VmHWM is the worker "+
			"process's peak (libvips and the embedded NATS included; ffmpeg is its own process, and so is not in the worker's CPU either).\n\n%s",
		imageJobs, videoJobs, passes, len(files), len(real), xImageVersion, len(b.corpus.Photos), len(b.corpus.Clips),
		took.Round(time.Second),
		table([]string{"when", "ok", "failed", "VmRSS", "VmHWM", "goroutines", "worker CPU (cumulative)"}, rows))
	return nil
}
