package pipeline

import (
	"context"
	"sync"
	"time"

	"github.com/mediaworker/mediaworker/progress"
)

// The transform's watchdog. A video's transform may take as long as it keeps moving: a busy machine
// makes it slower, never a failure. It is a stall when, for the stall interval (--job-timeout), there
// is no sign that it moved: no new position in ffmpeg's progress reports and no CPU time used by the
// tool running (the transcoder reports both through package progress). Then the transform is
// cancelled (its tool's process group killed) with ErrStalled, and the job ends as a transient
// failure: the delivery is handed back with backoff, so InProgress stops and any worker may take it.
//
// A tool that computes without end is not a stall: it is bounded by its CPU budget (RLIMIT_CPU),
// and running into that is the input's fault, with the CPU words.

// watch returns a child of parent that is cancelled with ErrStalled once interval passes without a
// progress report (progress.Report or progress.Moved on it or a context below it), and stop, which
// ends the watch and the child.
func watch(parent context.Context, interval time.Duration) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(parent)
	w := &watchdog{interval: interval, cancel: cancel, last: time.Now()}
	w.mu.Lock()
	w.timer = time.AfterFunc(interval, w.fire)
	w.mu.Unlock()
	stop := func() {
		w.mu.Lock()
		w.stopped = true
		w.timer.Stop()
		w.mu.Unlock()
		cancel(nil)
	}
	return progress.Watch(ctx, w.moved), stop
}

// watchdog is the state of one watch. A report only notes the time (ffmpeg reports every half second,
// the CPU look twice a second): the timer, when it fires, re-arms itself for what is left of the
// interval since the last report, and cancels only when all of it has passed.
type watchdog struct {
	interval time.Duration
	cancel   context.CancelCauseFunc

	mu      sync.Mutex
	timer   *time.Timer
	last    time.Time // the last report
	stopped bool
}

func (w *watchdog) moved() {
	w.mu.Lock()
	w.last = time.Now()
	w.mu.Unlock()
}

func (w *watchdog) fire() {
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		return
	}
	if idle := time.Since(w.last); idle < w.interval {
		w.timer.Reset(w.interval - idle)
		w.mu.Unlock()
		return
	}
	w.stopped = true
	w.mu.Unlock()
	w.cancel(ErrStalled)
}
