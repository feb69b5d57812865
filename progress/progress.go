// Package progress carries a job's progress through a context, so a leaf (the video transcoder) can
// report how far it is without knowing who listens. Two kinds of listener take it: the one With sets
// (the jetstream layer publishes the fraction as progress events), and any number of watchers (the
// pipeline's stall watchdog), which only care that the work moved, not how far it is.
package progress

import (
	"context"
	"sync"
	"time"
)

type (
	key         struct{}
	watchersKey struct{}
)

// Func receives a job's progress as a fraction from 0 to 1.
type Func func(fraction float64)

// With returns ctx carrying fn, the listener of the fractions Report is given (it replaces any
// listener ctx had; watchers are kept).
func With(ctx context.Context, fn Func) context.Context { return context.WithValue(ctx, key{}, fn) }

// Watch returns ctx with fn added to the watchers: fn runs at every sign that the work moved on (each
// Report and each Moved), beside the listener and every watcher ctx already had. fn must be quick:
// it runs on the reporting goroutine.
func Watch(ctx context.Context, fn func()) context.Context {
	prev, _ := ctx.Value(watchersKey{}).([]func())
	ws := make([]func(), 0, len(prev)+1)
	return context.WithValue(ctx, watchersKey{}, append(append(ws, prev...), fn))
}

// Watched reports whether anyone watches ctx's work, so a reporter can skip the work of looking.
func Watched(ctx context.Context) bool {
	ws, _ := ctx.Value(watchersKey{}).([]func())
	return len(ws) > 0
}

// Report tells the job's listener, if any, how far the job is, and its watchers that it moved. The
// reporter calls it only when the work got further (a new position), not to repeat one.
func Report(ctx context.Context, fraction float64) {
	Moved(ctx)
	if fn, ok := ctx.Value(key{}).(Func); ok && fn != nil {
		fn(min(max(fraction, 0), 1))
	}
}

// Moved tells the job's watchers that the work moved on, when how far is not known: a tool whose
// output position advanced in a file of unknown length, or one that used more CPU time.
func Moved(ctx context.Context) {
	ws, _ := ctx.Value(watchersKey{}).([]func())
	for _, fn := range ws {
		fn()
	}
}

// Throttle wraps fn so it runs at most once per interval; the last report (1.0) always passes.
func Throttle(interval time.Duration, fn Func) Func {
	var (
		mu   sync.Mutex
		last time.Time
		prev float64 = -1
	)
	return func(f float64) {
		mu.Lock()
		now := time.Now()
		if f == prev || (f < 1 && now.Sub(last) < interval) {
			mu.Unlock()
			return
		}
		last, prev = now, f
		mu.Unlock()
		fn(f)
	}
}
