package transcoder

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"time"

	"github.com/mediaworker/mediaworker/progress"
)

// progressWriter reads ffmpeg's `-progress pipe:1` key=value lines from stdout and reports
// out_time_us against the input's duration each time it advances (ffmpeg repeats the same position
// every half second while it is stuck: that is no progress). With the duration unknown (0), or for a
// run whose position is not the job's (the HLS copy after the encode), it only tells the job's
// watchers that the run moved (progress.Moved). Lines are short; a partial one waits for its newline.
type progressWriter struct {
	ctx      context.Context
	duration float64 // seconds; 0 when unknown (no fractions then)
	pending  []byte
	last     int64 // the last out_time_us reported
}

func (w *progressWriter) Write(p []byte) (int, error) {
	w.pending = append(w.pending, p...)
	for {
		i := bytes.IndexByte(w.pending, '\n')
		if i < 0 {
			break
		}
		w.line(bytes.TrimSpace(w.pending[:i]))
		w.pending = w.pending[i+1:]
	}
	if len(w.pending) > 4096 { // not ffmpeg's progress format: don't grow without bound
		w.pending = w.pending[:0]
	}
	return len(p), nil
}

func (w *progressWriter) line(l []byte) {
	k, v, ok := bytes.Cut(l, []byte("="))
	if !ok {
		return
	}
	switch string(k) {
	case "out_time_us":
		us, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil || us <= w.last {
			return
		}
		w.last = us
		if w.duration > 0 {
			progress.Report(w.ctx, float64(us)/1e6/w.duration)
		} else {
			progress.Moved(w.ctx)
		}
	case "progress":
		if string(v) != "end" {
			return
		}
		if w.duration > 0 {
			progress.Report(w.ctx, 1)
		} else {
			progress.Moved(w.ctx)
		}
	}
}

// cpuLookEvery is how often a running tool's CPU time is looked at (reportCPU): ffmpeg's own progress
// reports come every half second too.
const cpuLookEvery = 500 * time.Millisecond

// reportCPU tells ctx's watchers that the tool with pid moved whenever its CPU time (user + system,
// all threads) grew since the last look, until the returned stop is called. A tool that computes is
// working, whether or not it has output to show yet (a poster seeking to its frame, an encode before
// its first packet, an HLS copy, a decoder in a loop): RLIMIT_CPU, not the watchdog, decides how long
// it may. A tool that gets no CPU (stopped, blocked, starved outright) and writes no progress is the
// stall the watchdog is for.
func reportCPU(ctx context.Context, pid int) (stop func()) {
	if !progress.Watched(ctx) {
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(cpuLookEvery)
		defer t.Stop()
		var last int64
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if used, ok := cpuTicks(pid); ok && used > last {
					last = used
					progress.Moved(ctx)
				}
			}
		}
	}()
	return func() { close(done); <-finished }
}

// cpuTicks reads the user + system CPU time of pid, in clock ticks, from /proc/<pid>/stat.
func cpuTicks(pid int) (int64, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// "pid (comm) state ppid ...": comm may hold spaces and parentheses, so count from the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 13 { // utime and stime are fields 14 and 15 of the line, 12 and 13 after comm
		return 0, false
	}
	utime, err1 := strconv.ParseInt(string(f[11]), 10, 64)
	stime, err2 := strconv.ParseInt(string(f[12]), 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return utime + stime, true
}
