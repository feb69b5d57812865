package main

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/mediaworker/mediaworker/bench"
)

// startupPhase starts `mediaworker run` on its embedded default (fresh data dir each time, clamd
// already up) and times exec → the first 200 of GET /health/ready, which checks NATS, the consumer,
// the object store, clamd and the scratch disk. After the last start it waits 10 s and reads the idle
// RSS.
func startupPhase(b *bencher) (err error) {
	n := 5
	if b.quick {
		n = 3
	}
	var ready []float64
	var unclean []string
	var idleMem bench.Memory
	var heap, gosys float64
	var byMap map[string]int64
	var args []string
	for i := range n {
		w, werr := b.startWorker("startup", fmt.Sprint(i), b.parallel, 1)
		if werr != nil {
			return werr
		}
		ready = append(ready, w.Ready.Seconds())
		args = w.Args
		if i == n-1 {
			time.Sleep(10 * time.Second) // "idle RSS after 10 s"
			m, merr := w.Memory()
			if merr != nil {
				w.Kill()
				return merr
			}
			idleMem = m
			byMap, _ = bench.RSSByMapping(w.Pid())
			if met, merr := w.Metrics(b.ctx); merr == nil {
				heap, gosys = met["go_memstats_heap_inuse_bytes"], met["go_memstats_sys_bytes"]
			}
		}
		if serr := w.Stop(); serr != nil {
			// Keep the measurements, but say so: a worker stopped right after it is ready must exit 0.
			unclean = append(unclean, fmt.Sprintf("start %d: %v", i+1, serr))
		}
	}
	if len(unclean) > 0 {
		b.rep.note("Start-up: SIGTERM right after /health/ready answered 200 did not stop the worker cleanly (%d of %d starts): %s",
			len(unclean), n, strings.ReplaceAll(strings.Join(unclean, "; "), "\n", " "))
	}
	med := bench.Median(ready)
	lo, hi := bench.MinMax(ready)
	b.rep.row("start-up", "`mediaworker run` ready (GET /health/ready 200), clamd up",
		fmt.Sprintf("median of %d fresh starts (min %s, max %s)", n, ms(lo), ms(hi)),
		ms(med), "< 1 s", atMost(med, 1))
	idle := float64(idleMem.RSS)
	b.rep.row("start-up", "idle RSS 10 s after ready",
		fmt.Sprintf("VmRSS = %s private (RssAnon) + %s mapped files (RssFile)", mib(float64(idleMem.Anon)), mib(float64(idleMem.File))),
		mib(idle), "≤ 40 MiB", atMost(idle, 40<<20))
	b.rep.section("Start-up and idle memory", "%s", idleBreakdown(idleMem, byMap, b.bin, heap, gosys))
	b.rep.command("# start-up and every other worker run (ports, dirs and flags per run; clamd already up):\n%s",
		strings.Join(args, " "))
	return nil
}

// idleBreakdown says what the idle worker's resident pages are: its own executable, shared libraries
// (libvips and the libraries Debian's libvips links), and private memory.
func idleBreakdown(m bench.Memory, byMap map[string]int64, bin string, heap, gosys float64) string {
	var exe, libs, anon, other int64
	type lib struct {
		name string
		n    int64
	}
	var top []lib
	for name, n := range byMap {
		switch {
		case name == "" || strings.HasPrefix(name, "["):
			anon += n
		case name == bin:
			exe += n
		case strings.Contains(name, ".so"):
			libs += n
			top = append(top, lib{filepath.Base(name), n})
		default:
			other += n
		}
	}
	slices.SortFunc(top, func(a, b lib) int { return int(b.n - a.n) })
	var names []string
	for i, l := range top {
		if i == 12 {
			break
		}
		names = append(names, fmt.Sprintf("%s %s", l.name, mib(float64(l.n))))
	}
	return fmt.Sprintf("Idle worker 10 s after ready: VmRSS %s, VmHWM %s. By mapping (/proc/PID/smaps): the mediaworker "+
		"executable %s, %d shared libraries %s, anonymous memory %s, other files %s. The Go runtime holds %s "+
		"(go_memstats_sys_bytes), of which the heap in use is %s.\n\nLargest libraries: %s.",
		mib(float64(m.RSS)), mib(float64(m.HWM)), mib(float64(exe)), len(top), mib(float64(libs)), mib(float64(anon)),
		mib(float64(other)), mib(gosys), mib(heap), strings.Join(names, ", "))
}
