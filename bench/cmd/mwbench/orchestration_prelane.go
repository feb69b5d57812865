package main

import (
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/mediaworker/mediaworker/bench"
)

// The no-op orchestration beside the build before the lanes (issue 37 item 4, restating issue 23's
// bar): the same benchmark, BenchmarkNoopPipeline's one-job-kind case, built from commit prelaneCommit
// and from this tree, run alternately in the same run, so that the machine's drift (this 2-core box
// moves ±15 % from run to run) falls on both sides of each ratio. The pre-lane tree is checked out with
// `git worktree add` from the repository mwbench runs in and patched (prelane.patch) so that its worker
// connects in-process, as today's does (commit 59ec64a) and as app.New does on the embedded default,
// and reports cpu-ms/job the way today's does.

// prelaneCommit is the last commit before the lanes (d1950ea~1), whose no-op rate issue 23's bar was
// set from.
const prelaneCommit = "4423aa4"

// prelanePatch makes the pre-lane benchmark's worker connect in-process and report cpu-ms/job.
//
//go:embed prelane.patch
var prelanePatch []byte

// The benchmark both builds run: variants=0 (no outputs), the default intake (3 on 2 cores); its
// throughput and latency sub-benchmarks, 2000 jobs each, as issue 23's session ran it.
const (
	prelaneBench     = "BenchmarkNoopPipeline/variants=0/intake=3"
	prelaneBenchtime = "2000x"
)

// prelaneRound is one round: each build's throughput (jobs/s), p99 latency and CPU per job.
type prelaneRound struct {
	todayFirst         bool
	todayJobs, preJobs float64
	todayP99, preP99   float64
	todayP50, preP50   float64
	todayCPU, preCPU   float64 // cpu-ms/job of the throughput run (the whole process)
	todayMsgs          float64 // messages clients sent the server per job (today's benchmark only)
}

type prelanePhase struct {
	b      *bencher
	rounds int
}

