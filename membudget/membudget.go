// Package membudget admits work by the memory it is expected to hold. Slots count jobs, not bytes: two
// large decodes are admitted as readily as two thumbnails, and together they can take a small edge box
// past its memory. A Budget is a weighted semaphore in bytes: a job asks for its estimate before its
// expensive part and starts only while the sum of what is admitted fits. A job larger than the whole
// budget is not refused (its input is within every declared limit): it waits until nothing else holds
// the budget and then takes all of it, so it runs alone. Waiters are served in order, so a large job is
// not passed over forever by a stream of small ones.
package membudget

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// MinSize is the smallest budget New accepts: below it, the worker's own buffers (a 2048 px variant
// is 16 MiB decoded) would make every image run alone.
const MinSize = 32 << 20

// ErrClosed is the cause of an Acquire on (or waiting in) a closed budget.
var ErrClosed = errors.New("memory budget closed")

// Budget is a weighted semaphore in bytes. Its methods are safe for concurrent use.
type Budget struct {
	size int64

	mu      sync.Mutex
	used    int64
	peak    int64
	queue   []*waiter // in arrival order
	closed  bool
	granted int64 // Acquires that were admitted
	waited  int64 // of those, how many had to wait
	alone   int64 // of those, how many were larger than the budget (ran alone)
}

// waiter is one Acquire that could not be admitted at once; ready is closed when it is.
type waiter struct {
	n     int64
	ready chan struct{}
	err   error // set (with ready closed) when the budget closed under it
}

// New returns a budget of size bytes (at least MinSize).
func New(size int64) (*Budget, error) {
	if size < MinSize {
		return nil, fmt.Errorf("memory budget of %d bytes is below the least, %d MiB", size, MinSize>>20)
	}
	return &Budget{size: size}, nil
}

// Acquire waits until n bytes fit in the budget (all of it when n is larger, with nothing else
// admitted), or until ctx ends or the budget closes. The returned release gives the bytes back; calling
// it more than once is harmless. n ≤ 0 is admitted at once and holds nothing.
func (b *Budget) Acquire(ctx context.Context, n int64) (release func(), err error) {
	if n <= 0 {
		return func() {}, nil
	}
	n = min(n, b.size)
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil, fmt.Errorf("waiting for memory: %w", ErrClosed)
	}
	if len(b.queue) == 0 && b.used+n <= b.size {
		b.admit(n, false)
		b.mu.Unlock()
		return b.releaser(n), nil
	}
	w := &waiter{n: n, ready: make(chan struct{})}
	b.queue = append(b.queue, w)
	b.mu.Unlock()

	select {
	case <-w.ready:
		if w.err != nil {
			return nil, fmt.Errorf("waiting for memory: %w", w.err)
		}
		return b.releaser(n), nil
	case <-ctx.Done():
	}
	b.mu.Lock()
	select {
	case <-w.ready:
		// Admitted (or closed) while ctx ended: give the bytes back, once, here.
		b.mu.Unlock()
		if w.err == nil {
			b.release(n)
		}
	default:
		b.remove(w)
		b.wake() // those behind it may fit now
		b.mu.Unlock()
	}
	return nil, fmt.Errorf("waiting for memory: %w", context.Cause(ctx))
}

// admit counts n bytes as held; b.mu is held.
func (b *Budget) admit(n int64, waited bool) {
	b.used += n
	b.peak = max(b.peak, b.used)
	b.granted++
	if waited {
		b.waited++
	}
	if n == b.size {
		b.alone++
	}
}

// releaser returns the one-shot release of n bytes.
func (b *Budget) releaser(n int64) func() {
	var once sync.Once
	return func() { once.Do(func() { b.release(n) }) }
}

func (b *Budget) release(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= n
	if b.used < 0 {
		panic("membudget: released more than was acquired")
	}
	b.wake()
}

// wake admits the waiters at the head of the queue that fit now, in order; b.mu is held.
func (b *Budget) wake() {
	for len(b.queue) > 0 {
		w := b.queue[0]
		if b.used+w.n > b.size {
			return
		}
		b.queue = b.queue[1:]
		b.admit(w.n, true)
		close(w.ready)
	}
}

func (b *Budget) remove(w *waiter) {
	for i, q := range b.queue {
		if q == w {
			b.queue = append(b.queue[:i], b.queue[i+1:]...)
			return
		}
	}
}

// Close fails every waiter and every later Acquire with ErrClosed; what is admitted stays admitted
// until released. Closing again does nothing.
func (b *Budget) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	for _, w := range b.queue {
		w.err = ErrClosed
		close(w.ready)
	}
	b.queue = nil
	return nil
}

// Stats is a reading of the budget, for the console and metrics.
type Stats struct {
	Size    int64 // the budget, bytes
	InUse   int64 // bytes admitted now
	Peak    int64 // the most bytes admitted at once so far
	Waiting int   // Acquires waiting for memory now
	// Admitted counts the Acquires admitted so far; Waited those of them that had to wait, Alone those
	// larger than the budget (each ran alone).
	Admitted, Waited, Alone int64
}

// Stats reads the budget.
func (b *Budget) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return Stats{Size: b.size, InUse: b.used, Peak: b.peak, Waiting: len(b.queue),
		Admitted: b.granted, Waited: b.waited, Alone: b.alone}
}

// Size is the budget in bytes.
func (b *Budget) Size() int64 { return b.size }
