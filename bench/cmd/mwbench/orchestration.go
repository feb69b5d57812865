package main

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/mediaworker/mediaworker/bench"
)

// benchLine matches a `go test -bench` result line: name-GOMAXPROCS, iterations, then value/unit pairs.
var benchLine = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+(\d+)\s+(.*)$`)

// orchestrationPhase reads the output of bench/orchestration_test.go's BenchmarkNoopPipeline (run by
// bench/run.sh before mwbench, with -count for medians) and reports it against the targets.
func orchestrationPhase(b *bencher, path, cmd string) error {
	if path == "" {
		return fmt.Errorf("no -orch file: run bench/run.sh, which runs the go test -bench first")
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	results, order := parseBench(string(raw))
	if len(results) == 0 {
		return fmt.Errorf("no benchmark results in %s:\n%s", path, raw)
	}
	med := func(name, unit string) float64 { return bench.Median(results[name][unit]) }
	var thr, lat string
	for _, n := range order {
		if strings.HasPrefix(n, "variants=0/") && !strings.Contains(n, "intake=16") {
			switch {
			case strings.HasSuffix(n, "/throughput"):
				thr = n
			case strings.HasSuffix(n, "/latency"):
				lat = n
			}
		}
	}
	if thr == "" || lat == "" {
		return fmt.Errorf("%s lacks the variants=0 throughput or latency results", path)
	}
	count := len(results[thr]["jobs/s"])
	j := med(thr, "jobs/s")
	b.rep.row("orchestration", "no-op jobs through embedded NATS + pull loop + pipeline",
		fmt.Sprintf("`%s`, median of %d", thr, count), fmt.Sprintf("%.0f jobs/s", j), "≥ 1,000 jobs/s", atLeast(j, 1000))
	p99 := med(lat, "p99-ms")
	b.rep.row("orchestration", "per-job overhead p99 (one job at a time, publish → response)",
		fmt.Sprintf("`%s`, p50 %.2f ms, median of %d", lat, med(lat, "p50-ms"), count),
		fmt.Sprintf("%.2f ms", p99), "< 5 ms", atMost(p99, 4.999))
	// Issue 23's bars for the same figures, beside the CPU and the messages each job costs, which
	// other load on the machine does not move.
	cost := fmt.Sprintf("CPU %.2f ms per job (server, worker and client), %.1f messages to the server per job",
		med(thr, "cpu-ms/job"), med(thr, "msgs/job"))
	b.rep.row("orchestration", "no-op jobs/s, issue 23's bar",
		fmt.Sprintf("`%s`, median of %d; %s", thr, count, cost), fmt.Sprintf("%.0f jobs/s", j), "≥ 1,500 jobs/s (issue 23)", atLeast(j, 1500))
	b.rep.row("orchestration", "per-job overhead p99, issue 23's bar",
		fmt.Sprintf("`%s`, median of %d", lat, count), fmt.Sprintf("%.2f ms", p99), "≤ 3 ms (issue 23)", atMost(p99, 3))

	var rows [][]string
	for _, n := range order {
		r := results[n]
		cell := func(unit, format string) string {
			if len(r[unit]) == 0 {
				return ""
			}
			return fmt.Sprintf(format, bench.Median(r[unit]))
		}
		rows = append(rows, []string{"`" + n + "`", cell("jobs/s", "%.0f"), cell("p50-ms", "%.2f"), cell("p99-ms", "%.2f"),
			cell("cpu-ms/job", "%.2f"), cell("msgs/job", "%.1f"),
			cell("retained-B/job", "%.0f"), cell("ns/op", "%.0f"), cell("B/op", "%.0f"), cell("allocs/op", "%.0f")})
	}
	b.rep.section("Orchestration (go test -bench)",
		"`bench/orchestration_test.go` `BenchmarkNoopPipeline`: the real `jetstream.Worker` pull loop and the real "+
			"`pipeline.New` pipeline (scratch dir, Stat + streamed download of a 70-byte PNG from the JetStream object store, "+
			"content detection, upload of the outputs) on an embedded JetStream server (the worker connected in-process, as the "+
			"embedded default connects), with a scanner that reads the bytes and answers "+
			"clean and an image transform that does nothing (variants=0) or writes three 100-byte files that get "+
			"uploaded (variants=3). *intake* is the number of messages the worker holds at once (image + video slots, "+
			"as app.New sets it; 16 for comparison). Throughput: b.N requests published at once by a second "+
			"connection; latency: one at a time; retained: live Go heap gained per job after a GC. *CPU ms/job* (user + system), "+
			"B/op and allocs/op are the whole process (server, worker and client); *msgs/job* is what clients sent the server per job "+
			"(publishes, pulls, acks, API requests). "+
			"Medians of the `-count` runs.\n\n%s\n<details><summary>raw output</summary>\n\n```\n%s\n```\n</details>",
		table([]string{"benchmark", "jobs/s", "p50 ms", "p99 ms", "CPU ms/job", "msgs/job", "retained B/job", "ns/op", "B/op", "allocs/op"}, rows),
		strings.TrimSpace(string(raw)))
	if cmd != "" {
		b.rep.command("%s", cmd)
	}
	return nil
}

// parseBench reads `go test -bench` output: for each benchmark (named without its BenchmarkNoopPipeline/
// prefix and -GOMAXPROCS suffix), in the order first seen, every value of every unit (one per -count).
func parseBench(raw string) (results map[string]map[string][]float64, order []string) {
	results = map[string]map[string][]float64{}
	for _, line := range strings.Split(raw, "\n") {
		m := benchLine.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		name := strings.TrimPrefix(m[1], "BenchmarkNoopPipeline/")
		if results[name] == nil {
			results[name] = map[string][]float64{}
			order = append(order, name)
		}
		f := strings.Fields(m[3])
		for i := 0; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			results[name][f[i+1]] = append(results[name][f[i+1]], v)
		}
	}
	return results, order
}
