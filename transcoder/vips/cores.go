package vips

// #include "shim.h"
import "C"

import (
	"runtime"
	"sync"
)

// Cores lends the cores no image job is using to the jobs that run, for work a job can split (issue
// 37): libvips runs each operation on one thread (Concurrency), so a job alone on a 2-core machine
// used one core while the other idled, and a burst that the memory budget held to one job at a time
// ran at half the machine. A job holds one core while it runs (Enter); a part of it that can run
// beside the rest (the encode of a smaller variant) borrows another with Borrow, only when fewer
// cores are held than the process may use (GOMAXPROCS, which follows the container's CPU limit), and
// returns it as soon as that part is done. A job that starts while cores are lent does not wait: the
// lent cores come back within one encode, and no new one is lent while every core is held. The pool
// counts image jobs only; ffmpeg's threads are the video lane's and are not counted here.
type Cores struct {
	mu   sync.Mutex
	held int // jobs that have entered and not left, plus cores lent
	max  func() int
}

// cores is the process's pool: libvips' threads are the process's, whoever starts them.
var cores = &Cores{max: func() int { return runtime.GOMAXPROCS(0) }}

// Enter counts a job as running until the returned leave is called (once).
func Enter() (leave func()) { return cores.Enter() }

// Borrow lends an idle core for one part of a job; the caller calls Return after that part.
func Borrow() bool { return cores.Borrow() }

// Return gives back a core Borrow lent.
func Return() { cores.Return() }

// Enter counts a job as running until the returned leave is called; leave is idempotent.
func (c *Cores) Enter() (leave func()) {
	c.mu.Lock()
	c.held++
	c.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			c.held--
			c.mu.Unlock()
		})
	}
}

// Borrow lends a core when fewer than max are held.
func (c *Cores) Borrow() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.held >= c.max() {
		return false
	}
	c.held++
	return true
}

// Return gives back a lent core.
func (c *Cores) Return() {
	c.mu.Lock()
	c.held--
	c.mu.Unlock()
}

// threadsMu orders the settings of libvips' thread count, which is process-global and read when a
// pipeline starts (libvips 8.14): every still's decode sets it just before its pipeline, to 1 plus
// the cores it borrowed, under this lock together with the borrowing, and the last widened decode to
// finish sets it back to 1. So a decode that borrowed nothing runs one thread unless a decode that
// borrowed a core idle after it entered widened it meanwhile (that extra thread then has an idle core
// too), and a job that arrives stops the lending at once.
var threadsMu sync.Mutex

// widened counts the decodes running with borrowed threads.
var widened int

// withThreads gives the libvips pipeline the caller starts next the idle cores as extra threads, and
// returns the function that gives them back when the pipeline is done. One decode borrows at most
// Concurrency threads more: the JPEG decoder is sequential, so beyond a second thread (the resize
// beside the decode) more would wait.
func withThreads() (done func()) {
	threadsMu.Lock()
	defer threadsMu.Unlock()
	lent := 0
	for lent < Concurrency && cores.Borrow() {
		lent++
	}
	if lent > 0 {
		widened++
	}
	C.mw_concurrency_set(C.int(Concurrency + lent))
	return func() {
		if lent == 0 {
			return
		}
		threadsMu.Lock()
		defer threadsMu.Unlock()
		for range lent {
			cores.Return()
		}
		if widened--; widened == 0 {
			C.mw_concurrency_set(C.int(Concurrency))
		}
	}
}

// threads is libvips' thread count for the pipelines that start now.
func threads() int { return int(C.mw_concurrency_get()) }
