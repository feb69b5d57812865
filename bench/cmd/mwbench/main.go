// Command mwbench runs mediaworker's benchmark (issue 5) and writes bench/RESULTS.md. It is started
// by bench/run.sh (`make bench`), which first builds the worker and runs the orchestration benchmark
// (go test -bench in package bench) and hands both to it.
//
// In one run it generates (or reuses) the corpus, starts clamd with the project's dev config, and
// measures, for each area of the issue, the raw tool or the naive script and the worker side by side,
// interleaving their runs: images (worker end to end vs the in-process transform vs a `clamdscan` and
// three `vips thumbnail` processes per image), videos (worker end to end vs a `clamdscan` and the bare
// ffmpeg commands the worker ran, poster share, remux vs transcode, RSS with a large input), each with
// clamd as shipped and at ClamAV's default image fuzzy hashing, scanning (scanner.ScanFile vs
// clamdscan --stream, chunk sizes, path mode), start-up and idle RSS, and what one job writes to NATS
// (the scale model's input). The worker always runs as a `mediaworker run` subprocess on its embedded
// default, so its RSS is its own. -phases with -merge re-measures some parts and rewrites only theirs
// in the existing report (merge.go).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/mediaworker/mediaworker/bench"
	"github.com/mediaworker/mediaworker/internal/testenv"
)

// bencher is what the phases share: the run's context, scratch environment, report and corpus, the
// worker runner (workers.go), the settings every phase reads, and what one phase measures for another.
// Each phase is its own function or type (images.go, videos.go, scan.go, ...) taking the bencher; the
// peers phase's methods (peers.go) are still declared on it.
type bencher struct {
	workers
	ctx    context.Context
	env    *bench.Env
	rep    *Report
	corpus Corpus
	minio  *testenv.MinIO // started by the first run that stores in S3
	logf   func(format string, args ...any)

	runs     int // repetitions of every timed measurement (medians)
	quick    bool
	leakN    int
	largeMiB int
	parallel int // image jobs at once, for the worker and every baseline
	// videoBareCPU is, per clip, the CPU seconds of the bare commands of its job (the videos phase),
	// for clamd's share of a video job's CPU (the scan phase).
	videoBareCPU map[string]float64
	// sizing collects, from the phases, the numbers of the sizing table (sizing.go).
	sizing sizingData
}

