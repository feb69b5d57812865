package main

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/mediaworker/mediaworker/bench"
)

// The memory phase (issue 10, item 6; issue 23, item 2): a worker with the default slots and the
// default memory budget takes three passes of a mixed corpus of real files from sources the tests have
// not used (memory_corpus.go: Debian's wallpapers, other Go image modules' test data), the benchmark's
// 12/24 MP JPEG, PNG and HEIC photos and its 720p/1080p H.264/HEVC/VP9 clips, and reports its VmHWM
// (peak resident memory: what an edge box must have) against the 300 MiB target, the memory budget's
// peak use (each lane's: the image lane's is what the worker's RSS holds, the video lane's counts the
// ffmpeg processes beside it) and its goroutines before and after. A job that fails for memory fails the phase: the budget
// makes large jobs wait, never refuses them.

// memoryHWMTarget is the goal for VmHWM.
const memoryHWMTarget = 300 << 20

// memoryPasses is how often the corpus goes through the worker (the three; one with -quick).
const memoryPasses = 3

// memoryPoint is one reading of the worker.
type memoryPoint struct {
	label      string
	rss, hwm   int64
	goroutines float64
	cpu        time.Duration // the worker process's CPU time so far (its GC included; ffmpeg's not)
	ok, failed int
	// budgetPeak and budget are the image lane's memory budget's highest admitted bytes so far and its
	// size (0 on a worker without one); videoPeak the video lane's budget's highest (same size).
	budgetPeak, budget, videoPeak float64
}

func memoryPhase(b *bencher) (err error) {
	real, err := outsideFiles(b.ctx, filepath.Join(filepath.Dir(b.corpus.Dir), "outside-v1"), b.logf)
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
		p.budgetPeak, p.budget = met[`mediaworker_memory_budget_peak_bytes{lane="image"}`], met[`mediaworker_memory_budget_bytes{lane="image"}`]
		p.videoPeak = met[`mediaworker_memory_budget_peak_bytes{lane="video"}`]
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
				if strings.Contains(strings.ToLower(a.Resp.Error), "memory") {
					cancel()
					return fmt.Errorf("memory: %s failed for memory (the budget must make it wait, not refuse it): %s", j.Key, a.Resp.Error)
				}
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
		b.logf("memory: pass %d: %d ok, %d failed (none for memory); VmRSS %s, VmHWM %s (target ≤ %s: %s); image lane's budget peak %s of %s, video lane's %s; %v goroutines, worker CPU %s",
			pass, r.ok, r.failed, mib(float64(r.rss)), mib(float64(r.hwm)), mib(memoryHWMTarget), atMost(float64(r.hwm), memoryHWMTarget),
			mib(r.budgetPeak), mib(r.budget), mib(r.videoPeak), r.goroutines, r.cpu.Round(time.Millisecond))
	}
	took := time.Since(start)
	// Earlier runs worded the row with their corpus's size: a merge replaces it whatever the count.
	b.rep.own("memory", "VmHWM over")
	last := points[len(points)-1]
	b.sizing.idleRSS, b.sizing.mixedHWM, b.sizing.imageSlots = first.rss, last.hwm, imageJobs
	b.rep.row("memory", fmt.Sprintf("VmHWM over %d passes of a %d-file mixed corpus, default slots (%d image, %d video)",
		passes, len(files), imageJobs, videoJobs),
		fmt.Sprintf("VmHWM %s, VmRSS after %s; memory budget's peak %s of %s a lane (image), %s (video); no job failed for memory; goroutines %v idle → %v after",
			mib(float64(last.hwm)), mib(float64(last.rss)), mib(last.budgetPeak), mib(last.budget), mib(last.videoPeak), first.goroutines, last.goroutines),
		mib(float64(last.hwm)), "≤ 300 MiB", atMost(float64(last.hwm), memoryHWMTarget))
	var rows [][]string
	for _, p := range points {
		rows = append(rows, []string{p.label, fmt.Sprint(p.ok), fmt.Sprint(p.failed), mib(float64(p.rss)), mib(float64(p.hwm)),
			mib(p.budgetPeak), mib(p.videoPeak), fmt.Sprint(p.goroutines), secs(p.cpu.Seconds())})
	}
	b.rep.section("Memory: peak RSS over a mixed corpus",
		"One worker with the default slots (%d image, %d video) and the default memory budget (its own for each lane), %d passes of %d files queued at once: %d real "+
			"files from sources the tests have not used (Debian's wallpaper packages %s; the test images of %s: some corrupt, "+
			"truncated or unsupported on purpose, those end in failure responses, none for memory), "+
			"the %d generated 12–24 MP photos, the small photo and the %d clips. %s in all. VmHWM is the worker "+
			"process's peak (libvips and the embedded NATS included; ffmpeg is its own process, and so is not in the worker's CPU either).\n\n%s",
		imageJobs, videoJobs, passes, len(files), len(real), strings.Join(outsideDebs, ", "), strings.Join(outsideModules, ", "),
		len(b.corpus.Photos), len(b.corpus.Clips),
		took.Round(time.Second),
		table([]string{"when", "ok", "failed", "VmRSS", "VmHWM", "image budget's peak", "video budget's peak", "goroutines", "worker CPU (cumulative)"}, rows))
	return nil
}