func (p prelanePhase) run() error {
	b := p.b
	if p.rounds < 1 {
		return fmt.Errorf("-prelane-rounds must be at least 1, got %d", p.rounds)
	}
	if b.quick {
		p.rounds = min(p.rounds, 3)
	}
	root, err := gitOutput(b.ctx, "", "rev-parse", "--show-toplevel")
	if err != nil {
		return fmt.Errorf("this phase builds the pre-lane commit %s from the repository mwbench runs in: run it from a git clone of mediaworker with its history (%w)", prelaneCommit, err)
	}
	if _, err := gitOutput(b.ctx, root, "rev-parse", "--verify", "--quiet", prelaneCommit+"^{commit}"); err != nil {
		return fmt.Errorf("the repository at %s lacks commit %s, the build before the lanes (a shallow clone? `git fetch --unshallow`): %w", root, prelaneCommit, err)
	}
	dir := filepath.Join(b.work, "orchestration-prelane")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tree := filepath.Join(dir, "prelane-tree")
	if _, err := gitOutput(b.ctx, root, "worktree", "add", "--detach", tree, prelaneCommit); err != nil {
		return fmt.Errorf("checking out the pre-lane build: %w", err)
	}
	defer func() {
		// Not b.ctx: an interrupted run still removes the worktree it registered in the repository.
		if _, err := gitOutput(context.Background(), root, "worktree", "remove", "--force", tree); err != nil {
			b.logf("removing the pre-lane worktree %s: %v", tree, err)
		}
	}()
	apply := exec.CommandContext(b.ctx, "git", "apply", "-")
	apply.Dir, apply.Stdin = tree, bytes.NewReader(prelanePatch)
	if out, err := apply.CombinedOutput(); err != nil {
		return fmt.Errorf("patching the pre-lane benchmark (prelane.patch): %w: %s", err, strings.TrimSpace(string(out)))
	}

	bins := map[string]string{"today": filepath.Join(dir, "today.test"), "prelane": filepath.Join(dir, "prelane.test")}
	for name, src := range map[string]string{"today": root, "prelane": tree} {
		t := time.Now()
		build := exec.CommandContext(b.ctx, "go", "test", "-c", "-o", bins[name], "./bench")
		build.Dir = src
		if out, err := build.CombinedOutput(); err != nil {
			return fmt.Errorf("building the %s benchmark (go test -c ./bench in %s): %w: %s", name, src, err, strings.TrimSpace(string(out)))
		}
		b.logf("orchestration-prelane: built the %s benchmark in %s", name, time.Since(t).Round(time.Second))
	}

	args := []string{"-test.run", "^$", "-test.bench", prelaneBench, "-test.benchtime", prelaneBenchtime}
	runOne := func(name, src string) (map[string]map[string][]float64, error) {
		cmd := exec.CommandContext(b.ctx, bins[name], args...)
		cmd.Dir = filepath.Join(src, "bench") // as go test runs it: in the package's directory
		out, err := cmd.CombinedOutput()
		if err != nil {
			return nil, fmt.Errorf("running the %s benchmark: %w: %s", name, err, lastLines(string(out), 20))
		}
		res, _ := parseBench(string(out))
		return res, nil
	}
	var rounds []prelaneRound
	for i := range p.rounds {
		r := prelaneRound{todayFirst: i%2 == 0}
		order := []string{"today", "prelane"}
		if !r.todayFirst {
			order = []string{"prelane", "today"}
		}
		for _, name := range order {
			src := root
			if name == "prelane" {
				src = tree
			}
			res, err := runOne(name, src)
			if err != nil {
				return err
			}
			thr, lat := res["variants=0/intake=3/throughput"], res["variants=0/intake=3/latency"]
			if len(thr["jobs/s"]) == 0 || len(lat["p99-ms"]) == 0 {
				return fmt.Errorf("the %s benchmark printed no jobs/s or p99-ms for %s", name, prelaneBench)
			}
			first := func(m map[string][]float64, unit string) float64 {
				if len(m[unit]) == 0 {
					return math.NaN()
				}
				return m[unit][0]
			}
			if name == "today" {
				r.todayJobs, r.todayP99, r.todayP50 = first(thr, "jobs/s"), first(lat, "p99-ms"), first(lat, "p50-ms")
				r.todayCPU, r.todayMsgs = first(thr, "cpu-ms/job"), first(thr, "msgs/job")
			} else {
				r.preJobs, r.preP99, r.preP50 = first(thr, "jobs/s"), first(lat, "p99-ms"), first(lat, "p50-ms")
				r.preCPU = first(thr, "cpu-ms/job")
			}
		}
		b.logf("orchestration-prelane round %d: today %.0f jobs/s p99 %.2f ms, pre-lane %.0f jobs/s p99 %.2f ms",
			i+1, r.todayJobs, r.todayP99, r.preJobs, r.preP99)
		rounds = append(rounds, r)
	}
	p.report(rounds, root)
	return nil
}