func main() {
	var (
		out      = flag.String("out", "bench/RESULTS.md", "where to write the report")
		bin      = flag.String("bin", "", "the built mediaworker binary (required)")
		cache    = flag.String("cache", "", "corpus cache (default: <testenv.CacheDir>/bench)")
		work     = flag.String("work", "bench/out/work", "scratch space (worker data dirs, outputs); emptied at start")
		orch     = flag.String("orch", "", "output of the orchestration go test -bench run")
		orchCmd  = flag.String("orch-cmd", "", "the command that produced -orch, for the report")
		runs     = flag.Int("runs", 3, "repetitions of each timed measurement")
		quick    = flag.Bool("quick", false, "fewer jobs and repetitions (a smoke run; numbers are rougher)")
		leakN    = flag.Int("leak-n", 10000, "jobs in the RSS-over-many-jobs run with S3 storage (RSS compared after N/10 and N; the embedded-store run does N/2)")
		largeMiB = flag.Int("large-mib", 477, "size of the large video input in MiB (the worker's default cap is 500 MiB)")
		wenv     = flag.String("worker-env", "", "comma-separated KEY=VALUE pairs added to every worker's environment (experiments, e.g. GOGC=50)")
		phases   = flag.String("phases", "startup,images,peers,videos,scan,memory,nats-writes,orchestration,orchestration-prelane", "phases to run (peers: the worker beside sharp, peers.go; orchestration-prelane: the no-op benchmark beside the pre-lane build)")
		prelaneN = flag.Int("prelane-rounds", 5, "interleaved rounds of the orchestration-prelane phase (each runs both builds' no-op benchmark once)")
		merge    = flag.Bool("merge", false, "merge this run's rows, sections and commands into the existing -out file instead of writing it anew (a partial run: -phases; merge.go)")
		clipList = flag.String("clips", "", "comma-separated clip names (e.g. 1080p-h264.mp4) to keep from the corpus; default all (for iterating on one kind of video)")
	)
	flag.Parse()
	if *bin == "" {
		fmt.Fprintln(os.Stderr, "mwbench: -bin is required (bench/run.sh builds it)")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	start := time.Now()
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "[mwbench %6.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	b := &bencher{workers: workers{ctx: ctx}, ctx: ctx, rep: &Report{Started: start}, logf: logf, runs: *runs, quick: *quick,
		leakN: *leakN, largeMiB: *largeMiB, parallel: runtime.NumCPU()}
	if *wenv != "" {
		b.workerEnv = strings.Split(*wenv, ",")
	}
	if b.quick {
		b.runs = min(b.runs, 2)
		b.leakN = min(b.leakN, 300)
	}
	var err error
	if b.bin, err = filepath.Abs(*bin); err != nil {
		fatal(err)
	}
	if b.work, err = filepath.Abs(*work); err != nil {
		fatal(err)
	}
	_ = os.RemoveAll(b.work)
	if err := os.MkdirAll(b.work, 0o755); err != nil {
		fatal(err)
	}
	if *cache == "" {
		root, err := testenv.CacheDir()
		if err != nil {
			fatal(err)
		}
		*cache = filepath.Join(root, "bench")
	}
	if *merge {
		if b.rep.base, err = loadBase(*out); err != nil {
			fatal(err)
		}
		b.rep.phaseNames = strings.Split(*phases, ",")
	}
	b.env = bench.NewEnv("mwbench", filepath.Join(b.work, "env"), logf)
	defer b.env.Close()

	b.rep.Machine = append(b.rep.Machine, machineAtStart(b.bin)...)
	for _, tool := range []string{"ffmpeg", "ffprobe", "vips", "clamd", "clamdscan", "prlimit"} {
		if _, err := exec.LookPath(tool); err != nil {
			fatal(fmt.Errorf("%s is not installed: run scripts/install-deps.sh (as root) first", tool))
		}
	}

	t0 := time.Now()
	if b.corpus, err = ensureCorpus(b.env, *cache, b.largeMiB, logf); err != nil {
		fatal(fmt.Errorf("making the corpus: %w", err))
	}
	b.rep.Phases = append(b.rep.Phases, fmt.Sprintf("corpus (cached in %s): %s", b.corpus.Dir, time.Since(t0).Round(time.Second)))
	if *clipList != "" {
		if b.corpus.Clips, err = keepClips(b.corpus.Clips, strings.Split(*clipList, ",")); err != nil {
			fatal(fmt.Errorf("-clips: %w", err))
		}
	}

	// clamd with the project's dev config (deploy/clamav/clamd.conf) and dev signatures, as the tests
	// run it. Large inputs above clamd's 512M stream limit need the limits raised with them.
	// DisableCache: clamd skips files whose hash it found clean before, and the benchmark sends the same
	// files again and again; a site's uploads are all new, so every scan here must be a first scan.
	overrides := map[string]string{"DisableCache": "yes"}
	if b.largeMiB > 480 {
		lim := fmt.Sprintf("%dM", b.largeMiB+64)
		overrides["StreamMaxLength"], overrides["MaxFileSize"] = lim, lim
		overrides["MaxScanSize"] = fmt.Sprintf("%dM", 2*(b.largeMiB+64))
	}
	if err := b.env.Do(func() { b.clamd = testenv.StartClamdWith(b.env, overrides) }); err != nil {
		fatal(fmt.Errorf("starting clamd: %w", err))
	}
	logf("clamd on %s (config %s)", b.clamd.Addr, b.clamd.ConfigPath)

	if bench.KnowsFlag(b.bin, "no-reuse") {
		b.rep.note("Every worker runs with `--no-reuse`: the reuse memory (on by default) would answer the benchmark's repeated " +
			"files from what they became the first time, without a transform, and a site's uploads are new. A new " +
			"upload with the memory on costs in addition its SHA-256 (computed as it downloads), one key-value lookup and, " +
			"after a success, a 1-2 KB record (docs/operations.md, *Scale model*).")
	}
	all := map[string]func() error{
		"startup": func() error { return startupPhase(b) },
		"images":  imagesPhase{b}.run,
		// images' throughput comparison alone (issue 13's baselines and black-box case), for iterating.
		"image-throughput": imageThroughput{b}.run,
		"videos":           videosPhase{b}.run,
		// The worker beside sharp on the same photos, interleaved (issue 37, peers.go).
		"peers": b.peersPhase,
		// videos' worker-vs-bare comparison alone (no large input), for iterating: -clips narrows it.
		"video-compare": videosPhase{b}.compare,
		"scan":          func() error { return scanPhase(b) },
		"memory":        func() error { return memoryPhase(b) },
		"leak":          leakPhase{b}.run, // also part of images; alone for a targeted run (-phases leak -leak-n 1000)
		// What one job of each kind writes to NATS (natswrites.go), for the scale model in docs/operations.md.
		"nats-writes":   func() error { return natsWrites(b) },
		"orchestration": func() error { return orchestrationPhase(b, *orch, *orchCmd) },
		// The same no-op benchmark beside the build before the lanes, interleaved (issue 37 item 4).
		"orchestration-prelane": prelanePhase{b, *prelaneN}.run,
	}
	for _, name := range strings.Split(*phases, ",") {
		fn, ok := all[name]
		if !ok {
			fatal(fmt.Errorf("unknown phase %q", name))
		}
		if ctx.Err() != nil {
			break
		}
		logf("phase %s", name)
		t := time.Now()
		err := fn()
		took := time.Since(t).Round(time.Second)
		b.rep.Phases = append(b.rep.Phases, fmt.Sprintf("%s: %s", name, took))
		if err != nil {
			logf("phase %s FAILED: %v", name, err)
			b.rep.Failures = append(b.rep.Failures, fmt.Sprintf("%s: %v", name, err))
		}
		_ = os.RemoveAll(filepath.Join(b.work, name)) // worker stores and outputs: gigabytes
		b.rep.Finished = time.Now()
		if err := b.rep.write(*out); err != nil { // after every phase: a later crash keeps the earlier results
			fatal(err)
		}
	}
	if *merge {
		// The sizing table draws on every phase: a partial run leaves the full run's.
		b.rep.Machine = append(b.rep.Machine, loadAtEnd())
		b.rep.Finished = time.Now()
		b.rep.command("# partial run, merged into this file (its rows, sections and commands replace the full run's):\n%s", strings.Join(os.Args, " "))
	} else {
		b.sizing.section(b.rep, b.corpus)
		b.rep.Machine = append(b.rep.Machine, loadAtEnd())
		b.rep.Finished = time.Now()
		b.rep.command("bash bench/run.sh    # make bench: builds, runs the orchestration benchmark, then:\n%s", strings.Join(os.Args, " "))
	}
	if err := b.rep.write(*out); err != nil {
		fatal(err)
	}
	logf("wrote %s in %s", *out, time.Since(start).Round(time.Second))
	if len(b.rep.Failures) > 0 {
		b.env.Close() // os.Exit skips deferred calls: stop clamd and remove its directory first
		os.Exit(1)
	}
}

func fatal(err error) {
	fmt.Fprintf(os.Stderr, "mwbench: %v\n", err)
	os.Exit(1)
}

// keepClips returns the clips named, in the corpus's order; a name the corpus lacks is an error.
func keepClips(clips []Clip, names []string) ([]Clip, error) {
	var kept []Clip
	for _, n := range names {
		if !slices.ContainsFunc(clips, func(c Clip) bool { return c.Name == n }) {
			var have []string
			for _, c := range clips {
				have = append(have, c.Name)
			}
			return nil, fmt.Errorf("no clip %q in the corpus (it has %s)", n, strings.Join(have, ", "))
		}
	}
	for _, c := range clips {
		if slices.Contains(names, c.Name) {
			kept = append(kept, c)
		}
	}
	return kept, nil
}
