// Package slots bounds concurrent work. A Pool is a counting semaphore whose Acquire(ctx) returns the
// release function, so a slot can never be released twice or by the wrong holder; Pools reports how many
// slots are busy for health and metrics.
package slots

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
)

// Pool is a counting semaphore with a fixed number of slots.
type Pool struct {
	name   string
	ch     chan struct{}
	active atomic.Int64
}

// NewPool returns a pool of size slots (size ≥ 1).
func NewPool(name string, size int) *Pool {
	if size < 1 {
		size = 1
	}
	return &Pool{name: name, ch: make(chan struct{}, size)}
}

// Acquire waits for a free slot or for ctx to end. The returned release frees the slot; calling it more
// than once is harmless.
func (p *Pool) Acquire(ctx context.Context) (release func(), err error) {
	select {
	case p.ch <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for a %s slot: %w", p.name, context.Cause(ctx))
	}
	return p.taken(), nil
}

// TryAcquire takes a slot only if one is free now (the scan API answers 429 rather than queue).
func (p *Pool) TryAcquire() (release func(), ok bool) {
	select {
	case p.ch <- struct{}{}:
	default:
		return nil, false
	}
	return p.taken(), true
}

// taken counts a slot just put into the channel and returns its one-shot release.
func (p *Pool) taken() func() {
	p.active.Add(1)
	var once sync.Once
	return func() {
		once.Do(func() {
			p.active.Add(-1)
			<-p.ch
		})
	}
}

// Name is the pool's name (e.g. "image").
func (p *Pool) Name() string { return p.name }

// Size is the number of slots.
func (p *Pool) Size() int { return cap(p.ch) }

// Active is the number of slots held now.
func (p *Pool) Active() int { return int(p.active.Load()) }