// report writes the targets rows (the medians of the per-round ratios: each round's two builds ran
// back to back, so their ratio is what the interleaving makes comparable) and the section with every
// round.
func (p prelanePhase) report(rounds []prelaneRound, root string) {
	b := p.b
	col := func(f func(prelaneRound) float64) []float64 {
		var xs []float64
		for _, r := range rounds {
			xs = append(xs, f(r))
		}
		return xs
	}
	jobsRatio := bench.Median(col(func(r prelaneRound) float64 { return r.todayJobs / r.preJobs }))
	p99Ratio := bench.Median(col(func(r prelaneRound) float64 { return r.todayP99 / r.preP99 }))
	cpuRatio := bench.Median(col(func(r prelaneRound) float64 { return r.todayCPU / r.preCPU }))
	tj, pj := bench.Median(col(func(r prelaneRound) float64 { return r.todayJobs })), bench.Median(col(func(r prelaneRound) float64 { return r.preJobs }))
	tp, pp := bench.Median(col(func(r prelaneRound) float64 { return r.todayP99 })), bench.Median(col(func(r prelaneRound) float64 { return r.preP99 }))
	rng := func(f func(prelaneRound) float64) string {
		xs := col(f)
		lo, hi := xs[0], xs[0]
		for _, x := range xs {
			lo, hi = min(lo, x), max(hi, x)
		}
		return fmt.Sprintf("%.2f–%.2f", lo, hi)
	}
	b.rep.own("orchestration", "no-op jobs/s vs the pre-lane build", "p99 vs the pre-lane build")
	b.rep.row("orchestration", "no-op jobs/s vs the pre-lane build (issue 37)",
		fmt.Sprintf("`variants=0/intake=3/throughput`, %d interleaved rounds, median of the rounds' ratios (range %s); "+
			"medians today %.0f, pre-lane %s %.0f jobs/s; CPU per job %.2f× (%s)",
			len(rounds), rng(func(r prelaneRound) float64 { return r.todayJobs / r.preJobs }), tj, prelaneCommit, pj,
			cpuRatio, rng(func(r prelaneRound) float64 { return r.todayCPU / r.preCPU })),
		ratio(jobsRatio), "≥ 0.9× (issue 37)", atLeast(jobsRatio, 0.9))
	b.rep.row("orchestration", "p99 vs the pre-lane build (one job at a time, publish → response)",
		fmt.Sprintf("`variants=0/intake=3/latency`, %d interleaved rounds, median of the rounds' ratios (range %s); "+
			"medians today %.2f ms, pre-lane %.2f ms",
			len(rounds), rng(func(r prelaneRound) float64 { return r.todayP99 / r.preP99 }), tp, pp),
		ratio(p99Ratio), "≤ 1.2× (issue 37)", atMost(p99Ratio, 1.2))

	var rows [][]string
	for i, r := range rounds {
		first := "pre-lane"
		if r.todayFirst {
			first = "today"
		}
		rows = append(rows, []string{fmt.Sprint(i + 1), first,
			fmt.Sprintf("%.0f", r.todayJobs), fmt.Sprintf("%.0f", r.preJobs), ratio(r.todayJobs / r.preJobs),
			fmt.Sprintf("%.2f", r.todayP99), fmt.Sprintf("%.2f", r.preP99), ratio(r.todayP99 / r.preP99),
			fmt.Sprintf("%.2f", r.todayP50), fmt.Sprintf("%.2f", r.preP50),
			fmt.Sprintf("%.2f", r.todayCPU), fmt.Sprintf("%.2f", r.preCPU), fmt.Sprintf("%.1f", r.todayMsgs)})
	}
	rows = append(rows, []string{"median", "", fmt.Sprintf("%.0f", tj), fmt.Sprintf("%.0f", pj), ratio(jobsRatio),
		fmt.Sprintf("%.2f", tp), fmt.Sprintf("%.2f", pp), ratio(p99Ratio), "", "", "", "", ""})
	b.rep.section("Orchestration beside the pre-lane build (issue 37)",
		"`BenchmarkNoopPipeline` (bench/orchestration_test.go), its `variants=0/intake=3` throughput and latency, "+
			"built from this tree and from %s, the last commit before the lanes (`git worktree add --detach`, "+
			"patched by bench/cmd/mwbench/prelane.patch so that its worker connects in-process as today's does and it "+
			"reports CPU per job), each built once (`go test -c`) and run alternately, %d rounds, the first build "+
			"alternating, on this machine's loopback. Ratios are today ÷ pre-lane within a round; the targets rows "+
			"take the median of the rounds' ratios. *CPU ms/job* is the whole benchmark process (server, worker and client) "+
			"in the throughput run; *msgs/job* what clients sent the server per job (today's benchmark only).\n\n%s",
		prelaneCommit, len(rounds),
		table([]string{"round", "first", "today jobs/s", "pre-lane jobs/s", "ratio", "today p99 ms", "pre-lane p99 ms", "ratio",
			"today p50 ms", "pre-lane p50 ms", "today CPU ms/job", "pre-lane CPU ms/job", "today msgs/job"}, rows))
	b.rep.command("# orchestration beside the pre-lane build (issue 37): mwbench -phases orchestration-prelane does, in %s:\n"+
		"git worktree add --detach <tmp> %s && git -C <tmp> apply bench/cmd/mwbench/prelane.patch\n"+
		"(cd <tmp> && go test -c -o prelane.test ./bench) && go test -c -o today.test ./bench\n"+
		"# then %d rounds, alternately first, each in its tree's bench/ directory:\n"+
		"today.test   -test.run '^$' -test.bench '%s' -test.benchtime %s\n"+
		"prelane.test -test.run '^$' -test.bench '%s' -test.benchtime %s",
		root, prelaneCommit, len(rounds), prelaneBench, prelaneBenchtime, prelaneBench, prelaneBenchtime)
}

// gitOutput runs git in dir ("" for the current directory) and returns its trimmed standard output.
func gitOutput(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if msg := strings.TrimSpace(stderr.String()); err != nil && msg != "" {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, msg)
	} else if err != nil {
		return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out)), nil
}

// lastLines is the end of a command's output, for an error.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}
