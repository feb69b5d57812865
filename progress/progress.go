// Package progress carries a job's progress callback through a context, so a leaf (the video
// transcoder) can report how far it is without knowing who listens (the jetstream layer publishes it).
package progress

import (
	"context"
	"sync"
	"time"
)

type key struct{}

// Func receives a job's progress as a fraction from 0 to 1.
type Func func(fraction float64)

// With returns ctx carrying fn.
func With(ctx context.Context, fn Func) context.Context { return context.WithValue(ctx, key{}, fn) }

// Report tells the job's listener, if any, how far the job is.
func Report(ctx context.Context, fraction float64) {
	if fn, ok := ctx.Value(key{}).(Func); ok && fn != nil {
		fn(min(max(fraction, 0), 1))
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
