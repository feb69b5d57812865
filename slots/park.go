package slots

import (
	"context"
	"sync"
)

// A job is pulled before anyone knows whether it is an image or a video, and it holds one of the
// puller's intake slots while it runs. If a video then waits for a full video pool while holding its
// intake slot, a run of queued videos fills the intake and image jobs behind them starve. A Gate fixes
// that: a job that finds its pool full parks (up to a bounded number of parked jobs per kind) and hands
// its intake slot back, so the puller can fetch the next message, which may be an image.

type handBackKey struct{}

// WithHandBack returns a context carrying fn, the function that gives the job's intake slot back. fn is
// called at most once.
func WithHandBack(ctx context.Context, fn func()) context.Context {
	var once sync.Once
	return context.WithValue(ctx, handBackKey{}, func() { once.Do(fn) })
}

// HandBack gives back the intake slot of the job running under ctx, if it has one.
func HandBack(ctx context.Context) {
	if fn, ok := ctx.Value(handBackKey{}).(func()); ok {
		fn()
	}
}

// Gate is a Pool with a parking lot for jobs that wait for it.
type Gate struct {
	pool *Pool
	lot  chan struct{}
}

// NewGate returns a gate of size slots where up to parked jobs may wait without holding intake.
func NewGate(name string, size, parked int) *Gate {
	if parked < 0 {
		parked = 0
	}
	return &Gate{pool: NewPool(name, size), lot: make(chan struct{}, parked)}
}

// Pool is the gate's slots (for health and metrics).
func (g *Gate) Pool() *Pool { return g.pool }

// Parked is the number of jobs waiting in the lot.
func (g *Gate) Parked() int { return len(g.lot) }

// Acquire takes a slot at once if one is free. Otherwise the job parks if the lot has room, handing its
// intake slot back (see HandBack), and waits; with the lot full it waits holding its intake slot.
func (g *Gate) Acquire(ctx context.Context) (release func(), err error) {
	if r, ok := g.pool.TryAcquire(); ok {
		return r, nil
	}
	select {
	case g.lot <- struct{}{}:
		HandBack(ctx)
		defer func() { <-g.lot }()
	default:
	}
	return g.pool.Acquire(ctx)
}
