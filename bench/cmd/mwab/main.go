// Command mwab compares two mediaworker binaries job by job on the same files: a paired A/B for a
// change whose effect (tens of milliseconds per job) is smaller than what other load on a shared
// machine does to a single run. Both workers run at once, each with its own embedded NATS and object
// store and the same clamd (clean-file cache off, as in mwbench); one job runs at a time, alternating
// A and B and swapping who goes first every round, so both see the same drift in load. It reports,
// per file, each side's median publish → response time and the median and spread of the paired
// differences B − A.
//
//	go run ./bench/cmd/mwab -a /tmp/main/mediaworker -b bench/out/mediaworker -rounds 15 FILE...
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/mediaworker/mediaworker/bench"
	"github.com/mediaworker/mediaworker/internal/testenv"
)

func main() {
	var (
		binA   = flag.String("a", "", "binary A, the baseline (required)")
		binB   = flag.String("b", "", "binary B, the change (required)")
		rounds = flag.Int("rounds", 15, "jobs per file and binary")
		work   = flag.String("work", "bench/out/ab", "scratch space (worker data dirs); emptied at start")
	)
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: mwab -a BASELINE -b CHANGE [-rounds N] FILE...\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *binA == "" || *binB == "" || flag.NArg() == 0 || *rounds < 1 {
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *binA, *binB, *work, *rounds, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "mwab:", err)
		os.Exit(1)
	}
}

type side struct {
	name string
	w    *bench.Worker
	c    *bench.Client
	took map[string][]float64 // file → seconds per job
}

func run(ctx context.Context, binA, binB, work string, rounds int, files []string) (err error) {
	start := time.Now()
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "[mwab %6.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	if work, err = filepath.Abs(work); err != nil {
		return err
	}
	_ = os.RemoveAll(work)
	env := bench.NewEnv("mwab", filepath.Join(work, "env"), logf)
	defer env.Close()
	var clamd *testenv.Clamd
	if err := env.Do(func() { clamd = testenv.StartClamdWith(env, map[string]string{"DisableCache": "yes"}) }); err != nil {
		return fmt.Errorf("starting clamd: %w", err)
	}

	sides := []*side{{name: "A"}, {name: "B"}}
	for i, bin := range []string{binA, binB} {
		s := sides[i]
		s.took = map[string][]float64{}
		s.w, err = bench.StartWorker(ctx, bench.WorkerOptions{Bin: bin, Dir: filepath.Join(work, s.name), ClamdAddr: clamd.SocketAddr, ImageJobs: 2, VideoJobs: 1})
		if err != nil {
			return fmt.Errorf("starting worker %s (%s): %w", s.name, bin, err)
		}
		defer func() { err = errors.Join(err, s.w.Stop()) }()
		dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		s.c, err = bench.Dial(dctx, s.w.NATSURL, "media")
		cancel()
		if err != nil {
			return fmt.Errorf("connecting to worker %s: %w", s.name, err)
		}
		defer s.c.Close()
		for _, f := range files {
			if err := s.c.Upload(ctx, key(f), f); err != nil {
				return fmt.Errorf("uploading %s to worker %s: %w", f, s.name, err)
			}
			if _, err := job(ctx, s.c, f); err != nil { // warm-up, not counted
				return fmt.Errorf("worker %s: %w", s.name, err)
			}
		}
		logf("worker %s: %s", s.name, bin)
	}

	for r := range rounds {
		for _, f := range files {
			order := sides
			if r%2 == 1 {
				order = []*side{sides[1], sides[0]}
			}
			for _, s := range order {
				t, err := job(ctx, s.c, f)
				if err != nil {
					return fmt.Errorf("worker %s: %w", s.name, err)
				}
				s.took[f] = append(s.took[f], t)
			}
			logf("round %d %s: A %.0f ms, B %.0f ms", r+1, filepath.Base(f), 1000*last(sides[0].took[f]), 1000*last(sides[1].took[f]))
		}
	}

	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("%d rounds per file, one job at a time, A and B alternating; load average at the end: %s\n", rounds, load)
	fmt.Printf("| file | A median | B median | B − A, median of pairs | B − A, quartiles | B − A, min … max | B ÷ A |\n|---|---|---|---|---|---|---|\n")
	for _, f := range files {
		a, b := sides[0].took[f], sides[1].took[f]
		d := make([]float64, len(a))
		for i := range a {
			d[i] = b[i] - a[i]
		}
		lo, hi := bench.MinMax(d)
		fmt.Printf("| %s | %.0f ms | %.0f ms | %+.0f ms | %+.0f … %+.0f ms | %+.0f … %+.0f ms | %.2f× |\n", filepath.Base(f),
			1000*bench.Median(a), 1000*bench.Median(b), 1000*bench.Median(d),
			1000*bench.Percentile(d, 25), 1000*bench.Percentile(d, 75), 1000*lo, 1000*hi, bench.Median(b)/bench.Median(a))
	}
	return nil
}

func key(file string) string { return "ab/" + filepath.Base(file) }

// job runs one request for file and returns its publish → response time in seconds.
func job(ctx context.Context, c *bench.Client, file string) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	j, err := c.Submit(ctx, key(file))
	if err != nil {
		return 0, err
	}
	a, err := c.Wait(ctx, j)
	if err != nil {
		return 0, err
	}
	return a.At.Sub(j.Published).Seconds(), nil
}

func last(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	return xs[len(xs)-1]
}
